"""The seed's own injections: mutmut's operator-inversion table and numeric perturbation."""
from __future__ import annotations

import ast
from typing import Iterable

from flawforge.debugging.modifiers.base import SYMBOLS, Bug, BugModifier, Site, TextEdit, replace_node
from flawforge.debugging.modifiers.procedural import _number, formats_text, shifted_constants, with_operator

# What each operator becomes (mutmut's table; one entry per operator).
INVERTED = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
            ast.Mod: ast.Div, ast.Pow: ast.Mult, ast.LShift: ast.RShift, ast.RShift: ast.LShift,
            ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd, ast.BitXor: ast.BitAnd,
            ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In,
            ast.And: ast.Or, ast.Or: ast.And}


class InvertOperator(BugModifier):
    name = "op_invert"
    explanation = "An operator is inverted (mutmut's table: + and -, * and /, < and <=, == and !=, and and or, ...)."

    def modify(self, site: Site) -> Iterable[Bug]:
        for node in site.nodes:
            if (isinstance(node, ast.BinOp) and not formats_text(node)) or (isinstance(node, ast.Compare)
                                                                             and len(node.ops) == 1):
                old = type(node.op if isinstance(node, ast.BinOp) else node.ops[0])
                new = INVERTED.get(old)
                if new is not None:
                    yield Bug((replace_node(site, node, with_operator(node, new)),),
                              f"in {site.qualname}, '{SYMBOLS[old]}' became '{SYMBOLS[new]}' on line {node.lineno}")
            elif isinstance(node, ast.BoolOp):
                old, new = type(node.op), INVERTED[type(node.op)]
                yield Bug((replace_node(site, node, ast.BoolOp(op=new(), values=node.values)),),
                          f"in {site.qualname}, '{SYMBOLS[old]}' became '{SYMBOLS[new]}' on line {node.lineno}")
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                yield Bug((replace_node(site, node, node.operand),),
                          f"in {site.qualname}, a 'not' is missing on line {node.lineno}")
            elif isinstance(node, ast.AugAssign) and type(node.op) in INVERTED and node.lineno == node.end_lineno:
                new = INVERTED[type(node.op)]
                line = site.lines[node.lineno - 1].encode("utf-8")
                operator = SYMBOLS[type(node.op)] + "="
                start = line.find(operator.encode(), node.target.end_col_offset)
                if start >= 0:
                    yield Bug((TextEdit(node.lineno, start, node.lineno, start + len(operator),
                                        SYMBOLS[new] + "="),),
                              f"in {site.qualname}, '{operator}' became '{SYMBOLS[new]}=' on line {node.lineno}")


class NumericPerturbation(BugModifier):
    name = "numeric_perturb"
    explanation = "A number literal is off by one."

    def modify(self, site: Site) -> Iterable[Bug]:
        negated = {id(n.operand) for n in site.nodes if isinstance(n, ast.UnaryOp)
                   and isinstance(n.op, ast.USub)}
        for node in site.nodes:
            if _number(node) and id(node) not in negated:
                for edit, new in shifted_constants(site, node):
                    yield Bug((edit,), f"in {site.qualname}, {site.segment(node)} became {new} on line {node.lineno}")
