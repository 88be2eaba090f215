"""One library in, its validated bugs and rejects out, given something that runs suites (the sandbox).

The clean suite runs twice (the first time with coverage); tests whose outcomes differ are
flaky and left out, the rest that passed both times are the baseline. Candidates come from
the modifiers over the library's modules; only candidates in code some test executes are
eligible; `per_library` of them are chosen with the seed and each runs the test files that
can notice it (see verdict). A candidate that changes only a function's body, or removes a
method, in code that does not run at import, runs in a suite batch: the suite collected once
per batch, the function's code replaced (the method deleted) in place, one batch per worker;
the others, and any change a batch hands back, run in a unit of their own with the changed
file written over the project. Runs go out concurrently; results are put in candidate order,
so the output does not depend on which finished first.
"""
from __future__ import annotations

import ast
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from flawforge.debugging.candidates import (Candidate, body_only_change, candidates_of, changes_code, choose,
                                            member_removal, parsed)
from flawforge.debugging.layout import ProjectLayout, layout_of, name_and_version, read_archive
from flawforge.debugging.patches import instance_id, unified_diff
from flawforge.debugging.verdict import covered, judge, runs_at_import, test_file, tests_to_run
from flawforge.proto.debugging import Baseline, BugReject, Instance, LibraryResult
from flawforge.proto.sandbox import SandboxLimits, SuiteChange, SuiteRunResult

SUITE_LIMITS = SandboxLimits(timeout_s=120, memory_mb=1024, workdir_mb=64, file_size_mb=16, open_files=256,
                             output_bytes=4 << 20, result_bytes=64 << 20)
# A candidate's run may take this many times the clean suite's (and at least MIN_TIMEOUT_S): a bug that loops
# forever is a timeout reject within seconds, not after the seed's 120 s.
TIMEOUT_FACTOR = 4
MIN_TIMEOUT_S = 15.0


class SuiteRunner(Protocol):
    def run_suite(self, archive: bytes, overlay: dict[str, str] | None = None, *, source_roots=(""), args=(),
                  coverage_files=None, limits: SandboxLimits | None = None) -> SuiteRunResult: ...

    def run_suite_batch(self, archive: bytes, changes: list[SuiteChange], *, source_roots=(""), args, modules=(),
                        baseline=(), limits: SandboxLimits | None = None) -> list[SuiteRunResult | None]: ...


def _outcomes(run: SuiteRunResult) -> dict[str, str]:
    return {t.name: t.outcome for t in run.tests}


def baseline_of(first: SuiteRunResult, second: SuiteRunResult) -> Baseline:
    one, two = _outcomes(first), _outcomes(second)
    flaky = sorted(t for t in set(one) | set(two) if one.get(t) != two.get(t))
    passing = sorted(t for t, outcome in one.items() if outcome == "passed" and t not in flaky)
    return Baseline(tests=len(one), passing=passing, flaky=flaky,
                    collection_errors=sorted(set(first.collection_errors) | set(second.collection_errors)),
                    wall_s=round(first.usage.wall_s, 3))


def instance_of(layout: ProjectLayout, candidate: Candidate, clean: str, verdict) -> Instance:
    return Instance(
        instance_id=instance_id(layout.name, layout.version, candidate.modifier, candidate.hash8),
        source=layout.name, version=layout.version, modifier=candidate.modifier, path=candidate.path,
        qualname=candidate.qualname, description=candidate.description, patch=candidate.patch(clean),
        fix_patch=unified_diff(candidate.path, candidate.buggy_source, clean),
        FAIL_TO_PASS=verdict.fail_to_pass, PASS_TO_PASS=verdict.pass_to_pass, failing_output=verdict.failing_output,
        source_roots=list(layout.source_roots), test_paths=list(layout.test_paths))


def generate_for_library(runner: SuiteRunner, archive: bytes, archive_name: str, per_library: int,
                         modifiers: list[str], seed: int, concurrency: int = 2) -> LibraryResult:
    name, version = name_and_version(archive_name)
    files = read_archive(archive)
    layout = layout_of(name, version, list(files))
    result = LibraryResult(source=name, version=version)
    with ThreadPoolExecutor(max_workers=concurrency) as pool:  # the two clean runs are independent
        runs = [pool.submit(runner.run_suite, archive, source_roots=layout.source_roots, args=layout.test_paths,
                            coverage_files=coverage_files, limits=SUITE_LIMITS)
                for coverage_files in (list(layout.modules), None)]
        first, second = (run.result() for run in runs)
    baseline = result.baseline = baseline_of(first, second)
    if not baseline.passing:
        result.rejects.append(BugReject(source=name, version=version, reason="no_baseline",
                                        detail=f"no test passed the clean suite twice ({first.outcome}: "
                                               f"{first.detail})"))
        return result
    modules = {path: files[path].decode("utf-8", "replace") for path in layout.modules}
    candidates = candidates_of(modules, modifiers)
    result.candidates_total = len(candidates)
    coverage = first.coverage
    chosen = choose(candidates, per_library, seed, f"{name}-{version}",
                    lambda c: covered(coverage, c.path, c.qualname) and changes_code(c, modules[c.path]))
    if not chosen:
        result.rejects.append(BugReject(source=name, version=version, reason="no_candidates",
                                        detail=f"{len(candidates)} candidates, none in code the tests execute"))
        return result
    limits = SUITE_LIMITS.model_copy(update={"timeout_s": min(SUITE_LIMITS.timeout_s, max(
        MIN_TIMEOUT_S, TIMEOUT_FACTOR * max(first.usage.wall_s, second.usage.wall_s)))})
    class_names = {path: _class_names(source) for path, source in modules.items()}
    args = {c: tests_to_run(coverage, list(layout.test_paths), c.path, c.qualname, c.qualname in class_names[c.path])
            for c in chosen}

    def alone(candidate: Candidate) -> SuiteRunResult:
        return runner.run_suite(archive, {candidate.path: candidate.buggy_source}, source_roots=layout.source_roots,
                                args=args[candidate], limits=limits)

    def batch(group: list[Candidate]) -> dict[Candidate, SuiteRunResult]:
        """The group's runs, in suite batches: a change a batch hands back runs alone, the changes after the one
        that ended a batch go to the next; if a batch reaches none (its collection failed), all run alone."""
        runs: dict[Candidate, SuiteRunResult] = {}
        pending = group
        while pending:
            results = runner.run_suite_batch(
                archive, [SuiteChange(path=c.path, qualname=c.qualname, source=c.buggy_source, tests=args[c],
                                      removal=c in removals) for c in pending],
                source_roots=layout.source_roots, args=sorted({test_file(t) for c in pending for t in args[c]}),
                modules=list(layout.modules), baseline=baseline.passing, limits=limits)
            reached = len(results) or len(pending)
            for candidate, run in zip(pending[:reached], results or [None] * reached):
                runs[candidate] = run if run is not None else alone(candidate)
            pending = pending[reached:]
        return runs

    in_place = [c for c in chosen if c.qualname not in class_names[c.path] and not runs_at_import(coverage, c.path,
                                                                                               c.qualname)]
    removals = {c for c in in_place if member_removal(modules[c.path], c.buggy_source, c.qualname)}
    batchable = [c for c in in_place
                 if c in removals or body_only_change(modules[c.path], c.buggy_source, c.qualname)]
    in_batches = set(batchable)
    others = [c for c in chosen if c not in in_batches]
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        batches = [pool.submit(batch, batchable[start::concurrency]) for start in range(concurrency)]
        single = dict(zip(others, pool.map(alone, others)))
        runs = {**single, **{c: run for done in batches for c, run in done.result().items()}}
    verdicts = [judge(baseline.passing, runs[c], args[c], list(layout.test_paths), baseline.collection_errors)
                for c in chosen]
    for candidate, verdict in zip(chosen, verdicts):
        result.tried += 1
        result.tried_by_modifier[candidate.modifier] = result.tried_by_modifier.get(candidate.modifier, 0) + 1
        if verdict.valid:
            result.instances.append(instance_of(layout, candidate, modules[candidate.path], verdict))
        else:
            result.rejects.append(BugReject(source=name, version=version, modifier=candidate.modifier,
                                            path=candidate.path, qualname=candidate.qualname,
                                            hash8=candidate.hash8, reason=verdict.reason, detail=verdict.detail))
    result.tried_by_modifier = dict(sorted(result.tried_by_modifier.items()))
    return result


def _class_names(source: str) -> set[str]:
    from flawforge.debugging.modifiers import definitions

    tree = parsed(source)
    return {name for name, node in definitions(tree) if isinstance(node, ast.ClassDef)} if tree is not None else set()


def validate_scenario(runner: SuiteRunner, archive: bytes, source: str, module_path: str,
                      candidates: list[Candidate]) -> tuple[Instance | None, list[BugReject], dict[str, int]]:
    """A scenario's clean suite twice, then its candidates in order until the first valid one."""
    layout = ProjectLayout(source, "1", ("",), ("tests",), (module_path,))
    first = runner.run_suite(archive, args=layout.test_paths, limits=SUITE_LIMITS)
    second = runner.run_suite(archive, args=layout.test_paths, limits=SUITE_LIMITS)
    baseline = baseline_of(first, second)
    rejects: list[BugReject] = []
    tried: dict[str, int] = {}
    if not baseline.passing or baseline.collection_errors or first.failed or first.errors:
        detail = (f"the clean module does not pass its own tests ({first.passed} passed, {first.failed} failed, "
                  f"{first.errors} errors, collection errors: {baseline.collection_errors}; {first.detail})")
        return None, [BugReject(source=source, version=layout.version, reason="clean_code_fails", detail=detail)], tried
    clean = read_archive(archive)[module_path].decode("utf-8")
    limits = SUITE_LIMITS.model_copy(update={"timeout_s": max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * first.usage.wall_s)})
    for candidate in candidates:
        tried[candidate.modifier] = tried.get(candidate.modifier, 0) + 1
        run = runner.run_suite(archive, {candidate.path: candidate.buggy_source}, args=layout.test_paths,
                               limits=limits)
        verdict = judge(baseline.passing, run, list(layout.test_paths), list(layout.test_paths),
                        baseline.collection_errors)
        if verdict.valid:
            return instance_of(layout, candidate, clean, verdict), rejects, tried
        rejects.append(BugReject(source=source, version=layout.version, modifier=candidate.modifier,
                                 path=candidate.path, qualname=candidate.qualname, hash8=candidate.hash8,
                                 reason=verdict.reason, detail=verdict.detail))
    return None, rejects, tried
