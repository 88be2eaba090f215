"""The math job's catalog: problems' candidates joined in problem order as their work items' results land."""
from __future__ import annotations

import pytest

from flawforge.errors import FlawforgeError
from flawforge.jobs.context import JobContext
from flawforge.jobs.store import JobStore
from flawforge.pipelines.math_errors import _catalog
from flawforge.proto.base import jsonl
from flawforge.proto.math import ProblemBatchResult, ProblemResult, Reject
from flawforge.assembly import platform_for
from flawforge.settings import Settings
from tests.math.test_export import candidate


@pytest.fixture
def ctx(tmp_path):
    platform = platform_for(Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path)))
    status = JobStore(platform.store).create("math-errors", {})
    yield JobContext(platform, status.job_id)
    platform.close()


def _land(ctx: JobContext, gsm8k, item: str, error_types: dict[int, list[str]]) -> dict[int, bytes]:
    """Stores the work item's result: each problem with a candidate of each error type named, and a reject.
    Returns each problem's candidates as the catalog writes them."""
    results = [ProblemResult(problem_index=index, candidates=[candidate(gsm8k, index, t) for t in types],
                             rejects=[Reject(problem_index=index, reason="no_applicable_mutation")])
               for index, types in error_types.items()]
    ctx.platform.store.put(ctx.item_key(item), ProblemBatchResult(problems=results).model_dump_json().encode())
    return {result.problem_index: jsonl(result.candidates) for result in results}


def test_candidates_are_joined_in_problem_order_whatever_order_results_land_in(ctx, problems):
    # the store lists "a" before "b": the later problems' work item lands first and must wait
    written = _land(ctx, problems, "a", {9: ["off_by_n"], 11: ["off_by_n", "decimal_shift"]})
    written |= _land(ctx, problems, "b", {2: ["off_by_n"], 5: [], 6: ["digit_transposition"]})
    error_types: dict[int, list[str]] = {}
    rejects: list[Reject] = []
    assert b"".join(_catalog(ctx, {"b": [2, 5, 6], "a": [9, 11]}, error_types, rejects)) == (
        written[2] + written[6] + written[9] + written[11])
    assert error_types == {2: ["off_by_n"], 5: [], 6: ["digit_transposition"], 9: ["off_by_n"],
                           11: ["off_by_n", "decimal_shift"]}
    assert [reject.problem_index for reject in rejects] == [9, 11, 2, 5, 6]  # as the results landed
    progress = ctx.jobs.get(ctx.job_id).progress  # counted in problems, not work items
    assert (progress.done, progress.total, progress.message) == (5, 5, "generating candidates")


@pytest.mark.parametrize("held", [[2, 6], [2], [5, 2]])
def test_a_work_item_holding_other_problems_than_its_own_stops_the_job_instead_of_a_wrong_catalog(ctx, problems,
                                                                                                  held):
    _land(ctx, problems, "a", {index: ["off_by_n"] for index in held})
    with pytest.raises(FlawforgeError, match=rf"holds the results of problems \[{', '.join(map(str, held))}\], "
                                             rf"not of \[2, 5\]"):
        b"".join(_catalog(ctx, {"a": [2, 5]}, {}, []))


def test_a_result_cut_short_is_an_error_naming_its_work_item_not_a_shorter_catalog(ctx, problems):
    _land(ctx, problems, "a", {3: ["off_by_n", "decimal_shift"]})
    stored = ctx.platform.store.get(ctx.item_key("a"))
    ctx.platform.store.put(ctx.item_key("a"), stored[:len(stored) // 2])
    with pytest.raises(FlawforgeError, match=rf"work item a of job {ctx.job_id} stored a result that is not a "
                                             rf"ProblemBatchResult"):
        b"".join(_catalog(ctx, {"a": [3]}, {}, []))
