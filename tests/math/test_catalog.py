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
    # the store lists "a" before "b": the later problems' work item lands first and must wait
    _land(ctx, "a", {9: b"candidates of 9\n", 11: b"first of 11\nsecond of 11\n"})
    _land(ctx, "b", {2: b"candidates of 2\n", 5: b"", 6: b"candidates of 6\n"})
    results: list[ProblemResult] = []
    assert b"".join(_catalog(ctx, {"b": [2, 5, 6], "a": [9, 11]}, results)) == (
        b"candidates of 2\ncandidates of 6\ncandidates of 9\nfirst of 11\nsecond of 11\n")
    assert [result.problem_index for result in results] == [9, 11, 2, 5, 6]
    progress = ctx.jobs.get(ctx.job_id).progress  # counted in problems, not work items
    assert (progress.done, progress.total, progress.message) == (5, 5, "generating candidates")


@pytest.mark.parametrize("problems", [{2: b"two\n", 6: b"six\n"}, {2: b"two\n"}, {5: b"five\n", 2: b"two\n"}])
def test_a_work_item_holding_other_problems_than_its_own_stops_the_job_instead_of_a_wrong_catalog(ctx, problems):
    _land(ctx, "a", problems)
    with pytest.raises(FlawforgeError, match=rf"holds the results of problems \[{', '.join(map(str, problems))}\], "
                                             rf"not of \[2, 5\]"):
        b"".join(_catalog(ctx, {"a": [2, 5]}, []))


def test_a_batch_result_cut_inside_a_problem_is_an_error_not_a_shorter_catalog(ctx):
    stored = ProblemResult(job_id=ctx.job_id, problem_index=3, error_types=["off_by_n"] * 2,
                           rejects=[]).with_candidates(b"one\n")
    ctx.platform.store.put(ctx.item_key("a.jsonl"), stored)
    with pytest.raises(ValueError, match="problem 3 ends before its 2 candidates"):
        b"".join(_catalog(ctx, {"a": [3]}, []))
