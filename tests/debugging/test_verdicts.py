"""Verdicts from reported outcomes only: misbehaving tests are left out with their reason or make the library a
reject, never an instance; a run that stopped early is no verdict; the final gate drops what does not reproduce."""
from __future__ import annotations

import platform

import pytest

from flawforge.debugging.generate import SUITE_LIMITS, Workspace, final_gate, generate_for_library
from flawforge.debugging.layout import ProjectLayout
from flawforge.debugging.patches import apply_patch
from flawforge.debugging.verdict import (SLOW_TEST_S, Collected, Timing, Verdict, companions, judge, quick_sample,
                                         spread, thinned, wider_sample)
from flawforge.proto.debugging import Environment
from flawforge.proto.sandbox import ResourceUsage, SuiteRunResult, TestCaseResult
from tests.debugging.test_suite_unit import archive as tar_of

ENVIRONMENT = Environment(python=platform.python_version(), packages=[])
MODULE = '''def grade(score, limit):
    if score < 0 or score > limit:
        raise ValueError("out of range")
    if score >= 0.9 * limit:
        return "A"
    if score >= 0.5 * limit:
        return "B"
    return "C"
'''
GOOD_TESTS = '''import pytest

from toy import grade


def test_a():
    assert grade(95, 100) == "A"


def test_b():
    assert grade(60, 100) == "B"


def test_c():
    assert grade(10, 100) == "C"


def test_range():
    with pytest.raises(ValueError):
        grade(-1, 100)
'''
# Tests that cannot give a verdict: each stops or spoils the clean run in its own way.
MISBEHAVING = {
    "interrupt": ("tests/test_bad.py", "def test_stop():\n    raise KeyboardInterrupt\n",
                  "pytest was interrupted"),
    "hang": ("tests/test_bad.py", "def test_hang():\n    while True:\n        pass\n", "timeout"),
    "forbidden": ("tests/test_bad.py", "import os\n\n\ndef test_shell():\n    os.system('true')\n",
                  "forbidden: the code starts a process"),
    "collection": ("tests/test_bad.py", "import no_such_module_anywhere\n\n\ndef test_x():\n    pass\n",
                   "ModuleNotFoundError: No module named 'no_such_module_anywhere'"),
}
FAST = SUITE_LIMITS.model_copy(update={"timeout_s": 5})


@pytest.fixture(scope="module")
def suite_sandbox():
    from flawforge.sandbox.suites import suite_sandbox

    return suite_sandbox()


def archive(name: str, files: dict[str, str]) -> bytes:
    return tar_of({f"{name}-1.0/{path}": text for path, text in files.items()})


def generate(sandbox, files: dict[str, str]):
    return generate_for_library(sandbox, archive("toy", files), "toy-1.0.tar.gz", 6,
                                ["op_invert", "remove_cond", "op_change"], 0, 2, environment=ENVIRONMENT,
                                clean_limits=FAST)


@pytest.mark.parametrize("kind", sorted(MISBEHAVING))
def test_a_misbehaving_test_is_left_out_with_its_reason_or_the_library_is_a_reject(suite_sandbox, kind):
    path, text, reason = MISBEHAVING[kind]
    alone = generate(suite_sandbox, {"toy.py": MODULE, path: text})
    assert not alone.instances
    assert [r.reason for r in alone.rejects] == ["no_baseline"]
    assert any(reason in e.reason for e in alone.excluded), alone.excluded

    beside = generate(suite_sandbox, {"toy.py": MODULE, path: text, "tests/test_good.py": GOOD_TESTS})
    (excluded,) = beside.excluded
    assert excluded.kind == "test" and excluded.name.startswith("tests/test_bad.py") and reason in excluded.reason
    assert beside.instances, beside.rejects
    for instance in beside.instances:  # the good tests' instances, checked by the final gate, never the bad test's
        assert not any(t.startswith("tests/test_bad.py") for t in instance.FAIL_TO_PASS + instance.PASS_TO_PASS)
        assert set(instance.FAIL_TO_PASS) <= {f"tests/test_good.py::{n}" for n in ("test_a", "test_b", "test_c",
                                                                                  "test_range")}
    assert beside.gate_checked == len(beside.instances) + sum(r.reason.startswith("gate_") for r in beside.rejects)


USER_DEPENDENT = """import os

import pytest

from toy import grade


@pytest.mark.skipif(os.geteuid() == 0, reason="root")
def test_a_not_as_root():
    assert grade(95, 100) == "A"


def test_b_as_anyone():
    assert grade(60, 100) == "B"


def test_c_as_anyone():
    assert grade(10, 100) == "C"
"""


def test_a_test_whose_outcome_depends_on_its_user_is_never_listed(suite_sandbox):
    """The second clean run is as root (units are not): the test that skips for root is no baseline test, so no
    instance lists it, though a bug in grade's first branch fails it as any other user."""
    result = generate(suite_sandbox, {"toy.py": MODULE, "tests/test_user.py": USER_DEPENDENT})
    assert result.baseline.flaky == ["tests/test_user.py::test_a_not_as_root"]
    assert result.baseline.passing == ["tests/test_user.py::test_b_as_anyone", "tests/test_user.py::test_c_as_anyone"]
    for instance in result.instances:
        assert "tests/test_user.py::test_a_not_as_root" not in instance.FAIL_TO_PASS + instance.PASS_TO_PASS


def test_a_flood_of_output_while_collecting_is_a_library_reject(suite_sandbox):
    flood = "raise ImportError('needs a compiled extension: ' + 'x' * (6 << 20))\n"
    result = generate(suite_sandbox, {"toy.py": MODULE, "tests/conftest.py": flood, "tests/test_good.py": GOOD_TESTS})
    assert not result.instances
    (reject,) = result.rejects
    assert reject.reason == "no_baseline" and "output_limit" in reject.detail


def _run(outcome="ok", status=1, tests=(), unfinished=None) -> SuiteRunResult:
    return SuiteRunResult(outcome=outcome, pytest_status=status, unfinished=unfinished,
                          usage=ResourceUsage(cpu_s=0, wall_s=0, max_rss_kb=0),
                          tests=[TestCaseResult(name=name, outcome=result) for name, result in tests])


def test_a_test_that_did_not_report_is_never_fail_to_pass():
    baseline = ["t.py::a", "t.py::b", "t.py::c"]
    interrupted = _run(status=2, tests=[("t.py::a", "failed"), ("t.py::b", "error")], unfinished="t.py::b")
    assert judge(baseline, interrupted, baseline, []).reason == "interrupted"
    silent = _run(tests=[("t.py::a", "failed"), ("t.py::b", "passed")])
    verdict = judge(baseline, silent, baseline, [])
    assert (verdict.valid, verdict.reason) == (False, "incomplete") and "t.py::c" in verdict.detail
    forbidden = _run(outcome="forbidden", tests=[("t.py::a", "failed"), ("t.py::b", "passed"), ("t.py::c", "passed")])
    assert judge(baseline, forbidden, baseline, []).reason == "forbidden"
    whole_run = _run(tests=[("t.py::a", "failed"), ("t.py::b", "passed"), ("t.py::c", "skipped")])
    verdict = judge(baseline, whole_run, baseline, [])
    assert verdict.valid and verdict.fail_to_pass == ["t.py::a"] and verdict.pass_to_pass == ["t.py::b"]


def test_a_later_run_that_fails_whole_lists_the_earlier_runs_passing_tests_in_collection_order():
    """A candidate's sample passed whole and the rest of its tests fail: PASS_TO_PASS is what passed before (for the
    final gate to prove with the failing ones), not the failing files' tests that cannot notice the change."""
    baseline = ["t.py::a", "t.py::b", "t.py::c", "t.py::d", "u.py::e"]
    rest = _run(tests=[("t.py::b", "failed"), ("t.py::d", "failed")])
    verdict = judge(["t.py::b", "t.py::d"], rest, baseline, [], noticing=baseline[:4], passed=["t.py::c", "t.py::a"])
    assert verdict.valid and verdict.fail_to_pass == ["t.py::b", "t.py::d"]
    assert verdict.pass_to_pass == ["t.py::a", "t.py::c"]
    alone = judge(["t.py::b", "t.py::d"], rest, baseline, [], noticing=baseline[:4])
    assert not alone.valid and alone.reason == "no_pass_to_pass"  # nothing else in t.py cannot notice it


def test_companions_run_beside_a_sample_are_its_pass_to_pass_where_they_passed():
    """The other baseline tests of the sample's files, that cannot notice the change, fill the room the sample
    leaves: a change failing all of the sample has PASS_TO_PASS its own run reported, not tests listed unrun; one
    that failed or did not report is not listed."""
    baseline = ["t.py::a", "t.py::b", "t.py::c", "t.py::d", "u.py::e", "u.py::f"]
    assert companions(["t.py::b"], ["t.py::b", "u.py::e"], baseline, 64) == ["t.py::a", "t.py::c", "t.py::d"]
    assert companions(["t.py::b"], ["t.py::b"], baseline, 2) == ["t.py::a", "t.py::c"]
    assert companions(["t.py::b"], ["t.py::b"], baseline, 0) == []
    run = _run(tests=[("t.py::a", "passed"), ("t.py::b", "failed"), ("t.py::c", "failed")])
    verdict = judge(["t.py::b"], run, baseline, [], noticing=["t.py::b"], beside=["t.py::a", "t.py::c", "t.py::d"])
    assert verdict.valid and verdict.fail_to_pass == ["t.py::b"] and verdict.pass_to_pass == ["t.py::a"]
    partly = _run(tests=[("t.py::a", "passed"), ("t.py::b", "failed"), ("t.py::d", "passed"), ("u.py::e", "passed")])
    verdict = judge(["t.py::b", "u.py::e"], partly, baseline, [], noticing=["t.py::b", "u.py::e"],
                    beside=["t.py::a", "t.py::d"])
    assert verdict.pass_to_pass == ["t.py::a", "t.py::d", "u.py::e"]  # in collection order
    every = _run(tests=[("t.py::a", "failed"), ("t.py::b", "failed"), ("t.py::c", "skipped")])
    verdict = judge(["t.py::b"], every, baseline, [], noticing=["t.py::b"], beside=["t.py::a", "t.py::c"])
    assert verdict.pass_to_pass == ["t.py::d"]  # the unrun one: never a companion this run saw fail or skip
    assert judge(["t.py::b"], every, baseline[:3], [], noticing=["t.py::b"],
                 beside=["t.py::a", "t.py::c"]).reason == "no_pass_to_pass"
    timing = Timing({"t.py::a": SLOW_TEST_S * 2})
    assert companions(["t.py::b"], ["t.py::b"], baseline, 64, timing) == ["t.py::c", "t.py::d"]  # quick ones only


@pytest.mark.parametrize("failing", [1, 3, 400])
def test_the_failing_output_reads_only_as_many_failures_as_it_keeps(failing):
    """The same text as every failure written out and then cut at FAILING_OUTPUT_BYTES, at and around the cut."""
    from flawforge.debugging.failures import readable_failure
    from flawforge.debugging.verdict import bounded, normalized

    names = [f"t.py::test_{i}" for i in range(failing)] + ["t.py::kept"]
    run = SuiteRunResult(outcome="ok", pytest_status=1, usage=ResourceUsage(cpu_s=0, wall_s=0, max_rss_kb=0),
                         tests=[TestCaseResult(name=name, outcome="failed",
                                               message=f"E   AssertionError: {name} at 0x7f00 {'x' * 97 * i}")
                                for i, name in enumerate(names[:-1])] + [TestCaseResult(name="t.py::kept",
                                                                                       outcome="passed")])
    verdict = judge(names, run, names, [])
    every = "\n\n".join(f"{t.name}: failed\n{readable_failure(normalized(t.message))}" for t in run.tests[:-1])
    assert verdict.valid and verdict.failing_output == bounded(every)
    assert (failing == 400) == verdict.failing_output.endswith("(output cut)\n")


def test_a_selection_goes_to_pytest_as_whole_files_where_it_can_in_collection_order():
    collected = Collected(["a.py::t1", "a.py::t2", "b.py::t1", "b.py::t10", "c.py::x[1]"], ("c.py::x[2]",))
    assert collected.arguments(["c.py::x[1]", "b.py::t1", "a.py::t2", "a.py::t1"]) == ["a.py", "b.py::t1", "c.py::x[1]"]
    assert collected.arguments(["b.py::t10", "b.py::t1"]) == ["b.py"]
    # a test left out of every run is deselected only where a file or folder argument would run it: pytest
    # deselects by prefix, and b.py::t1 would take b.py::t10 with it
    space = Workspace(None, b"", ProjectLayout("p", "1", ("",), ("tests",), ("p.py",)), ENVIRONMENT,
                      deselected=("tests/b.py::t1",))
    assert space.args(["tests/b.py::t10"]) == ["tests/b.py::t10"]
    assert space.args(["tests"]) == ["tests", "--deselect", "tests/b.py::t1"]
    assert space.args(["tests/b.py"]) == ["tests/b.py", "--deselect", "tests/b.py::t1"]


ORDER_DEPENDENT = """STATE = []


def test_1_setup():
    STATE.append(1)


def test_2_needs_setup():
    assert STATE == [1]
"""


def test_the_final_gate_drops_an_instance_that_does_not_reproduce_by_node_id(suite_sandbox):
    """test_2_needs_setup passes only after test_1_setup: an instance listing it without test_1_setup fails
    clean when run by node id, so the gate drops it; listed after test_1_setup, it reproduces."""
    project = archive("toy", {"toy.py": MODULE, "tests/test_good.py": GOOD_TESTS,
                              "tests/test_order.py": ORDER_DEPENDENT})
    space = Workspace(suite_sandbox, project, ProjectLayout("toy", "1.0", ("",), ("tests",), ("toy.py",)),
                      ENVIRONMENT)
    result = generate_for_library(suite_sandbox, project, "toy-1.0.tar.gz", 3, ["op_invert"], 0, 2,
                                  environment=ENVIRONMENT, clean_limits=FAST)
    (instance, *_) = result.instances
    buggy = apply_patch(MODULE, instance.patch)
    order = ["tests/test_order.py::test_1_setup", "tests/test_order.py::test_2_needs_setup"]
    together, without_setup = (instance.model_copy(update={
        "PASS_TO_PASS": instance.PASS_TO_PASS + listed,
        "pytest_arguments": instance.FAIL_TO_PASS + instance.PASS_TO_PASS + listed}) for listed in (order, order[1:]))
    kept, dropped = final_gate(space, [(together, buggy, None), (without_setup, buggy, None)], FAST, 2)
    assert kept == [together]
    (reject,) = dropped
    assert reject.reason == "gate_fails_clean" and "test_2_needs_setup" in reject.detail


def test_a_sample_of_the_tests_is_spread_over_them_in_their_order():
    tests = [f"t.py::test_{n}" for n in range(10)]
    assert spread(tests, 4) == ["t.py::test_0", "t.py::test_2", "t.py::test_5", "t.py::test_7"]
    assert spread(tests, 10) == spread(tests, 50) == tests


def test_a_sample_leaves_out_the_slow_tests_where_quick_ones_remain_and_a_thinned_verdict_keeps_every_failure():
    tests = [f"t.py::test_{n}" for n in range(10)]
    seconds = Timing({test: 0.001 for test in tests} | {"t.py::test_0": 0.6, "t.py::test_5": SLOW_TEST_S * 2})
    assert quick_sample(tests, 4, seconds) == ["t.py::test_1", "t.py::test_3", "t.py::test_6", "t.py::test_8"]
    assert quick_sample(tests[:1], 4, seconds) == tests[:1]  # none quick: the slow one
    assert quick_sample(tests, 4, Timing()) == spread(tests, 4)  # untimed: taken as quick
    verdict = Verdict(True, None, "", tests[:3], tests[3:], "")
    assert thinned(verdict, 7, seconds) is verdict
    assert thinned(verdict, 3, seconds) == Verdict(True, None, "", tests[:3],
                                                    ["t.py::test_3", "t.py::test_6", "t.py::test_8"], "")


def test_a_sample_takes_the_files_cheapest_to_collect_until_they_hold_enough_tests():
    tests = [f"{file}::test_{n}" for file in ("a.py", "b.py", "c.py") for n in range(4)]
    timing = Timing(files={"a.py": 0.4, "b.py": 0.01, "c.py": 0.02})
    assert quick_sample(tests, 3, timing) == ["b.py::test_0", "b.py::test_1", "b.py::test_2"]
    assert quick_sample(tests, 6, timing) == spread(tests[4:], 6)  # b, then c: a is never collected
    assert quick_sample(tests, 12, timing) == tests  # all of them: every file
    assert quick_sample(tests, 3, Timing(files={"z.py": 1.0})) == spread(tests, 3)  # no file of theirs timed


def test_after_a_sample_that_passed_whole_comes_a_wider_sample_of_the_others_quick_ones_first():
    tests = [f"t.py::test_{n}" for n in range(8)]
    timing = Timing({test: 0.001 for test in tests} | {"t.py::test_1": SLOW_TEST_S * 2, "t.py::test_6": 0.6})
    sample = quick_sample(tests, 2, timing)
    assert sample == ["t.py::test_0", "t.py::test_4"]
    assert wider_sample(tests, sample, 2, timing) == ["t.py::test_2", "t.py::test_3", "t.py::test_5", "t.py::test_7"]
    assert wider_sample(tests, sample, 1, timing) == ["t.py::test_2", "t.py::test_3", "t.py::test_5", "t.py::test_7"]
    assert len(wider_sample([f"t.py::test_{n}" for n in range(100)], [], 2, Timing())) == 8  # WIDER times two
    quick = [t for t in tests if timing.quick(t)]
    assert wider_sample(tests, quick, 2, timing) == ["t.py::test_1", "t.py::test_6"]  # none quick left: the slow ones


def test_a_candidate_runs_a_sample_of_its_tests_and_a_wider_one_where_the_sample_alone_settles_nothing(
        suite_sandbox):
    """Of the four tests that run grade(), two (test_a, test_c) run each candidate; a candidate that the sample
    does not show failing runs the other two (verdict.wider_sample), one it shows failing with nothing passing all four.
    The same candidates are instances
    either way, each listing the tests of its sample, or every failing test of all four and at most two passing
    ones (verdict.thinned)."""
    project = archive("toy", {"toy.py": MODULE, "tests/test_good.py": GOOD_TESTS})
    every, sampled = (generate_for_library(suite_sandbox, project, "toy-1.0.tar.gz", 8,
                                           ["op_invert", "remove_cond", "op_change", "off_by_one"], 0, 2,
                                           environment=ENVIRONMENT, clean_limits=FAST, tests_per_candidate=count)
                      for count in (64, 2))
    assert [i.instance_id for i in sampled.instances] == [i.instance_id for i in every.instances]
    assert sorted(r.hash8 for r in sampled.rejects) == sorted(r.hash8 for r in every.rejects)
    sample = {"tests/test_good.py::test_a", "tests/test_good.py::test_c"}
    whole = {i.instance_id: i for i in every.instances}

    def kind(instance) -> str:
        if set(instance.FAIL_TO_PASS + instance.PASS_TO_PASS) == sample:
            return "sample"
        every_run = whole[instance.instance_id]
        passing_sampled = len(instance.PASS_TO_PASS) <= 2 and set(instance.PASS_TO_PASS) <= set(every_run.PASS_TO_PASS)
        return "all" if instance.FAIL_TO_PASS == every_run.FAIL_TO_PASS and passing_sampled else "other"

    assert {kind(i) for i in sampled.instances} == {"sample", "all"}
