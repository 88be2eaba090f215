"""Batches share units, and each program still gets exactly the result it gets alone.

Every attack runs first in a batch of canaries that the batch admits: whatever the attack
did to its unit, each canary's trace must be exact, and the attack's own outcome the one
it has alone.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from flawforge.proto.values import TypedValue
from flawforge.sandbox import Sandbox
from flawforge.sandbox.engine import MIN_PROGRAMS_PER_UNIT
from tests.sandbox.conftest import LIMITS
from tests.sandbox.test_attacks import ALL, REPO, header, unit_processes

# Only what a batch admits (math, Fraction, plain builtins), and each value shows poisoning of one.
CANARY = '''\
import math
from fractions import Fraction


def solve():
    root = math.sqrt(16.0) + math.pi
    half = Fraction(1, 2)
    total = half + Fraction(1, 3)
    limited = Fraction(355, 113).limit_denominator(10)
    kinds = isinstance(5, Fraction), int("7"), round(2.5), str(3)
    answer = total * 6
    print(answer)
    return answer
'''
CANARY_TRACE = [
    ("root", 6, TypedValue.of(4.0 + 3.141592653589793)),
    ("half", 7, TypedValue(type="fraction", value=[1, 2])),
    ("total", 8, TypedValue(type="fraction", value=[5, 6])),
    ("limited", 9, TypedValue(type="fraction", value=[22, 7])),
    ("kinds", 10, TypedValue(type="other", value="(False, 7, 2, '3')", type_name="tuple")),
    ("answer", 11, TypedValue(type="fraction", value=[5, 1])),
]


def assert_exact_canary(result) -> None:
    assert result.outcome == "ok", result.detail
    assert [(s.name, s.line, s.value) for s in result.trace] == CANARY_TRACE
    assert result.return_value == TypedValue(type="fraction", value=[5, 1])
    assert (result.stdout, result.stderr) == ("5\n", "")


def counted(sandbox, run):
    before = Counter(sandbox.counts)
    value = run()
    return value, Counter(sandbox.counts) - before


def without_usage(result) -> dict:
    return result.model_dump(exclude={"usage"})


def test_a_large_batch_is_split_over_units_unless_told_not_to(sandbox):
    sources = [f"def solve():\n    x = {i}\n    return x * 2\n" for i in range(4 * MIN_PROGRAMS_PER_UNIT)]
    spread, units = counted(sandbox, lambda: sandbox.trace_batch(sources[0], sources[1:]))
    assert units == Counter(batch=min(4, sandbox.workers))
    together, units = counted(sandbox, lambda: sandbox.trace_batch(sources[0], sources[1:], parallel=False))
    assert units == Counter(batch=1)
    assert [without_usage(r) for r in together] == [without_usage(r) for r in spread]
    assert [r.return_value.to_python() for r in together] == [2 * i for i in range(len(sources))]


def test_admitted_programs_share_one_unit_and_match_running_alone(sandbox):
    template = "from fractions import Fraction\n\n\ndef solve():\n    x = Fraction({}, 3)\n    answer = x * 2\n" \
               "    print(answer)\n    return answer\n"
    variants = [template.format(i) for i in range(1, 12)] + ["def solve(:\n", "def solve():\n    return 1/0\n"]
    results, units = counted(sandbox, lambda: sandbox.trace_batch(template.format(0), variants))
    assert units == Counter(batch=1)
    alone = [sandbox.trace_call(source) for source in [template.format(0), *variants]]
    assert [without_usage(r) for r in results] == [without_usage(r) for r in alone]
    assert [r.stdout for r in results[:4]] == ["0\n", "2/3\n", "4/3\n", "2\n"]


def test_a_program_the_batch_may_not_hold_runs_alone(sandbox):
    reader = "import os\n\n\ndef solve():\n    return os.getcwd() != ''\n"
    results, units = counted(sandbox, lambda: sandbox.trace_batch(CANARY, [reader, CANARY]))
    assert units == Counter(batch=1, exec=1, alone=1)
    assert results[1].outcome == "ok" and results[1].return_value.to_python() is True
    assert_exact_canary(results[0])
    assert_exact_canary(results[2])


def test_an_endless_program_costs_the_others_nothing(sandbox):
    limits = LIMITS.model_copy(update={"timeout_s": 0.5})
    loop = "def solve():\n    n = 0\n    while True:\n        pass\n"
    start = time.monotonic()
    results = sandbox.trace_batch(CANARY, [loop, CANARY, CANARY], limits=limits)
    assert time.monotonic() - start < 2 * limits.timeout_s + 1
    assert results[1].outcome == "timeout"
    for result in results[:1] + results[2:]:
        assert_exact_canary(result)


def test_each_program_gets_its_own_output_and_its_own_output_limit(sandbox):
    limits = LIMITS.model_copy(update={"output_bytes": 100})
    printer = "def solve():\n    print({!r})\n    return 1\n"
    variants = [printer.format("b" * 10), printer.format("c" * 1000), printer.format("d")]
    results = sandbox.trace_batch(printer.format("a"), variants, limits=limits)
    assert [r.outcome for r in results] == ["ok", "ok", "output_limit", "ok"]
    assert [r.stdout for r in results] == ["a\n", "b" * 10 + "\n", "c" * 100, "d\n"]


def test_a_warning_quotes_its_own_program(sandbox):
    warned = "def solve():\n    flag = {} is 1\n    return flag\n"
    results = sandbox.trace_batch(warned.format("1"), [warned.format("2")])
    assert [without_usage(r) for r in results] == [without_usage(sandbox.trace_call(warned.format(n)))
                                                   for n in ("1", "2")]
    assert all("SyntaxWarning" in r.stderr for r in results)


@pytest.mark.parametrize("path", [p for p in ALL if header(p).get("unit") != "tests"],
                         ids=[p.stem for p in ALL if header(p).get("unit") != "tests"])
def test_attack_leaves_the_rest_of_its_batch_exact(sandbox, path):
    fields = header(path)
    source = path.read_text().replace("{REPO}", str(REPO))
    limits = LIMITS.model_copy(update={k: type(getattr(LIMITS, k))(fields[f]) for f, k in
                                       (("timeout", "timeout_s"), ("memory", "memory_mb")) if f in fields})
    markers = [Path(marker) for marker in fields.get("absent-after", "").split()]
    for marker in markers:
        marker.unlink(missing_ok=True)
    results = sandbox.trace_batch(CANARY, [source, CANARY, CANARY], limits=limits)
    assert not [marker for marker in markers if marker.exists()]
    assert results[1].outcome == fields["expect"], f"{results[1].outcome}: {results[1].detail}"
    if "returns" in fields:
        assert repr(results[1].return_value.to_python()) == fields["returns"]
    for canary_result in results[:1] + results[2:]:
        assert_exact_canary(canary_result)
    assert unit_processes(sandbox) == []


def test_single_programs_waiting_for_a_slot_share_a_unit_with_the_results_they_get_alone():
    """One slot, busy: the programs that wait for it run together in one batch unit when it frees, each with
    the result it gets alone (one that may not share, here it opens a file, runs alone after)."""
    programs = [f"def solve():\n    x = {n}\n    y = x * 3\n    print(y)\n    return y\n" for n in range(6)]
    programs.append("def solve():\n    with open('f.txt', 'w') as f:\n        f.write('x')\n    return 1\n")
    with Sandbox.from_settings(limits=LIMITS, workers=1) as sb:
        alone = [sb.trace_call(program) for program in programs]
        busy = threading.Thread(target=sb.execute, args=("import time\ntime.sleep(1.5)\n",))
        busy.start()
        time.sleep(0.3)  # the one slot is taken
        with ThreadPoolExecutor(len(programs)) as pool:
            shared = list(pool.map(sb.trace_call, programs))
        busy.join()
        assert sb.counts["coalesced"] == len(programs) and sb.counts["batch"] == 1
        for one, other in zip(alone, shared):
            assert (other.outcome, other.trace, other.return_value, other.stdout) == \
                (one.outcome, one.trace, one.return_value, one.stdout)
