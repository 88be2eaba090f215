"""Safe evaluation of the small arithmetic expressions found in templates and solutions.

Templates are written by language models and solutions are generated text, so neither is
ever passed to eval(): expressions are parsed with `ast` and only numbers, names bound by
the caller, arithmetic operators, a few pure functions and `.numerator`/`.denominator`
are evaluated. Anything else raises UnsafeExpression.
"""
from __future__ import annotations

import ast
import math
import operator
from fractions import Fraction
from typing import Any, Callable, Mapping

MAX_EXPONENT = 64  # keeps `9**9**9`-style expressions from exhausting memory

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}

FUNCTIONS: dict[str, Callable[..., Any]] = {
    "int": int, "float": float, "round": round, "abs": abs, "min": min, "max": max, "Fraction": Fraction,
    "math.ceil": math.ceil, "math.floor": math.floor,
}
ATTRIBUTES = ("numerator", "denominator")


class UnsafeExpression(ValueError):
    """The expression uses something outside the allowed arithmetic, or cannot be evaluated."""


def call_name(node: ast.expr) -> str | None:
    """'int' for int(...), 'math.ceil' for math.ceil(...); None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


class Evaluator:
    """Evaluates a parsed expression. Subclasses choose how constants become values."""

    functions: Mapping[str, Callable[..., Any]] = FUNCTIONS

    def __init__(self, names: Mapping[str, Any] | None = None):
        self.names = {} if names is None else names

    def constant(self, node: ast.Constant) -> Any:
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise UnsafeExpression(f"unsupported constant {node.value!r}")
        return node.value

    def evaluate(self, node: ast.AST) -> Any:
        rule = _RULES.get(type(node))
        if rule is None:
            raise UnsafeExpression(f"unsupported expression {ast.unparse(node)!r}")
        return rule(self, node)

    def _expression(self, node: ast.Expression) -> Any:
        return self.evaluate(node.body)

    def _name(self, node: ast.Name) -> Any:
        try:
            return self.names[node.id]
        except KeyError:
            raise UnsafeExpression(f"unknown name {node.id!r}") from None

    def _binary(self, node: ast.BinOp) -> Any:
        operation = _BINARY.get(type(node.op))
        if operation is None:
            raise UnsafeExpression(f"unsupported operator in {ast.unparse(node)!r}")
        left, right = self.evaluate(node.left), self.evaluate(node.right)
        if operation is operator.pow:
            self.check_exponent(right)
        try:
            return operation(left, right)
        except (ZeroDivisionError, OverflowError, TypeError, ValueError) as exc:
            raise UnsafeExpression(f"cannot evaluate {ast.unparse(node)}: {exc}") from None

    def _unary(self, node: ast.UnaryOp) -> Any:
        operation = _UNARY.get(type(node.op))
        if operation is None:
            raise UnsafeExpression(f"unsupported operator in {ast.unparse(node)!r}")
        return operation(self.evaluate(node.operand))

    def _call(self, node: ast.Call) -> Any:
        name = call_name(node.func)
        if node.keywords or name not in self.functions:
            raise UnsafeExpression(f"unsupported call {ast.unparse(node)!r}")
        args = [self.evaluate(arg) for arg in node.args]
        try:
            return self.functions[name](*args)
        except (ZeroDivisionError, OverflowError, TypeError, ValueError) as exc:
            raise UnsafeExpression(f"cannot evaluate {ast.unparse(node)}: {exc}") from None

    def _attribute(self, node: ast.Attribute) -> Any:
        if node.attr not in ATTRIBUTES:
            raise UnsafeExpression(f"unsupported attribute .{node.attr}")
        value = self.evaluate(node.value)
        if isinstance(value, bool) or not isinstance(value, (int, Fraction)):
            raise UnsafeExpression(f".{node.attr} of a {type(value).__name__}")
        return getattr(value, node.attr)

    @staticmethod
    def check_exponent(exponent: Any) -> None:
        if not isinstance(exponent, (int, float, Fraction)) or abs(exponent) > MAX_EXPONENT:
            raise UnsafeExpression(f"exponent {exponent!r} too large")


# How each kind of node is evaluated (dispatch on the exact type: this runs for every node of every mutant).
_RULES: dict[type, Callable[[Evaluator, Any], Any]] = {
    ast.Expression: Evaluator._expression, ast.Constant: lambda evaluator, node: evaluator.constant(node),
    ast.Name: Evaluator._name, ast.BinOp: Evaluator._binary, ast.UnaryOp: Evaluator._unary,
    ast.Call: Evaluator._call, ast.Attribute: Evaluator._attribute,
}


def parse_expression(text: str) -> ast.Expression:
    try:
        return ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError) as exc:
        raise UnsafeExpression(f"not an expression: {text!r} ({exc.__class__.__name__})") from None


def evaluate(expression: str | ast.AST, names: Mapping[str, Any] | None = None) -> Any:
    """The value of an arithmetic expression over `names`, computed with Python's own types."""
    node = parse_expression(expression) if isinstance(expression, str) else expression
    return Evaluator(names).evaluate(node)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float, Fraction)) and not isinstance(value, bool)


def is_int_like(value: Any) -> bool:
    # Fraction last: it is an abstract base class's subclass, slow to test other values against.
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, int):
        return not isinstance(value, bool)
    return isinstance(value, Fraction) and value.denominator == 1


def sign(value: Any) -> int:
    return (value > 0) - (value < 0)
