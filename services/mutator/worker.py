"""The mutator's worker: a batch of problems' templates in, their candidates and rejects out (at the job's item
key).

Generation is pure Python between its sandbox calls: on the consumer threads it would share one
core under the interpreter lock. So each work item is generated in a worker process, one per
core, each with its own blob-store client (and its own sandbox, once a problem needs one): a
process reads the templates and writes the result itself, and the consumer threads only hand it
work items (two threads to a process, so that a process finishing a work item finds the next one
waiting in its pipe). What a problem yields depends on its template, families and seed, never on
the process or on the other problems of its work item. The processes start from a fork server,
which imports the main module: a script that runs these workers (an embedded stack, say) needs
the usual `if __name__ == "__main__":` guard.
"""
from __future__ import annotations

import atexit
import itertools
import logging
import os
import threading
from functools import lru_cache

from flawforge.blobstore import BlobStore, open_blob_store
from flawforge.errors import FlawforgeError
from flawforge.jobs.context import item_key
from flawforge.proto.math import PROBLEMS, ProblemBatch, ProblemBatchResult, ProblemResult, Reject, ValidatedTemplate
from flawforge.proto.sandbox import ExecutionResult
from flawforge.runtime.platform import Platform
from flawforge.runtime.processes import WorkerProcessDied, WorkerProcesses, interpreter_exiting
from flawforge.runtime.service import Actor, collect_garbage_rarely
from flawforge.settings import Settings

log = logging.getLogger(__name__)

# Generation processes, one per core (more only add sandboxes and switching; measured on 2 cores, 4 cost
# a fifth more CPU per problem).
GENERATION_PROCESSES = max(2, len(os.sched_getaffinity(0)))
# Work items in flight: two a process, so that a process finishing one finds the next one waiting.
CONCURRENT_ITEMS = 2 * GENERATION_PROCESSES


@lru_cache(maxsize=1)
def sandbox(settings_json: str):
    """The generation process's sandbox (by the service's settings), started the first time a problem needs it: the mutants of nearly
    every template are executed by the arithmetic interpreter (3 of the shared corpus's 2,415 chosen
    templates need the sandbox), so in a job most processes never start one. A start that fails raises
    SandboxUnavailable: the platform's failure, retried by the bus, never a template's reject."""
    from flawforge.sandbox import Sandbox

    return Sandbox.from_settings(Settings.model_validate_json(settings_json))


_generation_processes: WorkerProcesses | None = None
_generation_processes_lock = threading.Lock()  # lru_cache would let two threads asking at once build a set each


def generation_processes() -> WorkerProcesses:
    """Started when the workers start (warm_up_in_background). Their fork server has imported the mutation
    engine once. One set a service process."""
    global _generation_processes
    with _generation_processes_lock:
        if _generation_processes is None:
            _generation_processes = WorkerProcesses(GENERATION_PROCESSES, preload=["flawforge.math.generate", __name__],
                                                    initializer=collect_garbage_rarely)
        return _generation_processes


def start_sandbox(settings_json: str) -> None:
    sandbox(settings_json)


def sandbox_ready(platform: Platform) -> None:
    """Readiness: a generation process can start the sandbox the work items that need one run in (the first
    process starts its own here)."""
    generation_processes().call(0, start_sandbox, platform.settings.model_dump_json())


WARM_UP_EXIT_WAIT_S = 15.0  # at most, a thread


@lru_cache(maxsize=1)
def warm_up_in_background() -> None:
    """Starts the generation processes beside the service's own start-up, so the first problems do not wait
    for them. Best effort: a failure here recurs, and is reported, with a work item."""

    def warm_up(slot: int) -> None:
        try:
            generation_processes().call(slot, os.getpid)  # any call: it returns once the process is up
        except Exception as exc:
            if not interpreter_exiting():  # the run ended before its processes were up (its job failed at once)
                log.warning("generation process %d did not warm up: %s", slot, exc)

    threads = [threading.Thread(target=warm_up, args=(slot,), name=f"mutator-warm-up-{slot}", daemon=True)
               for slot in range(GENERATION_PROCESSES)]
    for thread in threads:
        thread.start()

    def let_starts_finish() -> None:
        # A process the fork server is starting when this one exits reads no start-up data and prints a
        # traceback (EOFError) on the user's terminal: a run that fails at once waits for its starts to end.
        for thread in threads:
            thread.join(WARM_UP_EXIT_WAIT_S)

    atexit.register(let_starts_finish)


class ValidatedRun:
    """The process's sandbox, except that the template's own traced run of solve() is the one its validation
    made (the same call under the same default limits) rather than another one."""

    def __init__(self, code: str, run: ExecutionResult | None, settings_json: str):
        self.code, self.run, self.settings_json = code, run, settings_json

    def trace_call(self, source: str, func: str = "solve") -> ExecutionResult:
        if source == self.code and func == "solve" and self.run is not None:
            return self.run
        return sandbox(self.settings_json).trace_call(source, func)

    def trace_batch(self, original: str, variants: list[str], func: str = "solve") -> list[ExecutionResult]:
        if original != self.code or func != "solve" or self.run is None:
            return sandbox(self.settings_json).trace_batch(original, variants, func)
        return [self.run, *(sandbox(self.settings_json).trace_batch(variants[0], variants[1:], func)
                            if variants else [])]


@lru_cache(maxsize=4)
def blob_store(settings_json: str) -> BlobStore:
    """The generation process's client of the service's blob store (by the service's settings)."""
    return open_blob_store(Settings.model_validate_json(settings_json))


def generate_batch(settings_json: str, message_json: str) -> None:
    """One work item, in a generation process: its problems' templates from the blob store in, their results
    (candidates and rejects) to the job's item key as one ProblemBatchResult. The blobs move here, not through
    the service's threads."""
    store = blob_store(settings_json)
    message = ProblemBatch.model_validate_json(message_json)
    lines = store.get_verified(message.templates).splitlines()  # JSON lines: no raw newline inside one
    if len(lines) != len(message.problems):
        raise FlawforgeError(f"work item {message.item} of job {message.job_id} names {len(message.problems)} "
                             f"problems but its templates blob holds {len(lines)}")
    results = []
    for problem, line in zip(message.problems, lines):
        validated = ValidatedTemplate.model_validate_json(line)
        if validated.template.problem_index != problem.problem_index:
            raise FlawforgeError(f"work item {message.item} of job {message.job_id}: the template for problem "
                                 f"{problem.problem_index} is problem {validated.template.problem_index}'s")
        results.append(_problem_result(message, problem.seed, validated, settings_json))
    store.put(item_key(message.job_id, message.item), ProblemBatchResult(problems=results).model_dump_json().encode(),
              "application/json")


def _problem_result(message: ProblemBatch, seed: int, validated: ValidatedTemplate,
                    settings_json: str) -> ProblemResult:
    """One problem's result, its candidates in catalog order."""
    from flawforge.math.generate import catalog_order, generate_for_problem

    template = validated.template
    executor = ValidatedRun(template.code, validated.run, settings_json)
    try:
        output = generate_for_problem(template, executor, list(message.families), seed, message.caps,
                                      with_traces=message.with_traces)
        candidates, rejects = sorted(output.candidates, key=catalog_order), output.rejects
    except FlawforgeError:
        raise  # the platform failed, not the template: retried by the bus
    except Exception as exc:  # a template that breaks generation is a reject, never a lost problem
        log.exception("generation failed for problem %d", template.problem_index)
        candidates, rejects = [], [Reject(
            problem_index=template.problem_index, tier=template.tier, template_model=template.template_model,
            reason="generation_failed", detail=f"{type(exc).__name__}: {exc}")]
    return ProblemResult(problem_index=template.problem_index, candidates=candidates, rejects=rejects)


_HANDLERS = itertools.count()


def make_problem_handler(platform: Platform):
    warm_up_in_background()
    settings_json = platform.settings.model_dump_json()
    slot = next(_HANDLERS) % GENERATION_PROCESSES  # the consumers share the processes evenly

    def handle(message: ProblemBatch) -> None:
        try:
            generation_processes().call(slot, generate_batch, settings_json, message.model_dump_json())
        except WorkerProcessDied as exc:  # the next work item gets a new process
            raise FlawforgeError(f"a generation process died on work item {message.item} (problems "
                                 f"{[p.problem_index for p in message.problems]}): {exc}") from None

    return handle


PROBLEM_ACTOR = Actor(PROBLEMS, make_problem_handler, concurrency=CONCURRENT_ITEMS)
