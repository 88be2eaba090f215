"""Bugs as people write them, beyond SWE-smith's modifiers: a bound off by one, two arguments in the wrong order,
a case of an if/elif chain forgotten. Registered before the others, so a change one of them shares with a broader
modifier (a constant bound shifted is also a numeric perturbation) is named for the mistake it is."""
from __future__ import annotations

import ast
from typing import Iterable

from flawforge.debugging.modifiers.base import (SYMBOLS, Bug, BugModifier, Site, TextEdit, precedence, render,
                                                replace_node, shifted_literal, starts_with)

# Calls whose argument order is a type, a name or a message, which nobody swaps by mistake.
ORDER_IS_THE_MEANING = frozenset({"isinstance", "issubclass", "getattr", "setattr", "hasattr", "delattr", "super",
                                  "print", "format", "open", "type"})


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _one_off(site: Site, bound: ast.expr) -> Iterable[tuple[ast.expr, str, int, str]]:
    """`bound` one more and one less, as a person would write it (the node replaced, its new text, how tightly
    that binds, what the bound became):
    `n - 1` loses its `- 1`, `n + 2` becomes `n + 3` or `n + 1`, a literal is shifted in its own notation (a
    negative index stays negative), anything else gets `+ 1` or `- 1`."""
    literal = bound.operand if isinstance(bound, ast.UnaryOp) and isinstance(bound.op, ast.USub) else bound
    offset = bound.right if isinstance(bound, ast.BinOp) and isinstance(bound.op, (ast.Add, ast.Sub)) else None
    if isinstance(literal, ast.Constant) and type(literal.value) is int:
        for delta in (1, -1):
            new = shifted_literal(site.segment(literal), literal.value, delta)
            if new is not None and literal.value + delta >= (1 if literal is not bound else 0):
                yield literal, new, 13, ("-" if literal is not bound else "") + new
    elif isinstance(offset, ast.Constant) and type(offset.value) is int and offset.value >= 1:
        if offset.value == 1:
            yield bound, site.segment(bound.left), precedence(bound.left), site.segment(bound.left)
            return
        for delta in (1, -1):
            new = shifted_literal(site.segment(offset), offset.value, delta)
            if new is not None:
                yield offset, new, 13, f"{site.segment(bound.left)} {SYMBOLS[type(bound.op)]} {new}"
    elif not isinstance(bound, ast.Constant):
        for op in (ast.Add, ast.Sub):
            new = ast.BinOp(left=bound, op=op(), right=ast.Constant(1))
            yield bound, render(site, new), precedence(new), f"{site.segment(bound)} {SYMBOLS[op]} 1"


def _bounds(site: Site) -> Iterable[tuple[ast.expr, str]]:
    """Every bound of the site: range()'s start and stop, a slice's ends, an integer index; with what it is."""
    for node in site.nodes:
        if isinstance(node, ast.Call) and _callee(node) == "range" and not node.keywords \
                and 1 <= len(node.args) <= 3 and not any(isinstance(a, ast.Starred) for a in node.args):
            stop = node.args[0] if len(node.args) == 1 else node.args[1]
            yield stop, "the end of a range()"
            if len(node.args) > 1:
                yield node.args[0], "the start of a range()"
        elif isinstance(node, ast.Slice) and (node.step is None):
            for end, what in ((node.lower, "the start of a slice"), (node.upper, "the end of a slice")):
                if end is not None:
                    yield end, what
        elif isinstance(node, ast.Subscript):
            index = node.slice
            number = index.operand if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub) else index
            offset = index.right if isinstance(index, ast.BinOp) and isinstance(index.op, (ast.Add, ast.Sub)) else None
            if any(isinstance(n, ast.Constant) and type(n.value) is int for n in (number, offset)):
                yield index, "an index"


class BoundOffByOne(BugModifier):
    name = "off_by_one"
    explanation = "A bound is off by one: a range, a slice or an index stops one early or one late."

    def modify(self, site: Site) -> Iterable[Bug]:
        for bound, what in _bounds(site):
            for replaced, text, binds, became in _one_off(site, bound):
                yield Bug((replace_node(site, replaced, text, binds),),
                          f"in {site.qualname}, {what} on line {bound.lineno} became {became}")


VALUES = (ast.Name, ast.Attribute, ast.Subscript, ast.Constant)


class SwapArguments(BugModifier):
    name = "swap_args"
    explanation = "Two arguments of a call are passed in the wrong order."

    def modify(self, site: Site) -> Iterable[Bug]:
        for node in site.nodes:
            if not isinstance(node, ast.Call) or _callee(node) in ORDER_IS_THE_MEANING:
                continue
            for first, second in zip(node.args, node.args[1:]):
                if not all(isinstance(a, VALUES) for a in (first, second)) \
                        or all(isinstance(a, ast.Constant) for a in (first, second)) \
                        or site.segment(first) == site.segment(second) or first.end_lineno != second.lineno:
                    continue
                edits = (TextEdit(first.lineno, first.col_offset, first.end_lineno, first.end_col_offset,
                                  site.segment(second)),
                         TextEdit(second.lineno, second.col_offset, second.end_lineno, second.end_col_offset,
                                  site.segment(first)))
                yield Bug(edits, f"in {site.qualname}, {_callee(node) or 'a call'}() on line {node.lineno} gets "
                                 f"{site.segment(first)} and {site.segment(second)} the other way round")


class RemoveCase(BugModifier):
    name = "remove_case"
    explanation = "A case of an if/elif chain is missing: the values it handled fall through to the next."

    def modify(self, site: Site) -> Iterable[Bug]:
        for node in site.nodes:
            if not (isinstance(node, ast.If) and len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)):
                continue
            case = node.orelse[0]
            if not starts_with(site, case, "elif") or case.body[0].lineno == case.lineno:
                continue
            end = case.body[-1].end_lineno
            after = site.lines[end - 1].encode("utf-8")[case.body[-1].end_col_offset:].strip()
            if after and not after.startswith(b"#"):
                continue
            yield Bug((TextEdit(case.lineno, 0, end, len(site.lines[end - 1].encode("utf-8")), ""),),
                      f"in {site.qualname}, the case 'elif {site.segment(case.test)}' is missing")
