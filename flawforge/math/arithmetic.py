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
        self.names = names or {}

    def constant(self, node: ast.Constant) -> Any:
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise UnsafeExpression(f"unsupported constant {node.value!r}")
        return node.value

    def evaluate(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return self.evaluate(node.body)
        if isinstance(node, ast.Constant):
            return self.constant(node)
        if isinstance(node, ast.Name):
            if node.id not in self.names:
                raise UnsafeExpression(f"unknown name {node.id!r}")
            return self.names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = self.evaluate(node.left), self.evaluate(node.right)
            if isinstance(node.op, ast.Pow):
                self.check_exponent(right)
            try:
                return _BINARY[type(node.op)](left, right)
            except (ZeroDivisionError, OverflowError, TypeError, ValueError) as exc:
                raise UnsafeExpression(f"cannot evaluate {ast.unparse(node)}: {exc}") from None
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](self.evaluate(node.operand))
        if isinstance(node, ast.Call) and not node.keywords:
            name = call_name(node.func)
            if name in self.functions:
                args = [self.evaluate(arg) for arg in node.args]
                try:
                    return self.functions[name](*args)
                except (ZeroDivisionError, OverflowError, TypeError, ValueError) as exc:
                    raise UnsafeExpression(f"cannot evaluate {ast.unparse(node)}: {exc}") from None
        if isinstance(node, ast.Attribute) and node.attr in ATTRIBUTES:
            value = self.evaluate(node.value)
            if isinstance(value, bool) or not isinstance(value, (int, Fraction)):
                raise UnsafeExpression(f".{node.attr} of a {type(value).__name__}")
            return getattr(value, node.attr)
        raise UnsafeExpression(f"unsupported expression {ast.unparse(node)!r}")

    @staticmethod
    def check_exponent(exponent: Any) -> None:
        if not isinstance(exponent, (int, float, Fraction)) or abs(exponent) > MAX_EXPONENT:
            raise UnsafeExpression(f"exponent {exponent!r} too large")


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
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, Fraction):
        return value.denominator == 1
    return is_number(value)


def sign(value: Any) -> int:
    return (value > 0) - (value < 0)
