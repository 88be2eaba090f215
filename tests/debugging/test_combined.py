"""Combined bugs, the pure part: edits of whole lines, kept apart by an unchanged line, merged as each part reads
alone; groups of 2-4 singles of one file, each single once, drawn by the seed."""
from __future__ import annotations

from flawforge.debugging.combined import apart, combinations, line_edits, merged
from flawforge.debugging.patches import unified_diff
from flawforge.proto.debugging import Environment, Instance

CLEAN = "".join(f"line{n} = {n}\n" for n in range(1, 21))


def changed(n: int, text: str = "x") -> str:
    return CLEAN.replace(f"line{n} = {n}\n", f"line{n} = {text}\n")


def single(n: int, path: str = "m.py", source: str | None = None) -> Instance:
    buggy = changed(n) if source is None else source
    return Instance(instance_id=f"lib.1.op_change__{n:08d}", source="lib", version="1", modifier="op_change",
                    path=path, qualname=f"f{n}", description=f"line {n} changed", patch=unified_diff(path, CLEAN, buggy),
                    fix_patch=unified_diff(path, buggy, CLEAN), FAIL_TO_PASS=[f"t.py::test_{n}"],
                    PASS_TO_PASS=["t.py::test_ok"], failing_output="", source_roots=[""], test_paths=["t.py"],
                    environment=Environment(python="3.11", packages=[]))


def test_edits_touching_or_overlapping_are_not_apart():
    three, four, five = (line_edits(CLEAN, changed(n)) for n in (3, 4, 5))
    assert apart(three, five) and not apart(three, four) and not apart(three, three)
    inserted = line_edits(CLEAN, CLEAN.replace("line4 = 4\n", "line4 = 4\nextra\n"))
    assert not apart(inserted, five) and apart(inserted, line_edits(CLEAN, changed(7)))
    both = merged(CLEAN, [three, five])
    assert both == changed(3).replace("line5 = 5\n", "line5 = x\n")


def test_combinations_are_of_one_file_apart_and_use_each_single_once():
    singles = [single(n) for n in (2, 3, 6, 10, 14, 18)] + [single(1, "other.py")]
    modules = {"m.py": CLEAN, "other.py": CLEAN}
    found = combinations(singles, modules, seed=0, count=10)
    assert found and all(2 <= len(c.parts) <= 4 for c in found)
    used = [p.instance_id for c in found for p in c.parts]
    assert len(used) == len(set(used)) and "lib.1.op_change__00000001" not in used
    for combination in found:
        assert {p.path for p in combination.parts} == {"m.py"}
        edits = [line_edits(CLEAN, changed(int(p.instance_id[-8:]))) for p in combination.parts]
        assert all(apart(a, b) for n, a in enumerate(edits) for b in edits[n + 1:])
        assert combination.candidate.buggy_source == merged(CLEAN, edits)
        assert combination.candidate.modifier == "combined"
        assert combination.selected == sorted({t for p in combination.parts for t in p.FAIL_TO_PASS + p.PASS_TO_PASS})
    assert not any({"lib.1.op_change__00000002", "lib.1.op_change__00000003"} <= {p.instance_id for p in c.parts}
                   for c in found)  # lines 2 and 3 touch
    assert [c.candidate.digest for c in found] == [c.candidate.digest for c in combinations(
        list(reversed(singles)), modules, seed=0, count=10)]
