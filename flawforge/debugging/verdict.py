"""Which tests a candidate must run, and what its run says: valid bug or reject with a reason.

A bug is valid when at least one selected baseline test reports a failure with it
(FAIL_TO_PASS), at least one reports a pass (PASS_TO_PASS), and the run itself is whole: pytest
ended its session normally, every selected baseline test reported, no limit was hit, nothing
was forbidden. Only baseline tests that can notice the change are selected: those that executed
the changed function in the clean run, or use a fixture wider than a test (class, module, package
or session scope) whose setup executed it (for a change to a class, any of its methods), or every
baseline test when the function runs at import; of those, at most `tests_per_candidate`, spread evenly
over the quick ones of the files cheapest to collect, in collection order (quick_sample); where that sample passes
whole, a wider sample of the others (wider_sample; PASS_TO_PASS is then both runs' passing tests where the second
fails whole), and where it fails whole, all of them. A first sample with room left runs beside it the other
baseline tests of its files (companions: they did not run the changed code), and those that pass are PASS_TO_PASS
too. Both lists hold tests this run reported, except where every selected test failed and no companion ran: then
the failing tests' files' other baseline tests are listed as PASS_TO_PASS, for the final gate to prove.
Where all of them ran, PASS_TO_PASS keeps a sample of the same size (thinned): what shows the bug is
FAIL_TO_PASS, kept whole, and every later run of the instance (the final gate's two, the task's, a
user's) runs only what it lists.
Lists are in the order the clean run collected the tests, and a selection goes to pytest as
Collected.arguments writes it (a file where every test of it is selected, else node ids), the same in the
candidate's run, the final gate (generate.final_gate) and the task's run_tests.py.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from flawforge.debugging.failures import readable_failure
from flawforge.proto.debugging import FAILING_OUTPUT_BYTES
from flawforge.proto.sandbox import SuiteRunResult

IMPORT_TIME = ""  # the coverage entry of what ran outside any test
SLOW_TEST_S = 0.05  # a test the clean run timed over this is left out of samples where quicker ones can notice
DEAR_COLLECTION_S = 0.1  # a test file that takes this long to collect is left out of samples where others suffice
WIDER = 4  # the second sample of a candidate whose first passed whole is this many times the size (wider_sample)
FIXTURE = "<fixture>"  # the coverage id of a wide fixture's setup, and its key among a test's (runtime.suite)
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
# The end of an address that pytest's shortened repr kept ("[(<mod.NoCompare...ffff5e70450>)]").
CUT_ADDRESS = re.compile(r"(?<=\.\.\.)[0-9a-f]{4,}(?=>)")
WORKDIR = re.compile(r"/tmp/\d+/")
# At most this many tests that did not run the change are listed as PASS_TO_PASS where every one run failed.
UNRUN_PASSING = 20
PYTEST_ENDS = {None: "pytest did not finish", 2: "pytest was interrupted (a KeyboardInterrupt or pytest.exit)",
               3: "pytest failed internally", 4: "pytest refused its arguments", 5: "pytest collected no tests"}


def test_file(test_id: str) -> str:
    return test_id.split("::", 1)[0]


class Noticing:
    """Which baseline tests can notice a change to a function, from the clean run's coverage read once for the
    library: those that executed the function (for a class, any of its methods), and those using a wide fixture
    whose setup executed it (set up once, for an earlier test, its value reaches them all); every baseline test for a
    function, or a class with a method, that runs at import."""

    def __init__(self, coverage: dict[str, list[str]], baseline: list[str]):
        self.baseline = baseline  # in collection order
        self.executed_by: dict[str, dict[str, set[str]]] = {}  # file -> function -> tests, fixtures, IMPORT_TIME
        self.users_of: dict[str, set[str]] = {}  # a wide fixture's key -> the tests that use it
        for entry, keys in coverage.items():
            for key in keys:
                if key.startswith(FIXTURE):
                    self.users_of.setdefault(key, set()).add(entry)
                else:
                    file, _, name = key.partition("::")
                    self.executed_by.setdefault(file, {}).setdefault(name, set()).add(entry)

    def running(self, path: str, qualname: str) -> set[str]:
        """The tests, wide fixtures and IMPORT_TIME that executed the function, or a method of the class, `qualname`
        of `path` (empty: nothing the baseline runs executes it)."""
        return set().union(*(entries for name, entries in self.executed_by.get(path, {}).items()
                             if name == qualname or name.startswith(qualname + ".")))

    def tests(self, path: str, qualname: str) -> list[str]:
        """The baseline tests that can notice a change to `qualname` of `path`, in collection order."""
        running = self.running(path, qualname)
        if IMPORT_TIME in running:
            return list(self.baseline)
        covering = running.union(*(self.users_of.get(entry, ()) for entry in running if entry.startswith(FIXTURE)))
        return [test for test in self.baseline if test in covering]


@dataclass(frozen=True)
class Timing:
    """What the clean run without coverage timed: each test's seconds (`tests`) and what collecting each test file took
    (`files`: its import and the building of its tests), which every run that selects any of its tests pays again."""

    tests: dict[str, float] = field(default_factory=dict)
    files: dict[str, float] = field(default_factory=dict)

    def quick(self, test: str) -> bool:
        return self.tests.get(test, 0.0) <= SLOW_TEST_S


def quick_sample(tests: list[str], at_most: int, timing: Timing) -> list[str]:
    """At most `at_most` of `tests`, spread over the quick ones (those the clean run timed at SLOW_TEST_S or less, or
    all of them where none is) of the files cheapest to collect (cheapest_files). A few tests take most of a suite's
    time (in arrow 1% of them take 60% of it), and so do a few files' collection (two of arrow's seven files take 0.4 s
    of a unit's 0.5 s: one lists every time zone at import); a sample mostly notices a change without them. Where it
    does not (it passes whole), the candidate runs a wider sample of the others (wider_sample)."""
    quick = [test for test in tests if timing.quick(test)] or tests
    return spread(cheapest_files(quick, at_most, timing.files), at_most)


def cheapest_files(tests: list[str], at_most: int, file_seconds: dict[str, float]) -> list[str]:
    """The tests of the files cheap to collect, then of the dear ones (DEAR_COLLECTION_S or more), each in collection
    order, adding files until they hold `at_most` tests (all the tests where no file was timed). One line, far above
    most files' times, so that the small differences between one run's timing and another's seldom change a
    sample."""
    by_file: dict[str, int] = {}
    for test in tests:
        by_file[test_file(test)] = by_file.get(test_file(test), 0) + 1
    if not any(file in file_seconds for file in by_file):
        return tests
    taken, held = set(), 0
    for file in sorted(by_file, key=lambda name: file_seconds.get(name, 0.0) >= DEAR_COLLECTION_S):
        if held >= at_most:
            break
        taken.add(file)
        held += by_file[file]
    return [test for test in tests if test_file(test) in taken]


def wider_sample(noticing: list[str], sample: list[str], at_most: int, timing: Timing) -> list[str]:
    """What a candidate whose sample passed whole runs next, and last: a sample WIDER times the size of the tests that
    can notice it that the first left out, drawn the same way (quick_sample). On the shared libraries half the
    candidates whose first sample passed failed a later run of every test left (33 of 68); proving that the others
    passed every one of them took a run of up to a whole suite each, a quarter of the candidates' time. A wider sample
    still finds 23 of the 33."""
    taken = set(sample)
    return quick_sample([test for test in noticing if test not in taken], WIDER * at_most, timing)


def spread(tests: list[str], at_most: int) -> list[str]:
    """At most `at_most` of `tests`, evenly spaced over them, in their order. A change to a function that hundreds
    of tests run fails many of them, so a sample spread over the files mostly notices it as all of them would, at a
    fraction of the cost of each of its runs: the candidate's, the final gate's and the user's. (Where the whole
    sample passes, the candidate runs a wider sample, and where it fails, all of them: generate_for_library.)"""
    if len(tests) <= at_most:
        return list(tests)
    step = len(tests) / at_most
    return [tests[int(index * step)] for index in range(at_most)]


class Collected:
    """The tests a clean run collected, in its order, with each file's tests (`deselected`, left out of every run,
    among them), so that a list of them becomes pytest arguments running exactly them in that order."""

    def __init__(self, names: list[str], deselected: tuple[str, ...] = ()):
        self.position = {name: index for index, name in enumerate(names)}
        self.of_file: dict[str, set[str]] = {}
        for name in [*names, *deselected]:
            self.of_file.setdefault(test_file(name), set()).add(name)

    def ordered(self, tests) -> list[str]:
        """`tests` in collection order (one the run did not collect, last)."""
        return sorted(set(tests), key=lambda test: (self.position.get(test, len(self.position)), test))

    def arguments(self, tests) -> list[str]:
        """pytest's arguments for `tests`, in collection order: a file where all its tests are among them (pytest
        takes a file at once, and thousands of node ids in time that grows faster than their number), else node
        ids. A file's tests are contiguous in a collection, so the order is kept."""
        ordered = self.ordered(tests)
        chosen, arguments, taken = set(ordered), [], set()
        for test in ordered:
            file = test_file(test)
            if self.of_file.get(file, set()) <= chosen and "::" in test:
                if file not in taken:
                    taken.add(file)
                    arguments.append(file)
            else:
                arguments.append(test)
        return arguments


def normalized(text: str) -> str:
    """Test output without what differs between identical runs (object addresses, the unit's work dir)."""
    return WORKDIR.sub("", CUT_ADDRESS.sub("", ADDRESS.sub(" at 0x...", text)))


@dataclass(frozen=True)
class Verdict:
    valid: bool
    reason: str | None
    detail: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    failing_output: str


def thinned(verdict: Verdict, at_most: int, timing: Timing) -> Verdict:
    """`verdict` with at most `at_most` of its PASS_TO_PASS, sampled as a candidate's tests are (quick_sample). A
    run of every test that can notice a change to a function hundreds of tests execute lists them all, and each run
    of the instance after it (two in the final gate, the task's, a user's) would run them again to learn that they
    still pass."""
    if len(verdict.pass_to_pass) <= at_most:
        return verdict
    return replace(verdict, pass_to_pass=quick_sample(verdict.pass_to_pass, at_most, timing))


def bounded(text: str, limit: int = FAILING_OUTPUT_BYTES) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit - 20].decode("utf-8", "ignore") + "\n... (output cut)\n"


def failures_shown(fail_to_pass: list[str], outcomes: dict) -> str:
    """Each failing test's outcome and readable failure, one after another, as far as `bounded` will keep: the
    tests past the text's first FAILING_OUTPUT_BYTES are not read (a change to arrow fails hundreds)."""
    shown, size = [], 0
    for test in fail_to_pass:
        if size > FAILING_OUTPUT_BYTES:
            break
        shown.append(f"{test}: {outcomes[test].outcome}\n{readable_failure(normalized(outcomes[test].message))}")
        size += len(shown[-1].encode("utf-8")) + (2 if len(shown) > 1 else 0)  # the text so far, in bytes
    return "\n\n".join(shown)


def standing_refusal(*runs: SuiteRunResult) -> str | None:
    """The refusal outside any test that all the runs met alike (a module probing git or the host name at import,
    which carries on without it: the project's environment, not a change's doing), or None."""
    refusals = {run.refused_outside_tests for run in runs}
    return refusals.pop() if len(refusals) == 1 else None


def untrusted(run: SuiteRunResult, standing: str | None = None) -> str | None:
    """Why a run's test outcomes cannot be trusted, or None: a limit, a crash or a forbidden operation (other than
    `standing`, a refusal outside any test that every run of the project meets), or pytest stopped before the
    session's end."""
    if run.whole(standing):
        return None
    if run.outcome != "ok" and (standing is None or run.refused_outside_tests != standing):
        return f"{run.outcome}: {run.detail}"
    return PYTEST_ENDS.get(run.pytest_status, f"pytest ended with status {run.pytest_status}") + (
        f" during {run.unfinished}" if run.unfinished else "")


def companions(sample: list[str], noticing: list[str], baseline_passing: list[str], room: int,
               timing: Timing | None = None) -> list[str]:
    """Baseline tests of the sample's files that cannot notice the change, in collection order, at most `room` and
    UNRUN_PASSING (with `timing`, only quick ones): run beside a sample with room left, they are the PASS_TO_PASS a
    change failing every test of the sample needs, reported by the candidate's own run (which is then the final gate's
    run with the bug: 58 of 75 candidates the gate ran again on the shared libraries were such) rather than listed
    unrun for the gate to prove."""
    files, noticed = {test_file(test) for test in sample}, set(noticing)
    return [test for test in baseline_passing if test not in noticed and test_file(test) in files
            and (timing is None or timing.quick(test))][:max(0, min(room, UNRUN_PASSING))]


def judge(selected: list[str], run: SuiteRunResult, baseline_passing: list[str], baseline_collection_errors: list[str],
          standing: str | None = None, noticing: list[str] | None = None, passed: list[str] = (),
          beside: list[str] = ()) -> Verdict:
    """The verdict on a candidate's run of the baseline tests `selected` (in collection order), from the outcomes
    the run reported alone: a run that stopped early, broke a limit, was forbidden or left a selected test without a
    result is no verdict at all (the reject names why); FAIL_TO_PASS are the selected tests that reported failed or
    error, PASS_TO_PASS those that reported passed, both in `selected`'s order. `baseline_passing`: every baseline
    test, in collection order; `noticing`: every test that can notice the change, of which `selected` is a sample
    (default: `selected` itself); `passed`: tests that passed with the change in this candidate's earlier runs
    (PASS_TO_PASS where every selected test fails); `beside`: the companions run with them, PASS_TO_PASS where they
    passed."""
    outcomes = {t.name: t for t in run.tests}
    if run.outcome != "ok" and not (standing and run.refused_outside_tests == standing):
        # a limit, a crash or a forbidden operation (but one outside any test the clean runs met too)
        return Verdict(False, run.outcome, run.detail, [], [], "")
    new_errors = sorted(set(run.collection_errors) - set(baseline_collection_errors))
    if new_errors:
        first = new_errors[0]
        return Verdict(False, "collection_error", f"{first}: {normalized(run.collection_errors[first])[-500:]}",
                       [], [], "")
    why = untrusted(run, standing)  # the unit ended well: only pytest's own stop is left
    if why is not None:
        return Verdict(False, "interrupted", why, [], [], "")
    silent = [t for t in selected if t not in outcomes]
    if silent:
        return Verdict(False, "incomplete", f"{len(silent)} selected baseline test(s) reported nothing, e.g. "
                                            f"{silent[0]}", [], [], "")
    fail_to_pass = [t for t in selected if outcomes[t].outcome in ("failed", "error")]
    pass_to_pass = [t for t in selected if outcomes[t].outcome == "passed"]
    if beside:
        reported = {*pass_to_pass, *(t for t in beside if t in outcomes and outcomes[t].outcome == "passed")}
        pass_to_pass = [t for t in baseline_passing if t in reported]
    output = failures_shown(fail_to_pass, outcomes)
    if not fail_to_pass:
        return Verdict(False, "survived", f"all {len(selected)} baseline tests run still pass", [], pass_to_pass, "")
    if not pass_to_pass:  # those that passed in an earlier run, else the failing tests' files' other baseline
        # tests, which did not run the changed code and did not run now (a companion that failed is no passing test):
        # listed, the final gate proves them before anything is written
        earlier = set(passed)
        pass_to_pass = [t for t in baseline_passing if t in earlier] or [
            t for t in companions(fail_to_pass, selected if noticing is None else noticing, baseline_passing,
                                  UNRUN_PASSING) if t not in outcomes]
    if not pass_to_pass:
        return Verdict(False, "no_pass_to_pass", f"all {len(selected)} baseline tests run fail or skip",
                       fail_to_pass, [], bounded(output))
    return Verdict(True, None, "", fail_to_pass, pass_to_pass, bounded(output))
