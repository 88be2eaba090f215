"""Issue-style problem statements from a failing test's facts: which side of an assertion came back and which was
expected, where a compared name got its value, unittest's assertEqual, an exception not raised, one raised; the
statement never quotes a line the patch changes, its description or its modifier."""
from __future__ import annotations

import pytest

from flawforge.debugging.statements import deterministic_statement, failure_of, failures_of, leaks
from flawforge.proto.debugging import Environment, Instance

TESTS = '''import pytest

from pkg.calc import ordinal, parse, Total


def test_ordinal_literal_first():
    """Docstrings are not code to run."""
    assert "1st" == ordinal(1)


@pytest.mark.parametrize("text, expected", [("1,2", [1, 2])])
def test_parse(text, expected):
    values = text.strip()
    result = parse(values)
    assert result == expected


def test_parse_refuses():
    with pytest.raises(ValueError):
        parse("x")


class TotalTest:
    def test_total(self):
        self.assertEqual(Total([1, 2]).value(), 3)
'''


def output(test: str, exception: str, line: int, code: str, library: bool = True) -> str:
    frames = [f'  File "tests/test_calc.py", line {line}, in {test.split("::")[-1].split("[")[0]}', f"    {code}"]
    if library:
        frames += ['  File "pkg/calc.py", line 12, in ordinal', "    return str(n) + SUFFIXES[n % 10 - 1]"]
    return "\n".join([f"{test}: failed", exception, "Traceback, most recent call last (pytest's own frames left out):",
                      *frames])


def test_the_side_that_calls_the_library_is_what_came_back():
    test = "tests/test_calc.py::test_ordinal_literal_first"
    failure = failure_of(test, output(test, "AssertionError: assert '1st' == '1th'\n  - 1th\n  + 1st", 8,
                                      'assert "1st" == ordinal(1)'), TESTS)
    assert (failure.actual, failure.expected, failure.subject) == ("'1th'", "'1st'", "ordinal(1)")
    assert failure.code == 'assert "1st" == ordinal(1)'  # the docstring left out


def test_an_inequality_names_the_check_that_failed_not_a_result_and_an_expectation():
    """`assert x != y` (or `<`, `in`) failing says the check does not hold: neither side is what was expected."""
    test = "tests/test_calc.py::test_ordinal_literal_first"
    failure = failure_of(test, output(test, "AssertionError: assert '1st' != '1st'", 8, 'assert "1st" != ordinal(1)'),
                         TESTS.replace('assert "1st" == ordinal(1)', 'assert "1st" != ordinal(1)'))
    assert (failure.actual, failure.expected, failure.subject) == (None, None, "'1st' != ordinal(1)")


def test_a_value_built_to_compare_with_is_never_said_to_have_come_back():
    """`result = a.__sub__(b)` then `assert result == timedelta(days=11)` (or `result.days == ...`): the name holds what
    came back, so the constructor call on the other side is not the wrong result."""
    source = ("from datetime import timedelta\n\nimport pkg\n\n\ndef test_sub():\n"
              "    result = pkg.Stamp(1).__sub__(pkg.Stamp(12))\n    assert result == timedelta(days=11)\n\n\n"
              "def test_days():\n    result = pkg.Stamp(1).__sub__(pkg.Stamp(12))\n"
              "    assert result.days == timedelta(days=11).days\n")
    for test, line, code, message in [
            ("tests/test_calc.py::test_sub", 8, "assert result == timedelta(days=11)",
             "AssertionError: assert datetime.timedelta(days=-11) == datetime.timedelta(days=11)"),
            ("tests/test_calc.py::test_days", 13, "assert result.days == timedelta(days=11).days",
             "AssertionError: assert -11 == 11")]:
        failure = failure_of(test, output(test, message, line, code, library=False), source, ("pkg",))
        assert not (failure.subject or "").startswith("timedelta"), failure
        assert failure.actual not in ("datetime.timedelta(days=11)", "11"), failure


def test_a_compared_name_is_traced_to_the_call_that_gave_it():
    test = "tests/test_calc.py::test_parse[1,2-expected0]"
    failure = failure_of(test, output(test, "AssertionError: assert [2, 1] == [1, 2]", 15, "assert result == expected"),
                         TESTS)
    assert (failure.actual, failure.expected, failure.subject) == ("[2, 1]", "[1, 2]", "parse(values)")
    assert failure.parameters == "1,2-expected0"
    assert failure.code == "values = text.strip()\nresult = parse(values)\nassert result == expected"


def test_an_exception_that_was_not_raised_and_one_that_was():
    test = "tests/test_calc.py::test_parse_refuses"
    failure = failure_of(test, output(test, "Failed: DID NOT RAISE <class 'ValueError'>", 19,
                                      "with pytest.raises(ValueError):", library=False), TESTS)
    assert failure.exception == "Failed" and failure.subject == "parse('x')"
    assert failure.code == 'with pytest.raises(ValueError):\n    parse("x")'
    test = "tests/test_calc.py::TotalTest::test_total"
    failure = failure_of(test, output(test, "TypeError: unsupported operand type(s) for +: 'int' and 'str'", 25,
                                      "self.assertEqual(Total([1, 2]).value(), 3)"), TESTS)
    assert failure.exception == "TypeError" and failure.subject == "self.assertEqual(Total([1, 2]).value(), 3)"
    failure = failure_of(test, output(test, "AssertionError: 4 != 3", 25, "self.assertEqual(Total([1, 2]).value(), 3)"),
                         TESTS)
    assert (failure.actual, failure.expected) == ("4", "3")


BOTH_SIDES_CALL = '''import pytest

import calc
from calc import helpers as h


def test_capitalized(word, plural):
    assert word.capitalize() == calc.singular(plural.capitalize())


def test_alike(a, b):
    assert a.strip() == b.strip()


def test_rows(rows):
    total = 0
    for row in rows:
        if row:
            continue
        total += h.size(row)
    try:
        checked = [h.size(r) for r in rows]
        assert checked == [
            1,
            2,
        ]
    except KeyError:
        pass
'''


def test_the_side_that_uses_the_library_is_what_came_back_when_both_sides_call_something():
    test = "tests/test_calc.py::test_capitalized[cow-kine]"
    failure = failure_of(test, output(test, "AssertionError: assert 'Cow' == 'Kine'", 8,
                                      "assert word.capitalize() == calc.singular(plural.capitalize())"),
                         BOTH_SIDES_CALL, ("calc",))
    assert (failure.actual, failure.expected) == ("'Kine'", "'Cow'")
    assert failure.subject == "calc.singular(plural.capitalize())"
    # neither side from the library: no side is said to be wrong, the check is named whole
    test = "tests/test_calc.py::test_alike"
    failure = failure_of(test, output(test, "AssertionError: assert 'a' == 'b'", 12, "assert a.strip() == b.strip()"),
                         BOTH_SIDES_CALL, ("calc",))
    assert (failure.actual, failure.expected, failure.subject) == (None, None, "a.strip() == b.strip()")


def test_an_expected_value_built_with_the_librarys_classes_is_not_what_came_back():
    """`expected = pd.Series(...)` and `[Token('a')]` build the expected value with the library's own classes: the
    name `expected` and the call to a class do not make that side what came back."""
    source = ("import pandas as pd\nfrom pkg import Token\n\n\ndef test_sum(df):\n    result = df.sum()\n"
              "    expected = pd.Series([1, 2])\n    assert result == expected\n\n\ndef test_tokens(tokenizer):\n"
              "    assert tokenizer.tokenize('a b') == [Token('a'), Token('b')]\n")
    test = "tests/test_calc.py::test_sum"
    failure = failure_of(test, output(test, "AssertionError: assert 3 == 4", 8, "assert result == expected"), source,
                         ("pandas", "pkg"))
    assert (failure.actual, failure.expected, failure.subject) == ("3", "4", "df.sum()")
    test = "tests/test_calc.py::test_tokens"
    failure = failure_of(test, output(test, "AssertionError: assert [Token('a')] == [Token('a'), Token('b')]", 12,
                                      "assert tokenizer.tokenize('a b') == [Token('a'), Token('b')]"), source,
                         ("pandas", "pkg"))
    assert failure.actual != "[Token('a'), Token('b')]"


def test_an_exception_is_named_as_the_traceback_names_it():
    test = "tests/test_calc.py::test_alike"
    failure = failure_of(test, output(test, "re.error: unterminated character set at position 1", 12,
                                      "assert a.strip() == b.strip()"), BOTH_SIDES_CALL, ("calc",))
    assert (failure.exception, failure.message) == ("re.error", "unterminated character set at position 1")
    assert failure.raised
    failure = failure_of(test, output(test, "decimal.InvalidOperation: [<class 'decimal.ConversionSyntax'>]", 12,
                                      "assert a.strip() == b.strip()"), BOTH_SIDES_CALL, ("calc",))
    assert failure.exception == "decimal.InvalidOperation" and failure.raised


def test_the_code_shown_is_whole_statements_that_compile():
    """A failing line inside a `try` of a long test: the window never starts inside a statement, never shows a
    `try` without its handler or a `continue` without its loop."""
    test = "tests/test_calc.py::test_rows"
    failure = failure_of(test, output(test, "AssertionError: assert [1, 3] == [1, 2]", 23, "assert checked == ["),
                         BOTH_SIDES_CALL, ("calc",))
    compile("def _():\n" + "\n".join("    " + line for line in failure.code.splitlines()), "<shown>", "exec")
    assert failure.code.startswith("for row in rows:\n") and failure.code.endswith("except KeyError:\n    pass")
    assert (failure.actual, failure.expected, failure.subject) == ("[1, 3]", "[1, 2]", "[h.size(r) for r in rows]")


def instance(failing_output: str, patch: str, **fields) -> Instance:
    return Instance(instance_id="calc.1.0.op_change__0123abcd", source="calc", version="1.0", modifier="op_change",
                    path="pkg/calc.py", qualname="ordinal", description="in ordinal, '-' became '+' on line 12",
                    patch=patch, fix_patch="", FAIL_TO_PASS=["tests/test_calc.py::test_ordinal_literal_first"],
                    PASS_TO_PASS=["tests/test_calc.py::test_parse_refuses"], failing_output=failing_output,
                    source_roots=[""], test_paths=["tests"], environment=Environment(python="3.11.7", packages=[]),
                    **fields)


PATCH = ("--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -12 +12 @@\n-    return str(n) + SUFFIXES[n % 10 - 1]\n"
         "+    return str(n) + SUFFIXES[n % 10 + 1]\n")


def test_the_statement_says_what_was_run_what_came_back_and_what_was_expected_and_nothing_of_the_bug():
    test = "tests/test_calc.py::test_ordinal_literal_first"
    bug = instance(output(test, "AssertionError: assert '1st' == '1th'", 8, 'assert "1st" == ordinal(1)'), PATCH)
    statement = deterministic_statement(bug, failures_of(bug, {"tests/test_calc.py": TESTS}))
    assert statement.startswith("# ") and 'assert "1st" == ordinal(1)' in statement
    assert "'1th'" in statement and "'1st'" in statement and "calc 1.0" in statement
    assert leaks(statement, bug) == []
    assert "SUFFIXES" not in statement and "line 12" not in statement and "op_change" not in statement
    # The same instance is worded the same way every time; another instance may be worded otherwise.
    assert statement == deterministic_statement(bug, failures_of(bug, {"tests/test_calc.py": TESTS}))
    wordings = {deterministic_statement(b, failures_of(b, {"tests/test_calc.py": TESTS})).split("\n\n")[1]
                for b in (bug.model_copy(update={"instance_id": f"calc.1.0.op_change__{n:08x}"}) for n in range(12))}
    assert len(wordings) >= 3


@pytest.mark.parametrize("text, found", [
    ("the code says `return str(n) + SUFFIXES[n % 10 + 1]`", "quotes the changed line"),
    ("in ordinal, '-' became '+' on line 12", "repeats the bug's description"),
    ("an op_change bug", "names the modifier op_change"),
])
def test_leaks_are_found(text, found):
    assert any(found in problem for problem in leaks(text, instance("", PATCH)))


def test_a_message_that_quotes_a_changed_line_is_left_out():
    """typing's message on an @overload implementation quotes the decorator the bug moved: the report names the
    exception without its message."""
    test = "tests/test_calc.py::test_ordinal_literal_first"
    patch = "--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -3,2 +3,1 @@\n-    @overload\n     def f(self): ...\n"
    said = "NotImplementedError: You should not call an overloaded function. A series of @overload-decorated ..."
    bug = instance(output(test, said, 8, 'assert "1st" == ordinal(1)'), patch)
    statement = deterministic_statement(bug, failures_of(bug, {"tests/test_calc.py": TESTS}))
    assert leaks(statement, bug) == [] and "NotImplementedError" in statement and "@overload" not in statement


MIXIN = '''from pkg.calc import ordinal


class OrdinalMixin:
    def test_first(self):
        result = ordinal(1)
        assert result == "1st"
'''


def test_a_test_inherited_from_a_mixin_is_read_from_the_mixins_file_and_no_code_block_is_ever_empty():
    """tests/test_calc.py::CalcTest::test_first runs OrdinalMixin.test_first of tests/__init__.py (as cachetools'
    suites do): its code is read there; where no file holds it, the statement gives the command that runs it."""
    test = "tests/test_calc.py::CalcTest::test_first"
    failing = "\n".join([f"{test}: failed", "AssertionError: assert '1th' == '1st'",
                         "Traceback, most recent call last (pytest's own frames left out):",
                         '  File "tests/__init__.py", line 7, in test_first', '    assert result == "1st"'])
    bug = instance(failing, PATCH).model_copy(update={"FAIL_TO_PASS": [test]})
    (failure,) = failures_of(bug, {"tests/__init__.py": MIXIN, "tests/test_calc.py": "from tests import *\n"})
    assert failure.code == 'result = ordinal(1)\nassert result == "1st"'
    assert (failure.actual, failure.expected, failure.subject) == ("'1th'", "'1st'", "ordinal(1)")
    library_only = failing.replace('  File "tests/__init__.py", line 7, in test_first\n    assert result == "1st"',
                                   '  File "pkg/calc.py", line 12, in ordinal\n    return str(n)')
    (unread,) = failures_of(bug.model_copy(update={"failing_output": library_only}), {})
    statement = deterministic_statement(bug, [unread])
    assert "```python\n\n```" not in statement and f"python -m pytest '{test}'" in statement


NEEDS_EARLIER_LINES = '''import pkg


def test_tree():
    root = pkg.Element("div")
    root.set("id", "x")
    child = pkg.SubElement(root, "p")
    child.text = "body"
    unrelated = pkg.Element("span")
    unrelated.text = "never compared"
    assert unrelated.text
    assert pkg.count(unrelated) == 1
    assert pkg.count(pkg.Element("b")) == 1
    assert pkg.count(pkg.Element("i")) == 1
    assert pkg.count(pkg.Element("u")) == 1
    assert pkg.count(pkg.Element("s")) == 1
    assert pkg.count(pkg.Element("q")) == 1
    root.tail = "end"
    assert pkg.render(root) == '<div id="x"><p>body</p></div>end'


def test_loop():
    words = {"a": 1, "b": 2}
    for key, value in words.items():
        if value > 1:
            continue
        assert pkg.size(key) == value
'''


def test_the_code_shown_defines_every_name_of_the_test_it_uses():
    """Where the window of statements before the failing one would start after a name it reads is bound, the code
    shown is the statements it needs instead: what binds its names, what changes them, including through a part
    bound from one (`child.text` changes `root`), and the headers of the loop it is in with what decides whether it
    runs; statements that touch none of them are left out. Every shown name of the test is then defined."""
    test = "tests/test_calc.py::test_tree"
    failure = failure_of(test, output(test, "AssertionError: assert '<div/>' == '<div id=\"x\"><p>body</p></div>end'",
                                      19, "assert pkg.render(root) == ..."), NEEDS_EARLIER_LINES, ("pkg",))
    assert failure.code.splitlines() == [
        'root = pkg.Element("div")', 'root.set("id", "x")', 'child = pkg.SubElement(root, "p")',
        'child.text = "body"', 'root.tail = "end"', """assert pkg.render(root) == '<div id="x"><p>body</p></div>end'"""]
    test = "tests/test_calc.py::test_loop"
    failure = failure_of(test, output(test, "AssertionError: assert 2 == 1", 27, "assert pkg.size(key) == value"),
                         NEEDS_EARLIER_LINES, ("pkg",))
    assert failure.code.splitlines() == [
        'words = {"a": 1, "b": 2}', "for key, value in words.items():", "    if value > 1:", "        continue",
        "    assert pkg.size(key) == value"]
