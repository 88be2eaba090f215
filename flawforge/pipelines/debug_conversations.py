"""Debugging-conversation pipeline (seed 002): library sdists or catalog scenarios in, proven bugs and conversations out.

The job (run by the template-loader) stores each `*.tar.gz` of the libraries folder as a blob
and publishes one LibraryWorkItem per library; the mutator runs the clean suite, makes and
validates candidates in the sandbox and stores a LibraryResult at the job's item key. The
job then writes instances.jsonl, conversations.jsonl (the assistant turns by `model` through the
gateway where they state only facts, else by the deterministic writer), tasks.tar (a file-edit
task per instance under tasks/<instance_id>/), rejects.jsonl and summary.json. Everything except
summary's elapsed_seconds is a function of the inputs, the seed and the model's replies.

With a catalog instead, the job itself claims entries (conditional create in the blob store), has the model
write each through the gateway (structured output against ScenarioReply) and validates its candidates in the
sandbox: the model's variants, then inversions, then perturbations, the first valid one kept; a scenario with
none is tried again with a new seed up to `retries` times, then skipped.
"""
from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from flawforge.errors import BlobNotFound, FlawforgeError
from flawforge.inputs import InputFile, InputFolder, read_input
from flawforge.jobs.context import JobContext
from flawforge.jobs.pipeline import Pipeline, register
from flawforge.proto.base import jsonl
from flawforge.proto.debugging import LIBRARIES, TESTS_PER_CANDIDATE, LibraryResult, LibraryWorkItem
from flawforge.sandbox.suites import SUITE_WORKERS, suite_sandbox

# What an agent gets (tasks/<task id>/) and the answers beside it (solutions/<task id>.json): one file each.
TASKS_ARTIFACT, SOLUTIONS_ARTIFACT = "tasks.tar", "solutions.tar"
# A scenario's candidates after the model's own variants: this many inversions, then this many perturbations.
CANDIDATES_PER_KIND = 4


def all_modifiers() -> list[str]:
    """The registry's modifiers, `combined` (valid single bugs of one file put together) and `lm_rewrite` (a
    model's rewrites, made only where the run names a model)."""
    from flawforge.debugging.combined import MODIFIER as COMBINED
    from flawforge.debugging.modifiers import REGISTRY
    from flawforge.debugging.modifiers.lm_rewrite import LmRewrite

    return sorted([*REGISTRY, COMBINED, LmRewrite.name])


class DebugConversationsParams(BaseModel):
    model_config = {"extra": "forbid"}
    libraries: InputFolder | None = Field(None, description="Folder of library sdists (every *.tar.gz in it), as "
                                                            "the worker sees it, under the data roots.")
    catalog: Literal["default"] | InputFile | None = Field(
        None, description="Scenario catalog (JSON {'entries': [{domain, topic, subtopic}]}) under the data roots; "
                          "'default': the shipped one.")
    count: int = Field(1, ge=1, le=10_000, description="Scenarios to turn into conversations.")
    model: str | None = Field(None, description="The model that writes scenarios, the conversations' assistant "
                                                "turns, the problem statements and the lm_rewrite modifier's bugs, as "
                                                "the llm-gateway serves it (without one, conversations and "
                                                "statements come from the deterministic writer and there are no "
                                                "LM-rewritten bugs).")
    retries: int = Field(3, ge=0, le=20, description="New seeds for a scenario without a valid bug, then skipped.")
    per_library: int = Field(10, ge=1, le=10_000, description="Candidate bugs validated per library.")
    tests_per_candidate: int = Field(TESTS_PER_CANDIDATE, ge=1, le=100_000,
                                     description="At most this many of the tests that can notice a candidate bug "
                                                 "(those that executed its function) run it, spread evenly over the "
                                                 "quick ones of the test files cheapest to collect (four times as "
                                                 "many more where they all pass); its instance lists only tests "
                                                 "that ran.")
    modifiers: list[str] = Field(default_factory=all_modifiers, min_length=1, description="Bug modifiers to use.")
    seed: int = Field(0, ge=0, lt=1 << 63, description="Seed of the choice of candidates.")
    trajectories: bool = Field(True, description="Write an agent trajectory per instance (two or more suite runs "
                                                 "each, on its task folder).")
    solver: str | None = Field(None, description="A model, as the llm-gateway serves it, that tries each task with "
                                                 "the trajectories' tools (solver_tries times, in the sandbox); each "
                                                 "instance records its solve rate, solver.jsonl every try.")
    solver_tries: int = Field(3, ge=1, le=20, description="Tries of the solver at each task.")
    solver_turns: int = Field(30, ge=1, le=200, description="Replies (each one tool call) a solver's try may take.")

    @field_validator("modifiers")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        known = set(all_modifiers())
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown modifier(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return sorted(set(value))

    @model_validator(mode="after")
    def _one_source(self) -> "DebugConversationsParams":
        if (self.libraries is None) == (self.catalog is None):
            raise ValueError("give either libraries or catalog")
        if self.catalog is not None and not self.model:
            raise ValueError("a catalog needs a model to write its scenarios")
        return self


def library_archives(folder: str) -> list[Path]:
    path = Path(folder)
    if not path.is_dir():
        raise FlawforgeError(f"libraries folder {folder} does not exist")
    archives = sorted(path.glob("*.tar.gz"))
    if not archives:
        raise FlawforgeError(f"no *.tar.gz in {folder}")
    return archives


def summary_of(results: list[LibraryResult], elapsed: float) -> dict:
    tried = sum(r.tried for r in results)
    valid = sum(len(r.instances) for r in results)
    by_modifier: dict[str, dict] = {}
    for result in results:
        for modifier, count in result.tried_by_modifier.items():
            entry = by_modifier.setdefault(modifier, {"tried": 0, "valid": 0})
            entry["tried"] += count
        for instance in result.instances:
            by_modifier[instance.modifier]["valid"] += 1
    for entry in by_modifier.values():
        entry["yield"] = round(entry["valid"] / entry["tried"], 4) if entry["tried"] else None
        entry["share"] = round(entry["valid"] / valid, 4) if valid else None  # of all kept instances
    return {
        "libraries": len(results),
        "tried": tried,
        "valid": valid,
        "yield": round(valid / tried, 4) if tried else None,
        "by_source": {f"{r.source}-{r.version}": {
            "tests": r.baseline.tests if r.baseline else 0,
            "baseline_passing": len(r.baseline.passing) if r.baseline else 0,
            "flaky": r.baseline.flaky if r.baseline else [],
            "candidates": r.candidates_total, "tried": r.tried, "valid": len(r.instances),
            "environment": r.environment.model_dump(mode="json") if r.environment else None,
            "excluded": [e.model_dump(mode="json") for e in r.excluded]} for r in results},
        "by_modifier": dict(sorted(by_modifier.items())),
        # Valid candidates re-run by node id in fresh units before anything is written; only those that
        # reproduced are instances.
        "final_gate": {"checked": sum(r.gate_checked for r in results), "emitted": valid,
                       "dropped_by_reason": dict(sorted(Counter(j.reason for r in results for j in r.rejects
                                                                if j.reason.startswith("gate_")).items()))},
        "rejects_by_reason": dict(sorted(Counter(j.reason for r in results for j in r.rejects).items())),
        "elapsed_seconds": round(elapsed, 3),
    }


def run(ctx: JobContext, params: DebugConversationsParams) -> None:
    started = time.monotonic()
    if params.catalog is not None:
        results, projects = run_scenarios(ctx, params)
    else:
        results, projects = run_libraries(ctx, params)
    from flawforge.debugging.solver import Solver

    solver = Solver(params.solver, params.solver_tries, params.solver_turns, params.seed) if params.solver else None
    write_outputs(ctx, results, projects, started, params.model, params.trajectories, solver)


def run_libraries(ctx: JobContext, params: DebugConversationsParams):
    from flawforge.debugging.layout import read_archive
    from flawforge.proto.debugging import BugReject

    store = ctx.platform.store
    archives = library_archives(params.libraries)
    # Names the inputs and the work items: why, in the house rule's third part (docs/architecture.md).
    attempt = uuid.uuid4().hex[:12]
    contents: dict[str, bytes] = {}
    names = []
    folder = os.path.realpath(params.libraries)
    for archive in archives:  # every input read before any is published: a refused one fails the job at once
        contents[archive.name] = read_input(archive, within=folder)  # a regular file in the folder, bounded
    for number, archive in enumerate(archives):
        data = contents[archive.name]
        ref = store.put(ctx.input_key(f"{attempt}-{archive.name}"), data, "application/gzip")
        item = f"{attempt}-{number}-{archive.name}.json"
        names.append(item)
        ctx.publish(LIBRARIES, LibraryWorkItem(job_id=ctx.job_id, archive=ref, archive_name=archive.name,
                                               per_library=params.per_library,
                                               tests_per_candidate=params.tests_per_candidate,
                                               modifiers=params.modifiers,
                                               seed=params.seed, item_name=item, model=params.model))
    stored = dict(ctx.results_as_done(LIBRARIES, names, message="validating bugs"))
    results = [stored[name] for name in names]
    projects = {}
    for result, archive in zip(results, archives):
        if not result.instances:  # only instances need their library's files
            continue
        try:
            projects[result.source, result.version] = read_archive(contents[archive.name])
        except FlawforgeError as exc:  # read here as the worker read it; should they differ, only this library is lost
            result.rejects.append(BugReject(source=result.source, version=result.version, reason="unusable_library",
                                            detail=str(exc)))
            result.instances = []
    return results, projects


def claim_key(entry_id: str) -> str:
    """The blob whose conditional creation takes a catalog entry: two workers never take the same one. It holds
    the job and the attempt that took it."""
    return f"debugging/catalog/{entry_id}.json"


class CatalogClaims:
    """The catalog entries one attempt of a job holds. An entry is taken by creating its claim conditionally, so
    the claim lasts as long as the blob store; one that an earlier attempt of the same job holds (the job run
    again after its worker died) is taken back. A failed or cancelled attempt emits nothing, so `release` gives
    every entry it holds back to later jobs; the claim of a job that stopped before it could (an embedded run
    ended by Ctrl-C: its record says cancel requested, or failed) is taken over, by one job only."""

    def __init__(self, jobs, job_id: str):
        self.jobs = jobs
        self.store = jobs.store
        self.job_id = job_id
        self.attempt = uuid.uuid4().hex[:12]
        self.held: list[str] = []

    def take(self, entry: str) -> bool:
        key = claim_key(entry)
        record = json.dumps({"job_id": self.job_id, "attempt": self.attempt}).encode()
        if not self.store.put_if_absent(key, record):
            try:
                holder = json.loads(self.store.get(key))
            except BlobNotFound:  # released since: free again
                holder = None
            if holder is None:
                if not self.store.put_if_absent(key, record):
                    return False
            elif holder["job_id"] == self.job_id or (self._stopped(holder["job_id"]) and self.store.put_if_absent(
                    f"debugging/catalog-taken-over/{entry}/{holder['job_id']}-{holder.get('attempt')}", record)):
                self.store.put(key, record, "application/json")
            else:
                return False
        self.held.append(entry)
        return True

    def _stopped(self, job_id: str) -> bool:
        """Whether the job will never emit what it claimed: it failed, or was cancelled, or its cancel was asked
        for and it did not succeed."""
        from flawforge.jobs.store import JobNotFound
        from flawforge.proto.jobs import JobState

        try:
            job = self.jobs.get(job_id)
        except JobNotFound:
            return False
        return job.state in (JobState.failed, JobState.cancelled) or (
            job.cancel_requested and job.state != JobState.succeeded)

    def release(self) -> None:
        """Deletes the claims this attempt holds, but not one another job took over meanwhile."""
        for entry in self.held:
            try:
                if json.loads(self.store.get(claim_key(entry))).get("attempt") == self.attempt:
                    self.store.delete(claim_key(entry))
            except BlobNotFound:
                pass
        self.held.clear()


def run_scenarios(ctx: JobContext, params: DebugConversationsParams):
    """Catalog entries in a seeded order; each one not taken before is claimed, written by the model, validated
    (retried with a new seed when no candidate is a valid bug) or skipped. A reply that does not parse is a
    reject; a provider that cannot answer (unreachable, failing, the model unknown) fails the job, and a failed
    or cancelled job gives its claims back."""
    import random

    from flawforge.debugging.environments import EnvironmentBuilder
    from flawforge.debugging.generate import validate_scenario
    from flawforge.debugging.scenarios import (default_catalog, entry_id, project_archive, project_files,
                                               read_catalog, scenario_candidates, scenario_request)
    from flawforge.llm.errors import InvalidModelOutput
    from flawforge.llm.gateway import Gateway
    from flawforge.llm.limits import CallScope
    from flawforge.proto.debugging import BugReject, ScenarioBrief, ScenarioReply

    if params.catalog == "default":
        entries = read_catalog(default_catalog(), "the shipped catalog")
    else:
        try:
            entries = read_catalog(read_input(params.catalog).decode("utf-8"), params.catalog)
        except OSError as exc:
            raise FlawforgeError(f"cannot read catalog {params.catalog}: {exc.strerror or exc}") from None
    order = sorted(entries, key=entry_id)
    random.Random(params.seed).shuffle(order)
    store = ctx.platform.store
    gateway = Gateway.from_settings(store, ctx.platform.settings)
    environments = EnvironmentBuilder.from_settings(ctx.platform.settings)
    scope = CallScope(job_id=ctx.job_id, is_cancelled=lambda: ctx.jobs.get(ctx.job_id).cancel_requested)
    claims = CatalogClaims(ctx.jobs, ctx.job_id)
    results: list[LibraryResult] = []
    projects: dict = {}
    try:
        for entry in order:
            if len(results) >= params.count:
                break
            name = entry_id(entry)
            ctx.check_cancelled()
            if not claims.take(name):
                continue  # taken by an earlier job or another worker
            result = LibraryResult(source=name, version="1")
            for attempt in range(params.retries + 1):
                seed = params.seed * 1000 + attempt
                outcome = gateway.structured(scenario_request(entry, params.model, seed), ScenarioReply, scope)
                if outcome.value is None:
                    if not isinstance(outcome.error, InvalidModelOutput):
                        ctx.check_cancelled()
                        raise outcome.error  # no reply at all: the provider's failure, not the model's
                    result.rejects.append(BugReject(source=name, version="1", reason="invalid_reply",
                                                    detail=f"seed {seed}: {outcome.error}"))
                    continue
                reply = outcome.value
                built = environments.for_library(project_files(reply), reply.module_name)
                instance, rejects, tried = validate_scenario(
                    suite_sandbox(ctx.platform.settings.model_dump_json()), project_archive(reply), name,
                    f"{reply.module_name}.py", scenario_candidates(reply, CANDIDATES_PER_KIND),
                    environment=built.environment, environment_path=built.path)
                result.rejects += rejects
                for modifier, n in tried.items():
                    result.tried_by_modifier[modifier] = result.tried_by_modifier.get(modifier, 0) + n
                    result.tried += n
                if instance is not None:
                    brief = ScenarioBrief(problem_statement=reply.problem_statement, outline=reply.outline)
                    result.instances.append(instance.model_copy(update={"scenario": brief}))
                    projects[name, "1"] = project_files(reply)
                    break
                result.rejects.append(BugReject(source=name, version="1", reason="no_valid_bug",
                                                detail=f"seed {seed}: no candidate fails a test that passes clean"))
            else:
                result.rejects.append(BugReject(source=name, version="1", reason="skipped",
                                                detail=f"no valid bug after {params.retries + 1} attempts"))
            result.tried_by_modifier = dict(sorted(result.tried_by_modifier.items()))
            results.append(result)
            ctx.progress(len(results), params.count, "scenarios")
    except BaseException:
        claims.release()
        raise
    finally:
        gateway.close()
    return results, projects


def model_replies(ctx: JobContext, instances: list, projects: dict, model: str) -> tuple[dict, list[dict]]:
    """The model's assistant turns for each instance, through the gateway, where they state nothing the facts do
    not; and for the others, why the deterministic writer is used instead."""
    from flawforge.debugging.conversation import contradictions, conversation_request
    from flawforge.llm.gateway import Gateway
    from flawforge.proto.debugging import ConversationReply

    cleans = [projects[i.source, i.version][i.path].decode("utf-8") for i in instances]
    gateway = Gateway.from_settings(ctx.platform.store, ctx.platform.settings)
    try:
        outcomes = gateway.structured_many([conversation_request(i, clean, model) for i, clean in zip(instances, cleans)],
                                           ConversationReply)
    finally:
        gateway.close()
    replies, fallbacks = {}, []
    for instance, clean, outcome in zip(instances, cleans, outcomes):
        problems = contradictions(outcome.value, instance, clean) if outcome.value is not None else [str(outcome.error)]
        if problems:
            fallbacks.append({"instance_id": instance.instance_id, "reason": "; ".join(problems)[:500]})
        else:
            replies[instance.instance_id] = outcome.value
    return replies, fallbacks


def failures_by_instance(results: list[LibraryResult], projects: dict) -> dict:
    """What each instance's failing tests show (statements.failures_of), read with its project's test files."""
    from flawforge.debugging.statements import failures_of, function_file, sections

    found = {}
    for instance in (i for r in results for i in r.instances):
        files = projects[instance.source, instance.version]
        paths = {t.split("::", 1)[0] for t in instance.FAIL_TO_PASS}
        paths |= {function_file(test, text) for test, text in sections(instance.failing_output).items()}
        found[instance.instance_id] = failures_of(instance, {p: files[p].decode("utf-8", "replace") for p in paths
                                                             if p in files})
    return found


def problem_statements(store, settings, results: list[LibraryResult], failures: dict, model: str | None) -> dict:
    """Gives every instance its problem statement: the model's (through the gateway) where a model is named and its
    reply neither leaks the bug nor misses the facts, else the deterministic writer's; and its difficulty features.
    Returns the counts and the reasons a model's statement was not used."""
    from flawforge.debugging.difficulty import difficulty_of
    from flawforge.debugging.statements import (deterministic_statement, model_statement, reply_problems,
                                                statement_request)
    from flawforge.proto.debugging import StatementReply

    instances = [i for r in results for i in r.instances]
    asked = [i for i in instances if model and failures[i.instance_id]]
    written, fallbacks = {}, []
    if asked:
        from flawforge.llm.gateway import Gateway

        gateway = Gateway.from_settings(store, settings)
        try:
            outcomes = gateway.structured_many([statement_request(i, failures[i.instance_id], model) for i in asked],
                                               StatementReply)
        finally:
            gateway.close()
        for instance, outcome in zip(asked, outcomes):
            problems = (reply_problems(outcome.value, instance, failures[instance.instance_id])
                        if outcome.value is not None else [str(outcome.error)])
            if problems:
                fallbacks.append({"instance_id": instance.instance_id, "reason": "; ".join(problems)[:500]})
            else:
                written[instance.instance_id] = model_statement(outcome.value)
    for result in results:
        result.instances = [i.model_copy(update={"problem_statement": written.get(i.instance_id) or
                                                 deterministic_statement(i, failures[i.instance_id]),
                                                 "difficulty": difficulty_of(i)})
                            for i in result.instances]
    return {"by_model": len(written), "deterministic": len(instances) - len(written), "fallbacks": fallbacks}


def trajectories_of(settings, instances: list, projects: dict, folders: dict, failures: dict) -> list:
    """Each instance's trajectory, its calls made on a fresh copy of its task folder, run_tests in the suite sandbox
    against the instance's environment; instances at once as the sandbox has workers for them."""
    from concurrent.futures import ThreadPoolExecutor

    from flawforge.debugging.environments import EnvironmentBuilder
    from flawforge.debugging.generate import SUITE_LIMITS
    from flawforge.debugging.tools import TaskTools
    from flawforge.debugging.trajectories import write_trajectory

    runner = suite_sandbox(settings.model_dump_json())
    builder = EnvironmentBuilder.from_settings(settings)

    def one(instance):
        tools = TaskTools(instance, folders[instance.instance_id], runner, builder.install(instance.environment),
                          SUITE_LIMITS)
        clean = projects[instance.source, instance.version][instance.path].decode("utf-8")
        return write_trajectory(instance, clean, failures[instance.instance_id], tools)

    with ThreadPoolExecutor(max_workers=SUITE_WORKERS) as pool:
        return list(pool.map(one, instances))


def solver_attempts(settings, store, instances: list, folders: dict, solver, scope=None) -> list:
    """The solver's tries at each instance's task (solver.attempt), each on a fresh copy of its task folder,
    run_tests in the suite sandbox against the instance's environment, the model asked through the gateway; tries at
    once as the sandbox has workers for them."""
    from concurrent.futures import ThreadPoolExecutor

    from flawforge.debugging.environments import EnvironmentBuilder
    from flawforge.debugging.generate import SUITE_LIMITS
    from flawforge.debugging.solver import attempt
    from flawforge.debugging.tools import TaskTools
    from flawforge.llm.gateway import Gateway

    runner = suite_sandbox(settings.model_dump_json())
    builder = EnvironmentBuilder.from_settings(settings)
    gateway = Gateway.from_settings(store, settings)

    def one(job):
        instance, number = job
        tools = TaskTools(instance, folders[instance.instance_id], runner, builder.install(instance.environment),
                          SUITE_LIMITS)
        return attempt(instance, tools, lambda request: gateway.chat(request, scope), solver, number)

    try:
        with ThreadPoolExecutor(max_workers=SUITE_WORKERS) as pool:
            return list(pool.map(one, [(i, n) for i in instances for n in range(solver.tries)]))
    finally:
        gateway.close()


def task_entries(results: list[LibraryResult], projects: dict) -> dict[str, dict[str, bytes]]:
    """Each instance's task folder (task_files); an instance whose names are not plain relative ones (its path, a
    file of its project) moves from its result's instances to its rejects (unsafe_name)."""
    from flawforge.debugging.conversation import task_files
    from flawforge.inputs import UnsafeName
    from flawforge.proto.debugging import BugReject

    folders = {}
    for result in results:
        kept = []
        for instance in result.instances:
            try:
                folders[instance.instance_id] = task_files(instance, projects[instance.source, instance.version])
                kept.append(instance)
            except UnsafeName as exc:
                result.rejects.append(BugReject(source=instance.source, version=instance.version,
                                                modifier=instance.modifier, path=None, qualname=instance.qualname,
                                                hash8=instance.instance_id.rpartition("__")[2],
                                                reason="unsafe_name", detail=str(exc)))
        result.instances = kept
    return folders


def write_outputs(ctx: JobContext, results: list[LibraryResult], projects: dict, started: float,
                  model: str | None = None, with_trajectories: bool = True, solver=None) -> None:
    """instances.jsonl, conversations.jsonl, trajectories.jsonl (an agent's tool calls on each task folder, with what
    they returned), solver.jsonl (with a solver: its tries at each task, each instance given its solve rate),
    tasks.tar (tasks/<task id>/: what an agent gets), solutions.tar (solutions/<task id>.json: the instance, its fix
    and conversation), rejects.jsonl, summary.json; no host path in any of them."""
    from flawforge.debugging.conversation import deterministic_tar, is_test_file, solution_record, write_conversation
    from flawforge.debugging.failures import without_host_paths
    from flawforge.debugging.patches import task_id
    from flawforge.debugging.phrasing import distinct_bigram_ratio

    failures = failures_by_instance(results, projects)
    statements = problem_statements(ctx.platform.store, ctx.platform.settings, results, failures, model)
    folders = task_entries(results, projects)
    instances = sorted((i for r in results for i in r.instances), key=lambda i: i.instance_id)
    rejects = sorted((j.model_copy(update={"detail": without_host_paths(j.detail)})
                      for r in results for j in r.rejects), key=lambda j: (j.source, j.version, j.modifier or "", j.hash8 or "", j.reason))
    attempts = []
    if solver is not None and instances:
        from flawforge.debugging.solver import solver_result
        from flawforge.llm.limits import CallScope

        scope = CallScope(job_id=ctx.job_id, is_cancelled=lambda: ctx.jobs.get(ctx.job_id).cancel_requested)
        attempts = solver_attempts(ctx.platform.settings, ctx.platform.store, instances, folders, solver, scope)
        instances = [i.model_copy(update={"solver": solver_result(solver.model, [
            a for a in attempts if a.instance_id == i.instance_id])}) for i in instances]
    replies, fallbacks = model_replies(ctx, instances, projects, model) if model and instances else ({}, [])
    conversations, tasks, read_only, solutions = [], {}, set(), {}
    for instance in instances:
        clean = projects[instance.source, instance.version][instance.path].decode("utf-8")
        conversation = write_conversation(instance, clean, reply=replies.get(instance.instance_id), model=model,
                                          failures=failures[instance.instance_id])
        conversations.append(conversation)
        folder = f"tasks/{task_id(instance.instance_id)}"
        for path, data in folders[instance.instance_id].items():
            tasks[f"{folder}/{path}"] = data
            if is_test_file(instance, path):
                read_only.add(f"{folder}/{path}")
        solutions[f"solutions/{task_id(instance.instance_id)}.json"] = solution_record(instance, conversation)
    trajectories = (trajectories_of(ctx.platform.settings, instances, projects, folders, failures)
                    if with_trajectories else [])
    ctx.put_artifact("instances.jsonl", jsonl(instances))
    ctx.put_artifact("conversations.jsonl", jsonl(conversations))
    ctx.put_artifact("trajectories.jsonl", jsonl(trajectories))
    if solver is not None:
        ctx.put_artifact("solver.jsonl", jsonl(attempts))
    ctx.put_artifact(TASKS_ARTIFACT, deterministic_tar(tasks, frozenset(read_only)))
    ctx.put_artifact(SOLUTIONS_ARTIFACT, deterministic_tar(solutions))
    ctx.put_artifact("rejects.jsonl", jsonl(rejects))
    summary = summary_of(results, time.monotonic() - started)
    assistant = [m.content for c in conversations for m in c.messages if m.role == "assistant"]
    summary["conversations"] = {"by_model": len(replies), "deterministic": len(instances) - len(replies),
                                "fallbacks": [{**f, "reason": without_host_paths(f["reason"])} for f in fallbacks],
                                # How varied the assistant's words are: distinct word pairs over all, and turns that
                                # another conversation has word for word.
                                "distinct_bigram_ratio": distinct_bigram_ratio(assistant),
                                "repeated_assistant_turns": len(assistant) - len(set(assistant))}
    reasoning = [m.content for t in trajectories for m in t.messages if m.role == "assistant" and m.content]
    summary["trajectories"] = {"written": len(trajectories), "resolved": sum(t.resolved for t in trajectories),
                               "tool_calls": sum(len(m.tool_calls or []) for t in trajectories for m in t.messages),
                               "distinct_bigram_ratio": distinct_bigram_ratio(reasoning)}
    estimates: dict[str, list[float]] = {}
    for instance in instances:
        estimates.setdefault(instance.modifier, []).append(instance.difficulty.estimate)
    summary["difficulty"] = {"mean_estimate_by_modifier": {m: round(sum(e) / len(e), 2)
                                                           for m, e in sorted(estimates.items())}}
    if solver is not None:  # beside the difficulty estimates: recorded, not fitted to them
        rates: dict[str, list[float]] = {}
        for instance in instances:
            rates.setdefault(instance.modifier, []).append(instance.solver.solve_rate)
        summary["solver"] = {"model": solver.model, "tries": solver.tries, "instances": len(instances),
                             "mean_solve_rate": round(sum(sum(r) for r in rates.values()) / len(instances), 4)
                             if instances else None,
                             "mean_solve_rate_by_modifier": {m: round(sum(r) / len(r), 4)
                                                             for m, r in sorted(rates.items())},
                             "ended": dict(sorted(Counter(a.ended for a in attempts).items()))}
    summary["statements"] = {**statements, "fallbacks": [{**f, "reason": without_host_paths(f["reason"])}
                                                          for f in statements["fallbacks"]]}
    # Exclusions' reasons quote installers and tracebacks: the summary, too, names no path of this machine.
    ctx.put_artifact("summary.json", (without_host_paths(json.dumps(summary, indent=1)) + "\n").encode())


PIPELINE = register(Pipeline(name="debug-conversations",
                             description="Bugs injected into real libraries, proven per test in the sandbox, with "
                                         "debugging conversations and file-edit tasks.",
                             params=DebugConversationsParams, owner="template-loader", run=run, resumable=True))
