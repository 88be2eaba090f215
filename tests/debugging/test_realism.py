"""Realism of procedural bugs: the modifiers write changes as a person would (operands keep their text, literals
their notation, no brackets where none are needed), and the filters drop the forms that read as a machine's edit,
checked here by an independent reading of each change's diff."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from flawforge.debugging.candidates import Candidate, candidates_of, choose, digest_of
from flawforge.debugging.layout import layout_of, name_and_version, read_archive
from flawforge.debugging.modifiers import REGISTRY, apply_edits, sites_of
from flawforge.debugging.patches import unified_diff
from flawforge.debugging.realism import FILTERS, mechanical_form, worth_trying

MODULE = '''SURROGATE = 0xD800


class Grid(object):
    """A grid of cells."""

    def __init__(self, rows, columns):
        self.rows = rows
        self.columns = columns
        self.cells = [[0] * columns for _ in range(rows)]

    def neighbours(self, row, column):
        found = []
        for r in range(row - 1, row + 2):
            for c in range(column - 1, column + 2):
                if 0 <= r < self.rows and 0 <= c < self.columns and (r, c) != (row, column):
                    found.append(self.cells[r][c])
        return found

    def label(self, code):
        if code >= SURROGATE and code < 0xDC00:
            return "high %04x" % code
        elif code >= 0xDC00:
            return "low"
        elif code == 0:
            return "nul"
        return "x" + "-" * (code % 3)

    def window(self, items, size):
        if size <= 0 or size > len(items):
            raise ValueError("bad size")
        return [items[i:i + size] for i in range(len(items) - size + 1)]

    def last(self, items):
        return items[-1] if items and len(items) > 1 else None
'''


def candidates(source: str = MODULE) -> list[Candidate]:
    return candidates_of({"grid.py": source}, REGISTRY)


def added_and_removed(clean: str, candidate: Candidate) -> tuple[str, str]:
    diff = unified_diff(candidate.path, clean, candidate.buggy_source).splitlines()
    removed = "\n".join(l[1:] for l in diff if l.startswith("-") and not l.startswith("---"))
    added = "\n".join(l[1:] for l in diff if l.startswith("+") and not l.startswith("+++"))
    return added, removed


# An independent reading of the forms, on the diff's lines: each pattern found more often in the added lines than
# in the removed ones is a machine's edit.
MECHANICAL = {"x + 0": r"[+-] 0\b(?!\.|x)", "x * 1": r"(\*\*?|//?) 1\b(?!\.)", "doubled sign": r"[+-] -\d",
              "bracketed atom": r"(?<![\w)\]])\((-?\d+|\w+)\)", "single quotes": r"'[^'\n]*'",
              "double brackets": r"\(\((?![^()]*,)[^()]*\)\)", "class without object": r"class \w+(:|\(\))",
              "number before % or //": r"(?<![\w.)\]]) ?\b(0x[0-9A-Fa-f]+|\d+) (%|//) [\w(]", "comparison read backwards":
              r"(?<![<>=] )(?<![\w.])(0x[0-9A-Fa-f]+|\d+) (>|>=) [A-Za-z_(]", "a block of pass": r"(?m)^\s*pass\s*$"}


def mechanical_by_reading(clean: str, candidate: Candidate) -> list[str]:
    added, removed = added_and_removed(clean, candidate)
    found = [name for name, pattern in MECHANICAL.items()
             if len(re.findall(pattern, added)) > len(re.findall(pattern, removed))]
    hex_before = re.findall(r"0x[0-9A-Fa-f]+", removed)
    if len(re.findall(r"0x[0-9A-Fa-f]+", added)) < len(hex_before) and re.search(r"\b\d{4,}\b", added):
        found.append("hexadecimal as decimal")
    return found


def test_modifiers_keep_the_codes_own_text():
    """Operands keep their quotes and notation, brackets only where precedence needs them, constants shifted in
    their own notation, `object` never dropped."""
    texts = {c.modifier: [] for c in candidates()}
    for c in candidates():
        texts[c.modifier].append(added_and_removed(MODULE, c)[0])
    assert '        if code >= SURROGATE and code < 0xDC01:' in texts["op_change_const"]
    assert '        elif code > 0xDC00:' in texts["op_change"]
    assert '        return "x" - "-" * (code % 3)' not in texts["op_change"]  # no arithmetic traded on text
    assert '            return "high %04x" // code' not in texts["op_change"] + texts["op_invert"]
    assert '        return [items[i:i + size] for i in range(len(items) - size)]' in texts["off_by_one"]
    assert '        return [items[i:i + size + 1] for i in range(len(items) - size + 1)]' in texts["off_by_one"]
    assert '        return items[-2] if items and len(items) > 1 else None' in texts["off_by_one"]
    assert '        if size <= 0 or len(items) > size:' in texts["op_swap"]
    assert not any("class Grid" in text for text in texts.get("class_rm_base", []))
    assert any(t.startswith("        if not (0 <= r < self.rows") or "(r, c) == (row, column)" in t
               for t in texts["op_invert"] + texts["op_change"])
    removed_case = [c for c in candidates() if c.modifier == "remove_case"]
    assert {c.description for c in removed_case} == {"in Grid.label, the case 'elif code >= 0xDC00' is missing",
                                                      "in Grid.label, the case 'elif code == 0' is missing"}
    for candidate in candidates():  # what a filter drops, the reading finds too; what none drops reads as a person's
        found = mechanical_by_reading(MODULE, candidate)
        assert bool(found) == (mechanical_form(MODULE, candidate.buggy_source) is not None), (
            candidate.modifier, found, added_and_removed(MODULE, candidate))


@pytest.mark.parametrize("clean, buggy, form", [
    ("def f(x):\n    return x + 1\n", "def f(x):\n    return x + 0\n", "identity_operation"),
    ("def f(x):\n    return x * 2\n", "def f(x):\n    return x * 1\n", "identity_operation"),
    ("def f(x):\n    return x - 1\n", "def f(x):\n    return x - -1\n", "identity_operation"),
    ("def f(x):\n    return x[0]\n", "def f(x):\n    return x[(-1)]\n", "redundant_brackets"),
    ("def f(x):\n    return g(x - 1)\n", "def f(x):\n    return g((x + 1))\n", "redundant_brackets"),
    ("def f(x):\n    return x & 0xD800\n", "def f(x):\n    return x & 55297\n", "respelled_literal"),
    ("def f(x):\n    return x + \"a\"\n", "def f(x):\n    return 'a' + x\n", "respelled_literal"),
    ("def f(x):\n    return x * 1e6\n", "def f(x):\n    return x * 1000001.0\n", "respelled_literal"),
    ("def f(x):\n    return x < LIMIT\n", "def f(x):\n    return x < 10\n", "respelled_literal"),
    ("class A(object):\n    pass\n", "class A:\n    pass\n", "object_base_dropped"),
    ("def f(x):\n    return '%s' % x\n", "def f(x):\n    return '%s' ** x\n", "text_arithmetic"),
    ("def f(n):\n    return n % 10\n", "def f(n):\n    return 10 % n\n", "literal_first"),
    ("def f(t):\n    return t.days // 7\n", "def f(t):\n    return 7 // t.days\n", "literal_first"),
    ("def f(s):\n    return s.count > 0\n", "def f(s):\n    return 0 > s.count\n", "literal_first"),
    ("def f(xs):\n    for x in xs:\n        g(x)\n", "def f(xs):\n    for x in xs:\n        pass\n", "pass_for_body"),
    ("def f(x):\n    try:\n        g(x)\n    except KeyError:\n        pass\n",
     "def f(x):\n    try:\n        pass\n    except KeyError:\n        pass\n", "pass_for_body"),
    ("class A:\n    @overload\n    def f(self, x: int) -> int: ...\n\n    def f(self, x):\n        return x\n",
     "class A:\n    def f(self, x):\n        return x\n\n    @overload\n    def f(self, x: int) -> int: ...\n",
     "overload_after_implementation"),
])
def test_each_filter_drops_its_form(clean, buggy, form):
    assert form in FILTERS
    found = mechanical_form(clean, buggy)
    assert found is not None and found.name == form
    assert not worth_trying(Candidate("op_change", "m.py", "f", "", buggy, digest_of("m.py", buggy)), clean)


@pytest.mark.parametrize("clean, buggy", [
    ("def f(x):\n    return x[0]\n", "def f(x):\n    return x[1]\n"),
    ("def f(x):\n    return x + 1\n", "def f(x):\n    return x\n"),
    ("def f(x):\n    return (x + 1) * 2\n", "def f(x):\n    return (x - 1) * 2\n"),
    ("def f(x):\n    return x & 0xD800\n", "def f(x):\n    return x & 0xD801\n"),
    ("def f(x, y):\n    return g(x, y)\n", "def f(x, y):\n    return g(y, x)\n"),
    ("def f(x):\n    if x < 3:\n        return 1\n", "def f(x):\n    if x <= 3:\n        return 1\n"),
    ("class A(Base):\n    pass\n", "class A:\n    pass\n"),
    ("def f(n):\n    return n % 10\n", "def f(n):\n    return n % 100\n"),
    ("def f(r, n):\n    return 0 <= r < n\n", "def f(r, n):\n    return 0 <= r <= n\n"),
    ("def f(x):\n    try:\n        g(x)\n    except KeyError:\n        pass\n",
     "def f(x):\n    try:\n        g(x)\n    except KeyError:\n        raise\n"),
    ("def f(xs):\n    for x in xs:\n        g(x)\n        h(x)\n", "def f(xs):\n    for x in xs:\n        g(x)\n"),
])
def test_changes_a_person_makes_pass(clean, buggy):
    assert mechanical_form(clean, buggy) is None


def test_no_kept_candidate_of_a_real_library_reads_as_a_machines_edit(shared_data):
    """isodate's modules, every modifier (a seeded choice of 200 candidates, round robin over the modifiers): the
    candidates the filters keep show none of the forms by the independent reading; the ones they drop show at
    least one."""
    path = shared_data / "python-libraries" / "isodate-0.7.2.tar.gz"
    files = read_archive(path.read_bytes())
    layout = layout_of(*name_and_version(path.name), list(files))
    modules = {p: files[p].decode() for p in layout.modules}
    found = choose(candidates_of(modules, REGISTRY), 200, 0, "isodate")
    kept = [c for c in found if worth_trying(c, modules[c.path])]
    assert len(kept) > 0.9 * len(found) and {c.modifier for c in kept} >= set(REGISTRY) - {"class_rm_base",
                                                                                          "class_shuffle_methods"}
    for candidate in kept:
        assert not mechanical_by_reading(modules[candidate.path], candidate), added_and_removed(
            modules[candidate.path], candidate)
    for candidate in found:
        if candidate not in kept and mechanical_form(modules[candidate.path], candidate.buggy_source):
            assert mechanical_by_reading(modules[candidate.path], candidate), candidate.description


def test_a_removed_only_base_leaves_no_brackets():
    source = "class Store(Base):\n" + "".join(f"    def m{i}(self, a):\n        return a and a > {i} or a < 2\n"
                                                for i in range(4))
    site = next(s for s in sites_of("m.py", source) if s.is_class)
    (bug,) = REGISTRY["class_rm_base"].bugs(site)
    assert apply_edits(source, bug.edits).startswith("class Store:\n")
