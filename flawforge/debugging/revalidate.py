"""Re-validation of a saved file-edit task: the buggy code still fails, the fixed code still passes.

The checks on two suite runs are pure; running them is the caller's (the sandbox's)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from flawforge.debugging.verdict import standing_refusal, untrusted
from flawforge.proto.debugging import Instance
from flawforge.proto.sandbox import SuiteRunResult


@dataclass(frozen=True)
class Revalidation:
    instance_id: str
    buggy_fails: bool          # every FAIL_TO_PASS test fails with the bug
    buggy_keeps_passing: bool  # every PASS_TO_PASS test passes with the bug
    fixed_passes: bool         # with the fix, every listed test passes
    detail: str

    @property
    def reproduced(self) -> bool:
        return self.buggy_fails and self.buggy_keeps_passing and self.fixed_passes

    def as_dict(self) -> dict:
        return {**asdict(self), "reproduced": self.reproduced}


def _outcomes(run: SuiteRunResult) -> dict[str, str]:
    """Each reported test's outcome, by name (a test reported twice: its first report)."""
    found: dict[str, str] = {}
    for result in run.tests:
        found.setdefault(result.name, result.outcome)
    return found


def revalidate(instance: Instance, buggy_run: SuiteRunResult, fixed_run: SuiteRunResult) -> Revalidation:
    """Only reported outcomes count: a FAIL_TO_PASS test fails with the bug only if it reported failed or error,
    and a run that stopped early proves nothing."""
    buggy, fixed = _outcomes(buggy_run), _outcomes(fixed_run)
    still_passing = [t for t in instance.FAIL_TO_PASS if buggy.get(t, "missing") not in ("failed", "error")]
    broken = [t for t in instance.PASS_TO_PASS if buggy.get(t, "missing") != "passed"]
    not_fixed = [t for t in instance.FAIL_TO_PASS + instance.PASS_TO_PASS if fixed.get(t, "missing") != "passed"]
    standing = standing_refusal(buggy_run, fixed_run)
    runs = (("buggy", buggy_run), ("fixed", fixed_run))
    problems = [f"the {which} run cannot be trusted: {why}" for which, run in runs if (why := untrusted(run, standing))]
    if still_passing:
        problems.append(f"{len(still_passing)} FAIL_TO_PASS test(s) do not report a failure with the bug, e.g. "
                        f"{still_passing[0]} ({buggy.get(still_passing[0], 'missing')})")
    if broken:
        problems.append(f"{len(broken)} PASS_TO_PASS test(s) do not pass with the bug, e.g. {broken[0]} "
                        f"({buggy.get(broken[0], 'missing')})")
    if not_fixed:
        problems.append(f"{len(not_fixed)} test(s) do not pass with the fix, e.g. {not_fixed[0]} "
                        f"({fixed.get(not_fixed[0], 'missing')})")
    buggy_whole, fixed_whole = buggy_run.whole(standing), fixed_run.whole(standing)
    return Revalidation(instance.instance_id, buggy_whole and not still_passing, buggy_whole and not broken,
                        fixed_whole and not not_fixed, "; ".join(problems))
