"""Suite batches against libraries whose mutants leave process state behind: every change gets the verdict it gets
in a unit of its own.

Each attack in attacks/suite_batch/ is a small library (FILES) and its mutants (CHANGES, in batch order), made as
the project's modifiers make them: a constant changed, a statement removed, operands swapped. The first mutant of
each survives and leaves state outside the library's namespaces (a pending alarm or timer, os.environ, a fake
sys.modules entry, a patched stdlib function, a cache file under HOME); the second is an equivalent mutant or a
real bug whose verdict that state would change. The batch must vouch for both (no hand-back: the state was put
back), with the outcomes each gets alone.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from flawforge.proto.sandbox import SuiteChange
from tests.debugging.test_suite_unit import LIMITS, archive

ATTACKS = sorted((Path(__file__).parent / "attacks" / "suite_batch").glob("*.py"))


def attack(path: Path) -> tuple[dict, list[dict]]:
    """FILES and CHANGES, read as literals (the file is data for the sandbox, never run here)."""
    values = {node.targets[0].id: ast.literal_eval(node.value) for node in ast.parse(path.read_text()).body
              if isinstance(node, ast.Assign)}
    return values["FILES"], values["CHANGES"]


@pytest.fixture(scope="module")
def sandbox():
    from flawforge.pipelines.debug_conversations import suite_sandbox

    with suite_sandbox.__wrapped__() as sandbox:  # its own: the shared one stays open for other tests
        yield sandbox


def outcomes(run) -> dict[str, str]:
    return {t.name: t.outcome for t in run.tests}


@pytest.mark.parametrize("path", ATTACKS, ids=[p.stem for p in ATTACKS])
def test_a_batch_gives_each_change_its_verdict_alone(sandbox, path):
    files, mutants = attack(path)
    project = archive({f"lib-1.0/{name}": text for name, text in files.items()})
    core = files["lib/core.py"]
    changes = []
    for mutant in mutants:
        assert mutant["old"] in core, mutant
        changes.append(SuiteChange(path="lib/core.py", qualname=mutant["qualname"],
                                   source=core.replace(mutant["old"], mutant["new"]), tests=mutant["tests"]))
    clean = sandbox.run_suite(project, args=["tests"], limits=LIMITS)
    baseline = sorted(name for name, outcome in outcomes(clean).items() if outcome == "passed")
    assert len(baseline) == len(outcomes(clean)) == 2, clean
    results = sandbox.run_suite_batch(project, changes, args=["tests"], modules=["lib/core.py"], baseline=baseline,
                                      limits=LIMITS)
    assert len(results) == len(changes) and None not in results, f"the batch did not vouch for every change: {results}"
    for change, result in zip(changes, results):
        alone = sandbox.run_suite(project, {change.path: change.source}, args=change.tests, limits=LIMITS)
        assert outcomes(result) == outcomes(alone), f"{change.qualname}: batch {outcomes(result)}, alone {outcomes(alone)}"
    assert list(outcomes(results[0]).values()) == ["passed"]  # the mutant that leaves state behind survives
