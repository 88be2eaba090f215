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


def _land(ctx: JobContext, item: str, problems: dict[int, bytes]) -> None:
    ctx.platform.store.put(ctx.item_key(f"{item}.jsonl"), b"".join(
        ProblemResult(job_id=ctx.job_id, problem_index=index, error_types=["operator_swap"] * lines.count(b"\n"),
                      rejects=[]).with_candidates(lines) for index, lines in problems.items()))


def test_candidates_are_joined_in_problem_order_whatever_order_results_land_in(ctx):
    _land(ctx, "b", {9: b"candidates of 9\n", 11: b"first of 11\nsecond of 11\n"})
    _land(ctx, "a", {2: b"candidates of 2\n", 5: b"", 6: b"candidates of 6\n"})
    results: list[ProblemResult] = []
    assert b"".join(_catalog(ctx, {"b": 2, "a": 3}, [2, 5, 6, 9, 11], results)) == (
        b"candidates of 2\ncandidates of 6\ncandidates of 9\nfirst of 11\nsecond of 11\n")
    assert sorted(result.problem_index for result in results) == [2, 5, 6, 9, 11]
    progress = ctx.jobs.get(ctx.job_id).progress  # counted in problems, not work items
    assert (progress.done, progress.total, progress.message) == (5, 5, "generating candidates")


def test_a_result_filed_under_another_problem_stops_the_job_instead_of_cutting_the_catalog(ctx):
    _land(ctx, "a", {2: b"two\n"})
    _land(ctx, "b", {6: b"six\n"})
    with pytest.raises(FlawforgeError, match=r"no result for problem 5 .*problems \[6\]"):
        b"".join(_catalog(ctx, {"a": 1, "b": 1}, [2, 5], []))


def test_a_batch_result_cut_inside_a_problem_is_an_error_not_a_shorter_catalog(ctx):
    stored = ProblemResult(job_id=ctx.job_id, problem_index=3, error_types=["off_by_n"] * 2,
                           rejects=[]).with_candidates(b"one\n")
    ctx.platform.store.put(ctx.item_key("a.jsonl"), stored)
    with pytest.raises(ValueError, match="problem 3 ends before its 2 candidates"):
        b"".join(_catalog(ctx, {"a": 1}, [3], []))
