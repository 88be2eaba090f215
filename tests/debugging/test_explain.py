"""The deterministic writer's sentences about a fix, read off real diffs: fragments quoted as the code writes them,
a `pass` put in a statement's place, hunks that start with a blank line, and a check with no message."""
from __future__ import annotations

import pytest

from flawforge.debugging.explain import evidence, what_is_wrong
from flawforge.debugging.patches import unified_diff
from flawforge.debugging.statements import Failure

CLEAN = '''def singular_rule(plural, singular):
    return (r"{}{}$".format(plural[0].upper(), plural[1:]), singular)


class EnglishLocale(Locale):
    names = ["en"]


def expire(self):

    time = self.timer()
    return time
'''


def fix_of(buggy: str) -> str:
    """The fix as the pipeline writes it: the diff from the buggy module back to the clean one."""
    return unified_diff("pkg/mod.py", buggy, CLEAN)


@pytest.mark.parametrize("key", [f"k{n}" for n in range(8)])
def test_a_changed_fragment_is_quoted_as_the_code_writes_it(key):
    said = what_is_wrong(fix_of(CLEAN.replace("plural[0].upper()", "plural[-1].upper()")), key)
    assert "`-1`" in said and "`0`" in said and "- 1" not in said
    said = what_is_wrong(fix_of(CLEAN.replace("EnglishLocale(Locale)", "EnglishLocale")), key)
    assert "`(Locale)`" in said and "( Locale )" not in said


@pytest.mark.parametrize("key", [f"k{n}" for n in range(8)])
def test_a_statement_replaced_by_pass_and_a_hunk_that_starts_blank(key):
    said = what_is_wrong(fix_of(CLEAN.replace("    time = self.timer()\n", "    pass\n")), key)
    assert "`time = self.timer()`" in said and "`pass`" in said and "uses `pass`" not in said
    said = what_is_wrong(fix_of(CLEAN.replace("def expire(self):\n\n", "def expire(self):\n\n\n    extra = 1\n")), key)
    assert "``" not in said and "`extra = 1`" in said


@pytest.mark.parametrize("key", [f"k{n}" for n in range(4)])
def test_a_check_without_a_message_is_named_without_an_empty_quote(key):
    failure = Failure(test="tests/test_x.py::test_x", parameters=None, code="assert f()", line="assert f()",
                      exception="AssertionError", message="", subject="f()")
    said = evidence(failure, key)
    assert "``" not in said and "`f()`" in said and "`tests/test_x.py::test_x`" in said


BRANCHES = '''def humanize(value, frames):
    if abs(value) != 1:
        frames.append("plural")
        frames.append(value)
    else:
        frames.append("single")
    return frames
'''


@pytest.mark.parametrize("key", [f"k{n}" for n in range(6)])
def test_swapped_branches_are_said_to_be_swapped_not_lines_in_the_wrong_place(key):
    """The fix of an `if` whose bodies were exchanged only moves lines, `else:` among them: said as the branches of
    that `if`, never as a line (or the `else:`) in the wrong place."""
    buggy = BRANCHES.replace('        frames.append("plural")\n        frames.append(value)\n    else:\n'
                             '        frames.append("single")\n',
                             '        frames.append("single")\n    else:\n        frames.append("plural")\n'
                             '        frames.append(value)\n')
    said = what_is_wrong(unified_diff("pkg/mod.py", buggy, BRANCHES), key)
    assert "`if abs(value) != 1:`" in said and "wrong place" not in said
    assert "belongs elsewhere" not in said and "wrong order" not in said
    # A move without an `else:` is still a move.
    moved = BRANCHES.replace('        frames.append("plural")\n        frames.append(value)\n',
                             '        frames.append(value)\n        frames.append("plural")\n')
    assert "`if abs(value)" not in what_is_wrong(unified_diff("pkg/mod.py", moved, BRANCHES), key)
