"""The compiled form of an expression computes what the interpreter computes: values, types, failures."""
from __future__ import annotations

import ast
from fractions import Fraction

import pytest

from flawforge.math.arithmetic import Evaluator, UnsafeExpression, compile_expression, parse_expression
from flawforge.math.program import Program, TemplateError

from tests.math.mutation_corpus import all_templates

NAMES = {"a": 7, "b": 2.5, "c": Fraction(3, 4), "z": 0, "big": 10**6}


def outcome(run):
    try:
        value = run()
    except UnsafeExpression:
        return "UnsafeExpression"
    return type(value).__name__, value


@pytest.mark.parametrize("text", [
    "a + b * c", "a / 2", "a // 2", "a % 3", "-a ** 2", "a ** 70", "a ** b", "+c", "a / z", "a // z",
    "int(b) + round(b) + abs(-a)", "min(a, b, c) + max(a, b)", "Fraction(a, 4)", "Fraction(1, z)",
    "math.ceil(b) - math.floor(b)", "c.numerator + c.denominator", "b.numerator", "a.real", "unknown + 1",
    "'text'", "True + 1", "a if b else c", "sorted([a])", "int(b, base=10)", "a @ b", "~a",
])
def test_compiled_expressions_match_the_interpreter(text):
    node = parse_expression(text)
    assert outcome(lambda: compile_expression(node)(NAMES)) == outcome(lambda: Evaluator(NAMES).evaluate(node))


def test_every_assignment_of_the_corpus_compiles_to_what_the_interpreter_computes(shared_data):
    checked = 0
    for template in all_templates(shared_data):
        try:
            program = Program.parse(template.code, template.logical_steps)
        except TemplateError:
            continue  # a reject of its own (see test_generate)
        values: dict = {}
        for assignment, computation in zip(program.assignments, program.computations):
            expected = outcome(lambda: Evaluator(values).evaluate(assignment.value))
            assert outcome(lambda: computation(values)) == expected, (template.problem_index, ast.unparse(assignment.node))
            if expected == "UnsafeExpression":
                break
            values[assignment.target] = expected[1]
            checked += 1
    assert checked > 10_000
