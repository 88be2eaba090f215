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
from functools import lru_cache
from typing import Any, Callable, Mapping

from flawforge.math import PROBLEM_CACHE_SIZE

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


Compiled = Callable[[Mapping[str, Any]], Any]  # an expression as a function of the names' values


class Evaluator:
    """Evaluates parsed expressions over `names`. Subclasses choose the functions an expression may call.

    An expression is compiled into nested closures and then evaluated; `compiled` keeps the closures of a tree
    that is evaluated again and again (a template's assignments, for every mutant)."""

    functions: Mapping[str, Callable[..., Any]] = FUNCTIONS

    def __init__(self, names: Mapping[str, Any] | None = None):
        self.names = {} if names is None else names

    def evaluate(self, node: ast.AST) -> Any:
        return _compile(self.functions, node)(self.names)


@lru_cache(maxsize=PROBLEM_CACHE_SIZE)
def compiled(evaluator: type[Evaluator], node: ast.AST) -> Compiled:
    """The expression compiled for `evaluator`'s functions, kept by the identity of its tree, which is never
    changed once built (mutations build new trees)."""
    return _compile(evaluator.functions, node)


def _compile(functions: Mapping[str, Callable[..., Any]], node: ast.AST) -> Compiled:
    """Anything outside the allowed arithmetic compiles to a function that raises UnsafeExpression when the
    evaluation reaches it, as walking the tree would."""
    kind = type(node)
    if kind is ast.Name:
        name = node.id

        def read(names: Mapping[str, Any]) -> Any:
            try:
                return names[name]
            except KeyError:
                raise UnsafeExpression(f"unknown name {name!r}") from None
        return read
    if kind is ast.Constant:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return _failing(f"unsupported constant {value!r}")
        return lambda names: value
    if kind is ast.BinOp:
        return _binary(functions, node)
    if kind is ast.UnaryOp:
        unary = _UNARY.get(type(node.op))
        if unary is None:
            return _failing(f"unsupported operator in {ast.unparse(node)!r}")
        operand = _compile(functions, node.operand)
        return lambda names: unary(operand(names))
    if kind is ast.Call:
        return _call(functions, node)
    if kind is ast.Attribute:
        return _attribute(functions, node)
    if kind is ast.Expression:
        return _compile(functions, node.body)
    return _failing(f"unsupported expression {ast.unparse(node)!r}")


def _failing(message: str) -> Compiled:
    def fail(names: Mapping[str, Any]) -> Any:
        raise UnsafeExpression(message)
    return fail


def _binary(functions: Mapping[str, Callable[..., Any]], node: ast.BinOp) -> Compiled:
    operation = _BINARY.get(type(node.op))
    if operation is None:
        return _failing(f"unsupported operator in {ast.unparse(node)!r}")
    left, right = _compile(functions, node.left), _compile(functions, node.right)
    power = operation is operator.pow

    def binary(names: Mapping[str, Any]) -> Any:
        a, b = left(names), right(names)
        if power:
            _check_exponent(b)
        try:
            return operation(a, b)
        except (ZeroDivisionError, OverflowError, TypeError, ValueError) as exc:
            raise UnsafeExpression(f"cannot evaluate {ast.unparse(node)}: {exc}") from None
    return binary


def _check_exponent(exponent: Any) -> None:
    if not isinstance(exponent, (int, float, Fraction)) or abs(exponent) > MAX_EXPONENT:
        raise UnsafeExpression(f"exponent {exponent!r} too large")


def _call(functions: Mapping[str, Callable[..., Any]], node: ast.Call) -> Compiled:
    name = call_name(node.func)
    if node.keywords or name not in functions:
        return _failing(f"unsupported call {ast.unparse(node)!r}")
    function, arguments = functions[name], [_compile(functions, argument) for argument in node.args]

    def call(names: Mapping[str, Any]) -> Any:
        values = [argument(names) for argument in arguments]
        try:
            return function(*values)
        except (ZeroDivisionError, OverflowError, TypeError, ValueError) as exc:
            raise UnsafeExpression(f"cannot evaluate {ast.unparse(node)}: {exc}") from None
    return call


def _attribute(functions: Mapping[str, Callable[..., Any]], node: ast.Attribute) -> Compiled:
    attribute = node.attr
    if attribute not in ATTRIBUTES:
        return _failing(f"unsupported attribute .{attribute}")
    value_of = _compile(functions, node.value)

    def read(names: Mapping[str, Any]) -> Any:
        value = value_of(names)
        if isinstance(value, bool) or not isinstance(value, (int, Fraction)):
            raise UnsafeExpression(f".{attribute} of a {type(value).__name__}")
        return getattr(value, attribute)
    return read


def parse_expression(text: str) -> ast.Expression:
    try:
        return ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError) as exc:
        raise UnsafeExpression(f"not an expression: {text!r} ({exc.__class__.__name__})") from None


def evaluate(expression: str | ast.AST, names: Mapping[str, Any] | None = None) -> Any:
    """The value of an arithmetic expression over `names`, computed with Python's own types."""
    node = parse_expression(expression) if isinstance(expression, str) else expression
    return Evaluator(names).evaluate(node)


_NUMBER_TYPES = frozenset({int, float, Fraction})


def is_number(value: Any) -> bool:
    # The exact types first: a value of another type would be tested against Fraction, an abstract base class's
    # subclass (slow), and this is asked of every value of every mutant.
    return type(value) in _NUMBER_TYPES or (isinstance(value, (int, float, Fraction)) and not isinstance(value, bool))


def is_int_like(value: Any) -> bool:
    # Fraction last: it is an abstract base class's subclass, slow to test other values against.
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, int):
        return not isinstance(value, bool)
    return isinstance(value, Fraction) and value.denominator == 1


def sign(value: Any) -> int:
    return (value > 0) - (value < 0)
