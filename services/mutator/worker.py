"""The mutator's worker: one problem's template in, its candidates and rejects out (at the job's item key).

Generation is pure Python between its sandbox calls: on the consumer threads it would share one
core under the interpreter lock. So each problem is generated in a pool of processes, one per
problem in flight, each with its own sandbox; the consumer threads only move blobs. What a
problem yields depends on its template, families and seed, never on the process. The processes
start from a fork server, which imports the main module: a script that runs these workers (an
embedded stack, say) needs the usual `if __name__ == "__main__":` guard.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import lru_cache
from typing import NamedTuple

from flawforge.errors import FlawforgeError
from flawforge.jobs.context import JobContext
from flawforge.pipelines.math_errors import PROBLEM_QUEUE, catalog_order
from flawforge.proto.math import ProblemResult, ProblemWorkItem, Reject, ValidatedTemplate
from flawforge.proto.sandbox import ExecutionResult
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Consumer, collect_garbage_rarely

log = logging.getLogger(__name__)

# Generation processes, one per core (more only add sandboxes and switching; measured on 2 cores, 4 cost
# a fifth more CPU per problem).
GENERATION_PROCESSES = max(2, len(os.sched_getaffinity(0)))
# Work items in flight: twice the processes, so that each process has the next problem queued while a
# consumer thread moves the last one's blobs.
CONCURRENT_PROBLEMS = 2 * GENERATION_PROCESSES


@lru_cache(maxsize=1)
def sandbox():
    """The generation process's sandbox; started with its first problem."""
    from flawforge.sandbox import Sandbox

    return Sandbox()


@lru_cache(maxsize=1)
def generation_processes() -> ProcessPoolExecutor:
    """Started with the first work item. They come from a fork server that has imported the mutation
    engine once: quick to start, and never forked from the service's threads."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["flawforge.math.generate", __name__])
    return ProcessPoolExecutor(GENERATION_PROCESSES, mp_context=context, initializer=collect_garbage_rarely)


def start_sandbox() -> None:
    sandbox()


def sandbox_ready(platform: Platform) -> None:
    """Readiness: a generation process can start the sandbox the work items run in."""
    generation_processes().submit(start_sandbox).result()


@lru_cache(maxsize=1)
def warm_up_in_background() -> None:
    """Starts the generation processes and their sandboxes beside the service's own start-up, so the
    first problems do not wait for them. Best effort: a failure here recurs, and is reported, with a work item."""

    def warm_up() -> None:
        try:
            for started in [generation_processes().submit(start_sandbox) for _ in range(GENERATION_PROCESSES)]:
                started.result()
        except Exception as exc:
            log.warning("generation processes did not warm up: %s", exc)

    threading.Thread(target=warm_up, name="mutator-warm-up", daemon=True).start()


class ValidatedRun:
    """The sandbox, except that the template's own traced run of solve() is the one its validation made
    (the same call under the same default limits) rather than another one."""

    def __init__(self, sandbox, code: str, run: ExecutionResult):
        self.sandbox, self.code, self.run = sandbox, code, run

    def trace_call(self, source: str, func: str = "solve") -> ExecutionResult:
        if source == self.code and func == "solve":
            return self.run
        return self.sandbox.trace_call(source, func)

    def trace_batch(self, original: str, variants: list[str], func: str = "solve") -> list[ExecutionResult]:
        if original != self.code or func != "solve":
            return self.sandbox.trace_batch(original, variants, func)
        return [self.run, *(self.sandbox.trace_batch(variants[0], variants[1:], func) if variants else [])]


class GeneratedProblem(NamedTuple):
    candidates_jsonl: bytes  # one Candidate a line, in catalog order
    error_types: list[str]   # each line's error type
    rejects: list[Reject]


def generate_problem(validated_json: bytes, families: list[str], seed: int) -> GeneratedProblem:
    """One problem's candidates and rejects; runs in a generation process."""
    from flawforge.math.generate import generate_for_problem

    validated = ValidatedTemplate.model_validate_json(validated_json)
    template = validated.template
    executor = sandbox() if validated.run is None else ValidatedRun(sandbox(), template.code, validated.run)
    try:
        output = generate_for_problem(template, executor, families, seed)
    except FlawforgeError:
        raise  # the platform failed, not the template: retried by the bus
    except Exception as exc:  # a template that breaks generation is a reject, never a lost problem
        log.exception("generation failed for problem %d", template.problem_index)
        return GeneratedProblem(b"", [], [Reject(
            problem_index=template.problem_index, tier=template.tier, template_model=template.template_model,
            reason="generation_failed", detail=f"{type(exc).__name__}: {exc}")])
    candidates = sorted(output.candidates, key=catalog_order)
    return GeneratedProblem("".join(c.model_dump_json() + "\n" for c in candidates).encode(),
                            [c.error_type for c in candidates], output.rejects)


def make_problem_handler(platform: Platform):
    warm_up_in_background()

    def handle(message: ProblemWorkItem) -> None:
        store = platform.store
        validated_json = store.get_verified(message.template)
        try:
            produced = generation_processes().submit(generate_problem, validated_json, list(message.families),
                                                     message.seed).result()
        except BrokenProcessPool:
            generation_processes.cache_clear()  # the next work item starts a new pool
            raise FlawforgeError(f"a generation process died on problem {message.problem_index}") from None
        result = ProblemResult(job_id=message.job_id, problem_index=message.problem_index,
                               error_types=produced.error_types, rejects=produced.rejects)
        store.put(JobContext(platform, message.job_id).item_key(f"{message.problem_index}.jsonl"),
                  result.with_candidates(produced.candidates_jsonl), "application/jsonl")

    return handle


PROBLEM_CONSUMERS = tuple(Consumer(queue=PROBLEM_QUEUE, make_handler=make_problem_handler)
                          for _ in range(CONCURRENT_PROBLEMS))
