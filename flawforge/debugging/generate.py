"""One library in, its validated bugs and rejects out, given something that runs suites (the sandbox).

The clean suite runs twice: the first time with coverage, the second as another user (root where
units are not: runtime.suite.OtherUser); tests whose outcomes differ are flaky or depend on who
runs them and are left out, the rest that passed both times are the baseline. Candidates come
from the modifiers over the library's modules; only candidates in code some baseline test
executes are eligible; `per_library` of them are chosen with the seed and each runs the baseline
tests that can notice it (see verdict), in a unit of its own with the changed file written over the
project: that unit is the final gate's run with the bug wherever it ran exactly the instance's
tests (proven_run), so a valid candidate (about four in five) costs one run with the bug. (A suite
batch, which runs several changes after one collection, saved a unit's start only for the
invalid ones and had the gate run every valid one's tests again.) Runs go out concurrently;
results are put in candidate order, so the output does not depend on which finished first. Then
the final gate (final_gate) re-runs each valid one as a user would.
"""
from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Protocol

from flawforge.debugging.candidates import Candidate, candidates_of, choose
from flawforge.debugging.combined import MODIFIER as COMBINED, combine_bugs
from flawforge.debugging.copies import ProjectCopies
from flawforge.debugging.layout import ProjectLayout, layout_of, name_and_version, read_archive
from flawforge.debugging.patches import instance_id, unified_diff
from flawforge.debugging.realism import worth_trying
from flawforge.debugging.revalidate import revalidate
from flawforge.debugging.rewrites import prepared_archive
from flawforge.debugging.verdict import (FIXTURE, IMPORT_TIME, Collected, Verdict, judge, normalized,
                                         Noticing, Timing, companions, quick_sample, standing_refusal, thinned, untrusted,
                                         wider_sample)
from flawforge.proto.debugging import (TESTS_PER_CANDIDATE, Baseline, BugReject, Environment, Exclusion, Instance,
                                      LibraryResult)
from flawforge.proto.sandbox import SandboxLimits, SuiteRunResult

SUITE_LIMITS = SandboxLimits(timeout_s=120, memory_mb=1024, workdir_mb=64, file_size_mb=16, open_files=256,
                             output_bytes=4 << 20, result_bytes=64 << 20)
# A candidate's run may take this many times the clean suite's (and at least MIN_TIMEOUT_S): a bug that loops
# forever is a timeout reject within seconds, not after the seed's 120 s.
TIMEOUT_FACTOR = 4
MIN_TIMEOUT_S = 15.0


# Tests a clean run can lose to a test that stops the session (an interrupt, the unit's end) before the library
# is given up: each round leaves out the test that stopped it.
EXCLUSION_ROUNDS = 12
# A test that ran out a clean run's time is taken to hang when, alone, it also runs out this fraction of it.
HANG_FRACTION = 8


class SuiteRunner(Protocol):
    def run_suite(self, archive: bytes, overlay: dict[str, str] | None = None, *, source_roots=(""), args=(),
                  coverage_files=None, limits: SandboxLimits | None = None, other_user: bool = False,
                  **environment) -> SuiteRunResult: ...


@dataclass(frozen=True)
class Workspace:
    """Where a library's runs happen: the sandbox, the project, its environment and the tests left out of every
    run (`--deselect`). Every run of the library, clean, candidate or final, goes through here."""

    runner: SuiteRunner
    archive: bytes
    layout: ProjectLayout
    environment: Environment
    environment_path: str | None = None
    deselected: tuple[str, ...] = ()
    # The final gate's clean runs by their arguments: each is run once for the library, however many gates ask.
    gate_clean_runs: dict[tuple[str, ...], SuiteRunResult] = field(default_factory=dict, compare=False, repr=False)

    def _options(self) -> dict:
        return {"environment": self.environment_path} if self.environment_path else {}

    def args(self, tests) -> list[str]:
        """`tests` (files, folders or node ids) and a --deselect for each test left out that one of them would run
        (pytest deselects by prefix: only where needed, so that a listed test_x2 never goes with test_x)."""
        wide = [test.rstrip("/") for test in tests if "::" not in test]
        needed = [test for test in self.deselected
                  if any(test == folder or test.startswith((folder + "/", folder + "::")) for folder in wide)]
        return [*tests, *(part for test in needed for part in ("--deselect", test))]

    def run(self, tests, overlay: dict[str, str] | None = None, *, coverage_files=None,
            limits: SandboxLimits = SUITE_LIMITS, other_user: bool = False) -> SuiteRunResult:
        return self.runner.run_suite(self.archive, overlay, source_roots=self.layout.source_roots,
                                     args=self.args(tests), coverage_files=coverage_files, limits=limits,
                                     other_user=other_user, **self._options())


def _outcomes(run: SuiteRunResult) -> dict[str, str]:
    return {t.name: t.outcome for t in run.tests}


def baseline_of(first: SuiteRunResult, second: SuiteRunResult) -> Baseline:
    """Both runs trusted (see clean_runs): tests that passed in both are the baseline."""
    one, two = _outcomes(first), _outcomes(second)
    flaky = sorted(t for t in set(one) | set(two) if one.get(t) != two.get(t))
    passing = sorted(t for t, outcome in one.items() if outcome == "passed" and t not in flaky)
    return Baseline(tests=len(one), passing=passing, flaky=flaky,
                    collection_errors=sorted(set(first.collection_errors) | set(second.collection_errors)),
                    wall_s=round(first.usage.wall_s, 3))


def clean_runs(space: Workspace, concurrency: int,
               limits: SandboxLimits) -> tuple[Workspace, SuiteRunResult, SuiteRunResult, list[Exclusion], str | None]:
    """The clean suite twice (the first with coverage, the second as another user). A test that stops a run (an interrupt, a forbidden
    operation, a hang) is left out and the runs start again, up to EXCLUSION_ROUNDS times; files that fail to collect
    are left out by pytest itself and listed. Returns the workspace that deselects what was left out, the two
    runs, the exclusions and why there is no baseline (None when both runs are complete)."""
    excluded: list[Exclusion] = []
    for _ in range(EXCLUSION_ROUNDS + 1):
        with ThreadPoolExecutor(max_workers=concurrency) as pool:  # the two clean runs are independent
            runs = [pool.submit(space.run, space.layout.test_paths, coverage_files=files, limits=limits,
                                other_user=files is None) for files in (list(space.layout.modules), None)]
            first, second = (run.result() for run in runs)
        stopper = next((test for run in (first, second) for test in [stopping_test(run)] if test), None)
        standing = standing_refusal(first, second)
        why = untrusted(first, standing) or untrusted(second, standing)
        if why is None or stopper is None or stopper in space.deselected:
            break
        if len(excluded) == EXCLUSION_ROUNDS:
            why = f"{why}; {EXCLUSION_ROUNDS} tests left out already"
            break
        if "timeout" in (first.outcome, second.outcome) and not hangs(space, stopper, limits):
            why = f"the clean suite takes longer than {limits.timeout_s:g} s ({why})"
            break
        excluded.append(Exclusion(kind="test", name=stopper, reason=f"stops the clean run: {why}"[:500]))
        space = replace(space, deselected=(*space.deselected, stopper))
    excluded += [Exclusion(kind="test", name=collector, reason=first_line(message))
                 for collector, message in sorted({**second.collection_errors, **first.collection_errors}.items())]
    if standing:
        excluded.append(Exclusion(kind="operation", name=standing[:300], reason="refused by the sandbox while no test "
                                                                               "ran, in every run; the project "
                                                                               "carries on without it"))
    return space, first, second, excluded, why


def hangs(space: Workspace, test: str, limits: SandboxLimits) -> bool:
    """Whether the test that was running when a clean run ran out of time runs out of a fraction of that time on
    its own: a test that hangs, rather than a suite too slow for the limit."""
    alone = limits.model_copy(update={"timeout_s": min(limits.timeout_s, max(MIN_TIMEOUT_S,
                                                                              limits.timeout_s / HANG_FRACTION))})
    return space.run([test], limits=alone).outcome == "timeout"


def stopping_test(run: SuiteRunResult) -> str | None:
    """The test that made a clean run unusable: the one running when it stopped, or the one that attempted what the
    sandbox forbids (a test may catch the refusal and pass, e.g. one that expects an unwritable path to fail)."""
    if run.unfinished is not None:
        return run.unfinished
    return run.forbidden_in if run.outcome == "forbidden" and run.refused_outside_tests is None else None


def first_line(message: str) -> str:
    """The exception line of a collection error (the last line that names an error), bounded."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    named = [line for line in lines if re.match(r"^(E\s+)?[\w.]+(Error|Exception|Exit)\b", line)]
    return normalized((named or lines or ["failed to collect"])[-1])[:300]


def instance_of(space: Workspace, candidate: Candidate, clean: str, verdict, collected: Collected) -> Instance:
    layout = space.layout
    return Instance(
        instance_id=instance_id(layout.name, layout.version, candidate.modifier, candidate.hash8),
        source=layout.name, version=layout.version, modifier=candidate.modifier, path=candidate.path,
        qualname=candidate.qualname, description=candidate.description, patch=candidate.patch(clean),
        fix_patch=unified_diff(candidate.path, candidate.buggy_source, clean),
        FAIL_TO_PASS=verdict.fail_to_pass, PASS_TO_PASS=verdict.pass_to_pass,
        pytest_arguments=collected.arguments(verdict.fail_to_pass + verdict.pass_to_pass),
        failing_output=verdict.failing_output, source_roots=list(layout.source_roots),
        test_paths=list(layout.test_paths), environment=space.environment)


def proven_run(run: SuiteRunResult, instance: Instance, collected: Collected) -> SuiteRunResult | None:
    """The candidate's own run (from a unit of its own, with the buggy file written) where it is the gate's run with
    the bug: it ran exactly the instance's tests, in their order. None otherwise."""
    ran = [test.name for test in run.tests]
    return run if ran == collected.ordered(instance.FAIL_TO_PASS + instance.PASS_TO_PASS) else None


def final_gate(space: Workspace, instances: list[tuple[Instance, str, SuiteRunResult | None]], limits: SandboxLimits,
               concurrency: int) -> tuple[list[Instance], list[BugReject]]:
    """Each instance as a user would check it: its tests (Instance.arguments), in fresh units, clean (one run for
    all the library's instances with the same tests) and with the bug; only those that reproduce are kept.
    `instances`: (instance, its buggy module, the run with the bug that already was this check, or None:
    proven_run)."""
    clean = space.gate_clean_runs
    listed = sorted({tuple(i.arguments) for i, _, _ in instances} - set(clean))
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        clean.update(zip(listed, pool.map(lambda tests: space.run(list(tests), limits=limits), listed)))
        buggy = list(pool.map(lambda item: item[2] or space.run(item[0].arguments, {item[0].path: item[1]},
                                                                 limits=limits), instances))
    kept, dropped = [], []
    for (instance, _, _), buggy_run in zip(instances, buggy):
        check = revalidate(instance, buggy_run, clean[tuple(instance.arguments)])
        if check.reproduced:
            kept.append(instance)
        else:
            dropped.append(BugReject(source=instance.source, version=instance.version, modifier=instance.modifier,
                                     path=instance.path, qualname=instance.qualname,
                                     hash8=instance.instance_id.rsplit("__", 1)[-1], reason=gate_reason(check),
                                     detail=normalized(check.detail)[:1000]))
    return kept, dropped


def gate_reason(check) -> str:
    """Why the final gate dropped an instance, the first that holds: its tests do not all pass clean, a
    FAIL_TO_PASS test does not fail with the bug, a PASS_TO_PASS test does not pass with it."""
    if not check.fixed_passes:
        return "gate_fails_clean"
    return "gate_bug_not_failing" if not check.buggy_fails else "gate_bug_breaks_passing"


def generate_for_library(runner: SuiteRunner, archive: bytes, archive_name: str, per_library: int,
                         modifiers: list[str], seed: int, concurrency: int = 2, *, environment: Environment,
                         environment_path: str | None = None, excluded: list[Exclusion] = (),
                         clean_limits: SandboxLimits = SUITE_LIMITS, rewrites=None,
                         tests_per_candidate: int = TESTS_PER_CANDIDATE, cache: str | None = None) -> LibraryResult:
    """`environment` (at `environment_path`, None for the sandbox's own) is what the tests run against;
    `excluded`: requirements its builder left out; `clean_limits`: the clean runs' limits (candidates get a
    multiple of the clean run's time); `rewrites(modules, executed)`: a model's rewritten functions as candidates
    and the replies refused (lm_rewrite), asked once the tests' coverage says which functions they run;
    `tests_per_candidate`: at most this many of the tests that can notice a candidate run it (verdict.quick_sample);
    `cache`: a folder keeping the archive its units unpack (rewrites.prepared_archive)."""
    name, version = name_and_version(archive_name)
    files = read_archive(archive)
    layout = layout_of(name, version, list(files))
    result = LibraryResult(source=name, version=version, environment=environment, excluded=list(excluded))
    space = Workspace(runner, prepared_archive(archive, files, layout, cache), layout, environment, environment_path)
    space, first, second, left_out, why = clean_runs(space, concurrency, clean_limits)
    result.excluded += left_out
    if why is not None:
        result.rejects.append(BugReject(source=name, version=version, reason="no_baseline",
                                        detail=f"the clean suite cannot be trusted: {normalized(why)[:1000]}"))
        return result
    baseline = result.baseline = baseline_of(first, second).model_copy(
        update={"standing_refusal": standing_refusal(first, second)})
    if not baseline.passing:
        result.rejects.append(BugReject(source=name, version=version, reason="no_baseline",
                                        detail=f"no test passed the clean suite twice ({first.outcome}: "
                                               f"{first.detail})"))
        return result
    modules = {path: files[path].decode("utf-8", "replace") for path in layout.modules}
    candidates = candidates_of(modules, modifiers)
    result.candidates_total = len(candidates)
    collected = Collected([test.name for test in first.tests], space.deselected)
    passing = collected.ordered(baseline.passing)
    # What the baseline tests (with the wide fixtures they use, and the import) executed: only they can show a change.
    in_baseline = set(passing)
    coverage = {test: keys for test, keys in first.coverage.items()
                if test == IMPORT_TIME or test in in_baseline or test.startswith(FIXTURE)}
    can_notice, noticing = Noticing(coverage, passing), {}
    timing = Timing({test.name: test.seconds or 0.0 for test in second.tests}, second.collection_seconds)

    def selection(c: Candidate) -> list[str]:
        if c not in noticing:
            noticing[c] = can_notice.tests(c.path, c.qualname)
        return noticing[c]

    if rewrites is not None:
        rewritten, refused = rewrites(modules, lambda path, qualname: bool(can_notice.running(path, qualname)))
        candidates += rewritten
        result.rejects += refused
        result.candidates_total = len(candidates)
    copies, copied = ProjectCopies(files), []

    def eligible(c: Candidate) -> bool:
        if not (selection(c) and worth_trying(c, modules[c.path])):
            return False
        elsewhere = copies.holding(c, modules[c.path])
        if elsewhere is not None:  # refused untried: the task folder would hold the fix (copies)
            copied.append(BugReject(source=name, version=version, modifier=c.modifier, path=c.path,
                                    qualname=c.qualname, hash8=c.hash8, reason="answer_elsewhere",
                                    detail=f"{elsewhere} holds the clean code of {c.qualname}"))
        return elsewhere is None

    chosen = choose(candidates, per_library, seed, f"{name}-{version}", eligible)
    result.rejects += copied
    if not chosen:
        result.rejects.append(BugReject(source=name, version=version, reason="no_candidates",
                                        detail=f"{len(candidates)} candidates, none in code the tests execute"))
        return result
    limits = SUITE_LIMITS.model_copy(update={"timeout_s": min(SUITE_LIMITS.timeout_s, max(
        MIN_TIMEOUT_S, TIMEOUT_FACTOR * max(first.usage.wall_s, second.usage.wall_s)))})

    def settle(c: Candidate) -> tuple[SuiteRunResult, Verdict]:
        """A candidate's run and verdict: on a sample of the tests that can notice it (with companions where it has
        room); where the sample passed whole (a change that only a few of them notice), on a wider sample of the
        others (wider_sample), no test twice; where the sample failed whole and nothing passed beside it, on all of
        them."""
        def tried(tests: list[str], passed: list[str] = (), beside: list[str] = ()) -> tuple[SuiteRunResult, Verdict]:
            run = space.run(collected.arguments([*tests, *beside]), {c.path: c.buggy_source}, limits=limits)
            return run, judge(tests, run, passing, baseline.collection_errors, baseline.standing_refusal,
                              noticing[c], passed, beside)

        sample = quick_sample(noticing[c], tests_per_candidate, timing)
        run, verdict = tried(sample, beside=companions(sample, noticing[c], passing, tests_per_candidate - len(sample),
                                                      timing))
        if verdict.reason not in ("survived", "no_pass_to_pass") or len(sample) == len(noticing[c]):
            return run, verdict
        if verdict.reason == "survived" and verdict.pass_to_pass:
            wider = wider_sample(noticing[c], sample, tests_per_candidate, timing)
            run, verdict = tried(wider, verdict.pass_to_pass)
            ran, every = len(sample) + len(wider), len(noticing[c])
            if verdict.reason != "survived":
                return run, verdict
            return run, replace(verdict, detail=f"all {every} baseline tests that can notice it still pass" if ran == every
                                else f"the {ran} of the {every} baseline tests that can notice it that ran (a sample, "
                                     f"then a wider one) still pass")
        return tried(noticing[c])

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        settled = dict(zip(chosen, pool.map(settle, chosen)))
    valid = []
    for candidate, (run, verdict) in settled.items():
        result.tried += 1
        result.tried_by_modifier[candidate.modifier] = result.tried_by_modifier.get(candidate.modifier, 0) + 1
        if verdict.valid:
            listed = thinned(verdict, tests_per_candidate, timing)
            instance = instance_of(space, candidate, modules[candidate.path], listed, collected)
            valid.append((instance, candidate.buggy_source, proven_run(run, instance, collected)))
        else:
            result.rejects.append(BugReject(source=name, version=version, modifier=candidate.modifier,
                                            path=candidate.path, qualname=candidate.qualname,
                                            hash8=candidate.hash8, reason=verdict.reason, detail=verdict.detail))
    result.instances, dropped = final_gate(space, valid, limits, concurrency)
    result.gate_checked = len(valid)
    result.rejects += dropped
    if COMBINED in modifiers:  # valid singles of one file put together, proven the same way
        combined = combine_bugs(space, result.instances, modules, seed, passing, baseline, collected, limits,
                                concurrency)
        result.instances += combined.instances
        result.rejects += combined.rejects
        result.tried += combined.tried
        result.gate_checked += combined.gate_checked
        if combined.tried:
            result.tried_by_modifier[COMBINED] = combined.tried
    result.tried_by_modifier = dict(sorted(result.tried_by_modifier.items()))
    return result


def validate_scenario(runner: SuiteRunner, archive: bytes, source: str, module_path: str,
                      candidates: list[Candidate], *, environment: Environment,
                      environment_path: str | None = None) -> tuple[Instance | None, list[BugReject], dict[str, int]]:
    """A scenario's clean suite twice, then its candidates in order (each on every baseline test) until the first
    valid one that also passes the final gate."""
    layout = ProjectLayout(source, "1", ("",), ("tests",), (module_path,))
    space = Workspace(runner, archive, layout, environment, environment_path)
    first, second = space.run(layout.test_paths), space.run(layout.test_paths)
    rejects: list[BugReject] = []
    tried: dict[str, int] = {}
    why = untrusted(first) or untrusted(second)
    baseline = baseline_of(first, second)
    if why or not baseline.passing or baseline.collection_errors or first.failed or first.errors:
        detail = (f"the clean module does not pass its own tests ({first.passed} passed, {first.failed} failed, "
                  f"{first.errors} errors, collection errors: {baseline.collection_errors}; "
                  f"{why or first.detail})")
        return None, [BugReject(source=source, version=layout.version, reason="clean_code_fails", detail=detail)], tried
    clean = read_archive(archive)[module_path].decode("utf-8")
    limits = SUITE_LIMITS.model_copy(update={"timeout_s": max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * first.usage.wall_s)})
    collected = Collected([test.name for test in first.tests])
    passing = collected.ordered(baseline.passing)
    for candidate in candidates:
        tried[candidate.modifier] = tried.get(candidate.modifier, 0) + 1
        run = space.run(collected.arguments(passing), {candidate.path: candidate.buggy_source}, limits=limits)
        verdict = judge(passing, run, passing, baseline.collection_errors)
        if verdict.valid:
            instance = instance_of(space, candidate, clean, verdict, collected)
            kept, dropped = final_gate(space, [(instance, candidate.buggy_source,
                                                proven_run(run, instance, collected))], limits, 1)
            if kept:
                return kept[0], rejects, tried
            rejects += dropped
            continue
        rejects.append(BugReject(source=source, version=layout.version, modifier=candidate.modifier,
                                 path=candidate.path, qualname=candidate.qualname, hash8=candidate.hash8,
                                 reason=verdict.reason, detail=verdict.detail))
    return None, rejects, tried
