"""The compiled form of an arithmetic expression behaves as the interpreter does: same value and type,
or the same error with the same message."""
from __future__ import annotations

import ast
from fractions import Fraction

import pytest

from flawforge.math.arithmetic import Evaluator, UnsafeExpression, compile_expression, parse_expression
from flawforge.math.program import Program, TemplateError
from tests.math.mutation_corpus import all_templates

# Values that reach every branch: whole and fractional, zero, negative, a Fraction, a huge exponent,
# and values that are not numbers (a trace may hold them).
SCOPES = [
    {},
    {"a": 6, "b": 4, "c": 2.5, "d": Fraction(3, 4), "e": 0, "f": -7, "g": 100},
    {"a": 0, "b": 0.0, "c": Fraction(0), "d": 1e308, "e": 3, "f": 2.0, "g": 65},
    {"a": "six", "b": [1, 2], "c": None, "d": True, "e": 1.5, "f": Fraction(7, 2), "g": -0.0},
]


def outcome(function, names):
    try:
        value = function(names)
    except UnsafeExpression as exc:
        return ("unsafe", str(exc))
    except Exception as exc:  # the interpreter lets some errors through; the compiled form must too
        return ("error", type(exc).__name__, str(exc))
    return ("value", type(value), value if value == value else "nan")


def assert_same(expression: ast.AST, names: dict) -> None:
    expected = outcome(lambda scope: Evaluator(scope).evaluate(expression), names)
    assert outcome(compile_expression(expression), names) == expected, ast.unparse(expression)


@pytest.mark.parametrize("text", [
    "a + b * c", "a / e", "a // e", "a % e", "g ** g", "a ** -2", "2 ** 0.5", "-f + +a", "not a", "~a",
    "a < b", "a if b else c", "f'{a}'", "'x' + a", "True + a", "[a, b]", "a.real", "d.numerator",
    "c.denominator", "a.numerator", "e.numerator", "int(c)", "round(c, 1)", "float('nan') * a", "max(a, b, g)",
    "Fraction(a, e)", "math.ceil(c)", "math.sqrt(a)", "abs(x=a)", "open(a)", "unknown * 2", "a + unknown",
    "d * 1e308 * 10", "int(float('inf'))", "(lambda: 1)()", "a @ b", "a << b", "1 / 0 + 'x'",
])
def test_compiled_expressions_match_the_interpreter(text):
    expression = parse_expression(text)
    for names in SCOPES:
        assert_same(expression, names)


def test_every_template_expression_matches_the_interpreter(shared_data):
    """Every right-hand side of every shared template, over scopes of every kind of value."""
    checked = 0
    for template in all_templates(shared_data):
        try:
            program = Program.parse(template.code, template.logical_steps)
        except TemplateError:
            continue
        for assignment in program.assignments:
            for values in SCOPES[1:]:
                assert_same(assignment.value, {name: values["abcdefg"[i % 7]]
                                               for i, name in enumerate(assignment.reads)})
            checked += 1
    assert checked > 20_000
