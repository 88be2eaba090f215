"""Bug modifiers on the shared libraries' real modules: every change parses, differs, applies as a diff and
is undone by its fix; choice and deduplication are deterministic."""
from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from flawforge.debugging.candidates import Candidate, candidates_of, changes_code, choose
from flawforge.debugging.layout import layout_of, name_and_version, read_archive
from flawforge.debugging.modifiers import REGISTRY, apply_edits, sites_of
from flawforge.debugging.modifiers.base import complexity
from flawforge.debugging.patches import apply_patch, instance_id, unified_diff

PROCEDURAL = ("class_rm_base", "class_rm_funcs", "class_shuffle_methods", "ctrl_invert_if", "ctrl_shuffle",
              "remove_assign", "remove_cond", "remove_loop", "remove_wrapper", "op_break_chains", "op_change_const",
              "op_change", "op_swap")


def library_modules(shared_data: Path, archive: str) -> dict[str, str]:
    path = shared_data / "python-libraries" / archive
    files = read_archive(path.read_bytes())
    layout = layout_of(*name_and_version(path.name), list(files))
    return {p: files[p].decode("utf-8") for p in layout.modules}


@pytest.fixture(scope="module")
def cachetools(shared_data) -> dict[str, str]:
    return library_modules(shared_data, "cachetools-8.0.1.tar.gz")


def test_every_required_modifier_is_registered():
    assert set(PROCEDURAL) | {"op_invert", "numeric_perturb"} <= set(REGISTRY)
    for modifier in REGISTRY.values():
        assert modifier.explanation and modifier.targets in ("function", "class")


def test_chosen_candidates_parse_differ_and_round_trip(cachetools, shared_data):
    candidates = candidates_of(cachetools, REGISTRY)
    others = [c for archive in ("isodate-0.7.2.tar.gz", "tinydb-4.9.0.tar.gz")
              for c in candidates_of(library_modules(shared_data, archive), REGISTRY)]
    assert {c.modifier for c in candidates + others} == set(REGISTRY)
    assert len({c.digest for c in candidates}) == len(candidates)  # deduplicated by content
    trees = {path: ast.dump(ast.parse(source)) for path, source in cachetools.items()}
    chosen = choose(candidates, 120, 0, "cachetools-8.0.1", lambda c: changes_code(c, cachetools[c.path]))
    assert len(chosen) == 120 and {c.modifier for c in chosen} == {c.modifier for c in candidates}
    for c in chosen:
        clean = cachetools[c.path]
        assert ast.dump(ast.parse(c.buggy_source)) != trees[c.path], c
        assert apply_patch(clean, c.patch(clean)) == c.buggy_source
        assert apply_patch(c.buggy_source, unified_diff(c.path, c.buggy_source, clean)) == clean


def test_a_change_is_judged_on_its_statements_as_on_the_whole_module(cachetools):
    """changes_code parses only the top-level statements a change touches; on a seeded sample of a library's
    candidates it says what parsing and comparing the whole modules says."""
    candidates = candidates_of(cachetools, REGISTRY)
    for c in random.Random(0).sample(candidates, 300):
        clean = cachetools[c.path]
        try:
            whole = ast.dump(ast.parse(c.buggy_source)) != ast.dump(ast.parse(clean))
        except SyntaxError:
            whole = False
        assert changes_code(c, clean) == whole, c
    clean = "import os\n\n\n@wraps\ndef f(x):\n    return x\n\n\ndef g(y):\n    return y\n"
    for buggy, changed in [("return (x", False), ("return  x", False), ("return x + 1", True)]:
        assert changes_code(Candidate("m", "m.py", "f", "", clean.replace("return x", buggy), ""), clean) is changed
    assert not changes_code(Candidate("m", "m.py", "g", "", clean.replace("    return y\n", ""), ""), clean)
    assert changes_code(Candidate("m", "m.py", "f", "", clean.replace("@wraps\n", ""), ""), clean)
    # Where the stretch of lines alone says otherwise than the whole module: a decorator's own lines, a line indented
    # into the block above, a continuation the next line ends, statements sharing a line, a form feed before.
    for before, after, changed in [
            ("@cache(maxsize=128)\ndef f(x):\n    return x\n", "@cache(maxsize=129)\ndef f(x):\n    return x\n", True),
            ("@p(\n    'a', [1]\n)\ndef t(a):\n    pass\n", "@p(\n    'a', [1]\nx\ndef t(a):\n    pass\n", False),
            ("def f():\n    return 1\n\nx = 2\n", "def f():\n    return 1\n\n    x = 2\n", True),
            ("a = 1\n2\n", "a = 1 + \\\n2\n", True),
            ("x = 1; y = (\n    2)\n", "x = 1; y = (\n    2 )\n", False),
            ("\x0c\ndef g():\n    x = 1\n    return x\n", "\x0c\ndef g():\n    x = 1\n    return  x\n", False),
            ("\x0c\ndef g():\n    return x\n", "\x0c\ndef g():\n    return -x\n", True)]:
        assert changes_code(Candidate("m", "m.py", "f", "", after, ""), before) is changed, after


def test_applicability_follows_complexity_bounds(cachetools):
    for path, source in cachetools.items():
        for site in sites_of(path, source):
            for name in ("class_rm_funcs", "ctrl_invert_if", "ctrl_shuffle", "remove_assign"):
                modifier = REGISTRY[name]
                if not modifier.applies(site):
                    assert modifier.bugs(site) == []
            if site.is_class:
                assert REGISTRY["class_rm_funcs"].applies(site) == (site.complexity >= 10)
            else:
                assert REGISTRY["ctrl_shuffle"].applies(site) == (3 <= site.complexity <= 10)
                assert REGISTRY["ctrl_invert_if"].applies(site) == (site.complexity >= 5)


def test_complexity_counts_branches_boolean_operators_handlers_comparisons():
    source = ("def f(a, b):\n    if a and b or a:\n        return 1\n    for x in b:\n        pass\n"
              "    try:\n        pass\n    except ValueError:\n        pass\n    return a < b < 3\n")
    (site,) = sites_of("m.py", source)
    # 1 + if + (and: 1, or: 1) + for + handler + 2 comparisons
    assert complexity(site.node) == 1 + 1 + 2 + 1 + 1 + 2


def test_inversion_table_and_numeric_perturbation_on_a_known_function():
    source = "def f(a, b):\n    if a < b and a != 0:\n        return a + 2\n    return a * b\n"
    (site,) = sites_of("m.py", source)
    inverted = {apply_edits(source, bug.edits) for bug in REGISTRY["op_invert"].bugs(site)}
    assert "def f(a, b):\n    if a <= b and a != 0:\n        return a + 2\n    return a * b\n" in inverted
    assert "def f(a, b):\n    if a < b or a != 0:\n        return a + 2\n    return a * b\n" in inverted
    assert "def f(a, b):\n    if a < b and a != 0:\n        return a - 2\n    return a * b\n" in inverted
    assert "def f(a, b):\n    if a < b and a != 0:\n        return a + 2\n    return a / b\n" in inverted
    perturbed = {apply_edits(source, bug.edits) for bug in REGISTRY["numeric_perturb"].bugs(site)}
    assert "def f(a, b):\n    if a < b and a != 0:\n        return a + 3\n    return a * b\n" in perturbed
    assert "def f(a, b):\n    if a < b and a != -1:\n        return a + 2\n    return a * b\n" in perturbed


def test_choice_is_seeded_round_robin_and_stable(cachetools):
    candidates = candidates_of(cachetools, REGISTRY)
    first = choose(candidates, 30, 7, "cachetools-8.0.1")
    assert first == choose(list(reversed(candidates)), 30, 7, "cachetools-8.0.1")
    assert first != choose(candidates, 30, 8, "cachetools-8.0.1")
    modifiers = sorted({c.modifier for c in candidates})
    rotation = [c.modifier for c in first[:len(modifiers)]]
    assert sorted(rotation) == modifiers  # one of each before any twice, in name order from a seeded start
    start = modifiers.index(rotation[0])
    assert rotation == modifiers[start:] + modifiers[:start]


def test_instance_ids():
    assert instance_id("toolz", "1.2.0", "op_swap", "0123abcd") == "toolz.1.2.0.op_swap__0123abcd"
    assert instance_id("orbital mechanics/Hohmann", "1", "llm_variant", "ffffffff") == \
        "orbital-mechanics-Hohmann.1.llm_variant__ffffffff"


def test_shuffling_methods_applies_only_where_the_winning_definition_changes():
    source = ("from typing import overload\n\n\nclass Table:\n"
              "    def size(self):\n        return 0\n\n    def name(self):\n        return 't'\n\n"
              "    @property\n    def key(self):\n        return self._key\n\n"
              "    @key.setter\n    def key(self, value):\n        self._key = value\n\n"
              "    @overload\n    def get(self, a: int) -> int: ...\n\n"
              "    @overload\n    def get(self, a: str) -> str: ...\n\n"
              "    def get(self, a):\n        if a and a > 1 or a == 2 and a != 3:\n            return a\n"
              "        return a if a else (a or a < 1 or a > 2)\n")
    site = next(s for s in sites_of("m.py", source) if s.is_class)
    (bug,) = REGISTRY["class_shuffle_methods"].bugs(site)  # only the last stub and the implementation
    buggy = apply_edits(source, bug.edits)
    namespace = {}
    exec(compile(buggy, "m.py", "exec"), namespace)
    with pytest.raises(NotImplementedError):  # typing's overload stub now wins over the implementation
        namespace["Table"]().get(2)
    assert "def size" in buggy and buggy.index("def size") < buggy.index("def name")
    assert buggy.index("@key.setter") > buggy.index("@property")


def test_a_removed_method_leaves_one_blank_line_between_the_methods_around_it():
    """Removing a method takes the blank lines before it too: the methods around it keep one blank line between them
    (two would show where something was taken out), and a class's last method leaves the two before the next
    top-level definition."""
    source = ("class Table:\n    \"\"\"A table.\"\"\"\n\n    def size(self):\n        if self and self.rows > 1:\n"
              "            return 1\n        return 0\n\n    def name(self):\n        if self or self.x and self.y:\n"
              "            return 't'\n        return 'u' if self else 'v'\n\n    def key(self):\n"
              "        return self._key if self._key and self._key > 0 else None\n\n\ndef other():\n    return 1\n")
    site = next(s for s in sites_of("m.py", source) if s.is_class)
    buggies = [apply_edits(source, bug.edits) for bug in REGISTRY["class_rm_funcs"].bugs(site)]
    assert len(buggies) == 3
    for buggy in buggies:
        compile(buggy, "m.py", "exec")
        assert "\n\n\n    " not in buggy and "\n\n\ndef other" in buggy, buggy
    assert "\"\"\"A table.\"\"\"\n\n    def name" in buggies[0]
    assert "return 0\n\n    def key" in buggies[1]
    assert buggies[2].endswith("return 'u' if self else 'v'\n\n\ndef other():\n    return 1\n")
