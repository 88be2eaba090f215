"""The math job's catalog: problems' candidates joined in problem order as their results land."""
from __future__ import annotations

import pytest

from flawforge.errors import FlawforgeError
from flawforge.jobs.context import JobContext
from flawforge.jobs.store import JobStore
from flawforge.pipelines.math_errors import _catalog
from flawforge.proto.math import ProblemResult
from flawforge.assembly import platform_for
from flawforge.settings import Settings


@pytest.fixture
def ctx(tmp_path):
    platform = platform_for(Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path)))
    status = JobStore(platform.store).create("math-errors", {})
    yield JobContext(platform, status.job_id)
    platform.close()


def _land(ctx: JobContext, item: int, problem_index: int, lines: bytes) -> None:
    result = ProblemResult(job_id=ctx.job_id, problem_index=problem_index, error_types=[], rejects=[])
    ctx.platform.store.put(ctx.item_key(f"{item}.jsonl"), result.with_candidates(lines))


def test_candidates_are_joined_in_problem_order_whatever_order_results_land_in(ctx):
    for index in (9, 2, 5):
        _land(ctx, index, index, f"candidates of {index}\n".encode())
    results: list[ProblemResult] = []
    assert b"".join(_catalog(ctx, [2, 5, 9], results)) == b"candidates of 2\ncandidates of 5\ncandidates of 9\n"
    assert sorted(result.problem_index for result in results) == [2, 5, 9]


def test_a_result_filed_under_another_problem_stops_the_job_instead_of_cutting_the_catalog(ctx):
    _land(ctx, 2, 2, b"two\n")
    _land(ctx, 5, 6, b"six\n")
    with pytest.raises(FlawforgeError, match=r"no result for problem 5 .*problems \[6\]"):
        b"".join(_catalog(ctx, [2, 5], []))
