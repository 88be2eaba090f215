"""Every attack in attacks/ is contained and reported with its declared outcome.

An attack is one file: a program (or, with `# unit: tests`, a unittest module) and header
comments declaring what must happen:

    # expect: forbidden                 outcome with every layer
    # expect-without-audit: error       outcome with only the operating-system layers
    # timeout: 0.5 / memory: 64         limits for this attack
    # expect-tests: error=1             test counts (unit: tests)
    # returns: 0                        the return value's repr
    # absent-after: /tmp/marker         a host path the attack tries to create
    # detail: seccomp                   words the outcome's detail must hold (also detail-without-audit)
    # repeat: 2                         runs it again in the slot it just left (what a unit leaves behind
                                        must not reach the next); each run must end as declared

After each attack a canary unit must see a clean interpreter, no process of a unit may
survive, and the sandbox must still work; and every result must serialise and parse back.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.sandbox import canary
from tests.sandbox.conftest import LIMITS

ATTACKS = Path(__file__).parent / "attacks"
REPO = Path(__file__).resolve().parents[2]
HEADER = re.compile(r"^#\s*([a-z-]+):\s*(.*?)\s*$")


def header(path: Path) -> dict[str, str]:
    fields = {}
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        match = HEADER.match(line)
        if match:
            fields[match.group(1)] = match.group(2)
    return fields


def unit_processes(sandbox) -> list[int]:
    """Host processes running under one of the sandbox's unit uids."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                uid = os.stat(f"/proc/{entry}").st_uid
            except FileNotFoundError:
                continue
            if uid in sandbox.unit_uids:
                found.append(int(entry))
    return found


def run_attack(sandbox, path: Path, expected: str, detail: str | None = None) -> None:
    fields = header(path)
    for _ in range(int(fields.get("repeat", 1))):  # one after another: a slot just freed is the next one taken
        run_attack_once(sandbox, path, fields, expected, detail)


def run_attack_once(sandbox, path: Path, fields: dict[str, str], expected: str, detail: str | None) -> None:
    source = path.read_text().replace("{REPO}", str(REPO))
    limits = LIMITS.model_copy(update={k: type(getattr(LIMITS, k))(fields[f]) for f, k in
                                       (("timeout", "timeout_s"), ("memory", "memory_mb")) if f in fields})
    for marker in fields.get("absent-after", "").split():
        Path(marker).unlink(missing_ok=True)

    if fields.get("unit") == "tests":
        result = sandbox.run_tests("", source, "target", limits=limits)
        counts = {"passed": result.passed, "failed": result.failed, "error": result.errors, "skipped": result.skipped}
        for pair in fields.get("expect-tests", "").split():
            name, number = pair.split("=")
            assert counts[name] == int(number), (counts, result.tests)
    else:
        result = sandbox.trace_call(source, limits=limits)
        if "returns" in fields and expected == "ok":
            assert result.return_value is not None and repr(result.return_value.to_python()) == fields["returns"]

    assert result.outcome == expected, f"{path.name}: {result.outcome} ({result.detail}) {result.error}"
    dumped = result.model_dump_json()  # well-formed whatever the program did: it parses back, as itself
    assert type(result).model_validate_json(dumped).model_dump_json() == dumped and json.loads(dumped)
    assert result.detail or expected == "ok"
    assert detail is None or detail in result.detail, f"{path.name}: {result.detail}"
    assert result.usage.wall_s < limits.timeout_s + 2

    for marker in fields.get("absent-after", "").split():
        assert not Path(marker).exists(), f"{path.name} created {marker} on the host"
    assert unit_processes(sandbox) == [], f"{path.name} left processes behind"
    canary.check(sandbox)


ALL = sorted(ATTACKS.glob("*.py"))


def test_the_suite_has_at_least_65_attacks():
    assert len(ALL) >= 65
    for path in ALL:
        assert {"expect", "expect-without-audit"} <= header(path).keys(), path.name


@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_attack_is_contained(sandbox, path):
    run_attack(sandbox, path, header(path)["expect"], header(path).get("detail"))


@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_attack_is_contained_by_os_layers_alone(sandbox_without_audit, path):
    run_attack(sandbox_without_audit, path, header(path)["expect-without-audit"],
               header(path).get("detail-without-audit"))
