"""The mutator's worker: one problem's template in, its candidates and rejects out (at the job's item key)."""
from __future__ import annotations

import logging
from functools import lru_cache

from flawforge.errors import FlawforgeError
from flawforge.jobs.context import JobContext
from flawforge.pipelines.math_errors import PROBLEM_QUEUE
from flawforge.proto.math import ProblemCandidates, ProblemResult, ProblemTemplate, ProblemWorkItem, Reject
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Consumer

log = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def sandbox():
    """The process's sandbox, shared by its worker threads; started with the first work item."""
    from flawforge.sandbox import Sandbox

    return Sandbox()


def sandbox_ready(platform: Platform) -> None:
    """Readiness: the sandbox the work items run in can start here."""
    sandbox()


def make_problem_handler(platform: Platform):
    from flawforge.math.generate import generate_for_problem

    def handle(message: ProblemWorkItem) -> None:
        store = platform.store
        template = ProblemTemplate.model_validate_json(store.get_verified(message.template))
        try:
            output = generate_for_problem(template, sandbox(), list(message.families), message.seed)
            produced = ProblemCandidates(problem_index=template.problem_index, candidates=output.candidates,
                                         rejects=output.rejects)
        except FlawforgeError:
            raise  # the platform failed, not the template: retried by the bus
        except Exception as exc:  # a template that breaks generation is a reject, never a lost problem
            log.exception("generation failed for problem %d", template.problem_index)
            produced = ProblemCandidates(problem_index=template.problem_index, candidates=[], rejects=[Reject(
                problem_index=template.problem_index, tier=template.tier, template_model=template.template_model,
                reason="generation_failed", detail=f"{type(exc).__name__}: {exc}")])
        ref = store.put_content("math/results", produced.model_dump_json().encode(), ".json")
        result = ProblemResult(job_id=message.job_id, problem_index=template.problem_index, result=ref)
        store.put(JobContext(platform, message.job_id).item_key(f"{template.problem_index}.json"),
                  result.model_dump_json().encode(), "application/json")

    return handle


# Problems one mutator process works on at once. Each problem's mutants already run in parallel, but
# between its batches a problem waits on its own serial steps; a few problems at once keep the sandbox busy.
CONCURRENT_PROBLEMS = 4
PROBLEM_CONSUMERS = tuple(Consumer(queue=PROBLEM_QUEUE, make_handler=make_problem_handler)
                          for _ in range(CONCURRENT_PROBLEMS))
