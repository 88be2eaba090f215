"""Debugging-conversation pipeline (seed 002), library source: sdists in, proven bugs and conversations out.

The job (run by the template-loader) stores each `*.tar.gz` of the libraries folder as a blob
and publishes one LibraryWorkItem per library; the mutator runs the clean suite, makes and
validates candidates in the sandbox and stores a LibraryResult at the job's item key. The
job then writes instances.jsonl, conversations.jsonl (the deterministic writer), tasks.tar
(a file-edit task per instance under tasks/<instance_id>/), rejects.jsonl and summary.json.
Everything except summary's elapsed_seconds is a function of the inputs and the seed.
"""
from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from pathlib import Path

from pydantic import BaseModel, Field, field_validator

from flawforge.errors import FlawforgeError
from flawforge.jobs.context import JobContext
from flawforge.jobs.pipeline import Pipeline, register
from flawforge.proto.base import jsonl
from flawforge.proto.debugging import LIBRARY_QUEUE, LibraryResult, LibraryWorkItem

TASKS_ARTIFACT = "tasks.tar"


def all_modifiers() -> list[str]:
    from flawforge.debugging.modifiers import REGISTRY

    return sorted(REGISTRY)


class DebugConversationsParams(BaseModel):
    model_config = {"extra": "forbid"}
    libraries: str = Field(description="Folder of library sdists (every *.tar.gz in it), as the worker sees it.")
    per_library: int = Field(10, ge=1, le=10_000, description="Candidate bugs validated per library.")
    modifiers: list[str] = Field(default_factory=all_modifiers, min_length=1, description="Bug modifiers to use.")
    seed: int = Field(0, description="Seed of the choice of candidates.")

    @field_validator("modifiers")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        known = set(all_modifiers())
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown modifier(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return sorted(set(value))


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
    return {
        "libraries": len(results),
        "tried": tried,
        "valid": valid,
        "yield": round(valid / tried, 4) if tried else None,
        "by_source": {f"{r.source}-{r.version}": {
            "tests": r.baseline.tests if r.baseline else 0,
            "baseline_passing": len(r.baseline.passing) if r.baseline else 0,
            "flaky": r.baseline.flaky if r.baseline else [],
            "candidates": r.candidates_total, "tried": r.tried, "valid": len(r.instances)} for r in results},
        "by_modifier": dict(sorted(by_modifier.items())),
        "rejects_by_reason": dict(sorted(Counter(j.reason for r in results for j in r.rejects).items())),
        "elapsed_seconds": round(elapsed, 3),
    }


def run(ctx: JobContext, params: DebugConversationsParams) -> None:
    from flawforge.debugging.conversation import deterministic_tar, task_files, write_conversation
    from flawforge.debugging.layout import read_archive

    started = time.monotonic()
    bus, store = ctx.platform.bus, ctx.platform.store
    archives = library_archives(params.libraries)
    bus.declare(LIBRARY_QUEUE)
    attempt = uuid.uuid4().hex[:12]
    contents: dict[str, bytes] = {}
    names = []
    for number, archive in enumerate(archives):
        data = archive.read_bytes()
        contents[archive.name] = data
        ref = store.put(ctx.input_key(f"{attempt}-{archive.name}"), data, "application/gzip")
        item = f"{number}-{archive.name}.json"
        names.append(item)
        bus.publish(LIBRARY_QUEUE, LibraryWorkItem(job_id=ctx.job_id, archive=ref, archive_name=archive.name,
                                                   per_library=params.per_library, modifiers=params.modifiers,
                                                   seed=params.seed, item_name=item))
    stored = ctx.wait_for_items(names, message="validating bugs")
    results = [LibraryResult.model_validate_json(stored[name]) for name in names]
    instances = sorted((i for r in results for i in r.instances), key=lambda i: i.instance_id)
    rejects = sorted((j for r in results for j in r.rejects),
                     key=lambda j: (j.source, j.version, j.modifier or "", j.hash8 or "", j.reason))
    projects = {(r.source, r.version): read_archive(contents[archive.name])
                for r, archive in zip(results, archives)}
    conversations, tasks = [], {}
    for instance in instances:
        project = projects[instance.source, instance.version]
        clean = project[instance.path].decode("utf-8")
        conversations.append(write_conversation(instance, clean, inline=True))
        referenced = write_conversation(instance, clean, inline=False)
        for path, data in task_files(instance, project, referenced).items():
            tasks[f"tasks/{instance.instance_id}/{path}"] = data
    ctx.put_artifact("instances.jsonl", jsonl(instances))
    ctx.put_artifact("conversations.jsonl", jsonl(conversations))
    ctx.put_artifact(TASKS_ARTIFACT, deterministic_tar(tasks))
    ctx.put_artifact("rejects.jsonl", jsonl(rejects))
    summary = summary_of(results, time.monotonic() - started)
    ctx.put_artifact("summary.json", (json.dumps(summary, indent=1) + "\n").encode())


PIPELINE = register(Pipeline(name="debug-conversations",
                             description="Bugs injected into real libraries, proven per test in the sandbox, with "
                                         "debugging conversations and file-edit tasks.",
                             params=DebugConversationsParams, owner="template-loader", run=run))
