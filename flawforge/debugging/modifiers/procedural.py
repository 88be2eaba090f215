"""The procedural modifiers SWE-smith uses: classes, control flow, removals, operators.

Each works on the text of one site: a class (bases, methods), or a function's statements
and expressions. Where a removal would leave a block empty, `pass` takes its place.
"""
from __future__ import annotations

import ast
from dataclasses import replace
from typing import Iterable

from flawforge.debugging.modifiers.base import (SYMBOLS, Bug, BugModifier, Site, TextEdit, block_text, replace_node,
                                                replace_statements, shifted_literal, starts_with, statement_lines)

METHODS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _is_docstring(statement: ast.stmt) -> bool:
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str))


def _remove_statement(site: Site, body: list[ast.stmt], index: int) -> TextEdit:
    """Deletes body[index]'s lines; a block left without statements (docstrings aside) gets `pass`."""
    statement = body[index]
    rest = [s for i, s in enumerate(body) if i != index and not _is_docstring(s)]
    text = "" if rest else site.indent_of(statement) + "pass\n"
    return replace_statements(site, statement, statement, text)


def _own_line(site: Site, statement: ast.stmt) -> bool:
    """The statement starts its line and nothing but a comment follows it (no `a = 1; b = 2`)."""
    start, _ = statement_lines(site, statement, statement)
    line = site.lines[start - 1]
    indent = line[:len(line) - len(line.lstrip())]
    after = site.lines[statement.end_lineno - 1].encode("utf-8")[statement.end_col_offset:].strip()
    return len(indent.encode("utf-8")) == statement.col_offset and (not after or after.startswith(b"#"))


def _removable(site: Site, kinds: tuple[type, ...]) -> Iterable[tuple[list[ast.stmt], int, ast.stmt]]:
    for _, _, body in site.statement_lists:
        for index, statement in enumerate(body):
            if isinstance(statement, kinds) and _own_line(site, statement) and not starts_with(site, statement, "elif"):
                yield body, index, statement


class ClassRemoveBase(BugModifier):
    name = "class_rm_base"
    explanation = "A base class is missing from the class definition, so inherited behaviour is lost."
    targets = "class"
    min_complexity = 10

    def modify(self, site: Site) -> Iterable[Bug]:
        # `object` is every class's base anyway: leaving it out changes nothing (and reads as a machine's edit).
        bases = site.node.bases
        if not bases or site.node.keywords:
            return
        for dropped in range(len(bases)):
            if isinstance(bases[dropped], ast.Name) and bases[dropped].id == "object":
                continue
            kept = ", ".join(site.segment(base) for i, base in enumerate(bases) if i != dropped)
            edit = (TextEdit(bases[0].lineno, bases[0].col_offset, bases[-1].end_lineno, bases[-1].end_col_offset,
                             kept) if kept else _without_brackets(site, bases[0], bases[-1]))
            yield Bug((edit,), f"{site.qualname} no longer derives from {site.segment(bases[dropped])}")


def _without_brackets(site: Site, first: ast.expr, last: ast.expr) -> TextEdit:
    """Removes a class's whole base list, brackets included (`class A(B):` becomes `class A:`)."""
    opening = site.lines[first.lineno - 1].encode("utf-8").rindex(b"(", 0, first.col_offset)
    closing = site.lines[last.end_lineno - 1].encode("utf-8").index(b")", last.end_col_offset) + 1
    return TextEdit(first.lineno, opening, last.end_lineno, closing, "")


class ClassRemoveFunctions(BugModifier):
    name = "class_rm_funcs"
    explanation = "A method is missing from the class."
    targets = "class"
    min_complexity = 10

    def modify(self, site: Site) -> Iterable[Bug]:
        body = site.node.body
        for index, method in enumerate(body):
            if isinstance(method, METHODS) and _own_line(site, method):
                yield Bug((_without_gap(site, _remove_statement(site, body, index)),),
                          f"method {site.qualname}.{method.name} removed", f"{site.qualname}.{method.name}")


def _without_gap(site: Site, removal: TextEdit) -> TextEdit:
    """A removed definition's blank lines before it go with it, so the methods around keep one blank line between
    them rather than two: a gap no one leaves, and one that points at where something was taken out."""
    if removal.text:
        return removal
    start = removal.start_line
    while start > 1 and not site.lines[start - 2].strip():
        start -= 1
    return replace(removal, start_line=start)


class ClassShuffleMethods(BugModifier):
    name = "class_shuffle_methods"
    explanation = "Two definitions of one method name change places, so the one that should be overridden wins "\
                  "(an overload stub after its implementation, an earlier version after the later one)."
    targets = "class"
    min_complexity = 10

    def modify(self, site: Site) -> Iterable[Bug]:
        # Where two methods have different names their order changes nothing a test can see, so only a swap
        # that changes which definition of a name is the class's last one applies; a definition decorated with
        # the earlier one (`@x.setter`) would fail when the class is created, so it is left out.
        body = site.node.body
        methods = [m for m in body if isinstance(m, METHODS) and _own_line(site, m)]
        last = {m.name: m for m in body if isinstance(m, METHODS)}
        for first, second in zip(methods, methods[1:]):
            if body.index(second) != body.index(first) + 1 or first.name != second.name or last[second.name] is not second:
                continue
            if any(isinstance(d, ast.Attribute) and isinstance(d.value, ast.Name) and d.value.id == first.name
                   for d in second.decorator_list):
                continue
            a_start, a_end = statement_lines(site, first, first)
            b_start, b_end = statement_lines(site, second, second)
            text_a = "".join(site.lines[a_start - 1:a_end])
            between = "".join(site.lines[a_end:b_start - 1])
            text_b = "".join(site.lines[b_start - 1:b_end])
            if not text_b.endswith("\n"):
                continue
            edit = TextEdit(a_start, 0, b_end, len(site.lines[b_end - 1].encode("utf-8")), text_b + between + text_a)
            yield Bug((edit,), f"the last two definitions of {site.qualname}.{second.name} swapped: the earlier "
                               f"one (line {first.lineno}) now wins")


class ControlInvertIf(BugModifier):
    name = "ctrl_invert_if"
    explanation = "The branches of an if/else are exchanged: each runs when the other should."
    min_complexity = 5

    def modify(self, site: Site) -> Iterable[Bug]:
        for node in site.nodes:
            if not (isinstance(node, ast.If) and node.orelse and _own_line(site, node)) \
                    or starts_with(site, node, "elif") or node.body[0].lineno == node.lineno:
                continue
            if isinstance(node.orelse[0], ast.If) and starts_with(site, node.orelse[0], "elif"):
                continue
            indent, inner = site.indent_of(node), site.indent_of(node.body[0])
            text = (f"{indent}if {site.segment(node.test)}:\n{block_text(site, node.orelse, inner)}"
                    f"{indent}else:\n{block_text(site, node.body, inner)}")
            yield Bug((replace_statements(site, node, node, text),),
                      f"in {site.qualname}, the branches of 'if {site.segment(node.test)}' are exchanged")


class ControlShuffle(BugModifier):
    name = "ctrl_shuffle"
    explanation = "Two consecutive statements run in the wrong order."
    max_complexity = 10

    def modify(self, site: Site) -> Iterable[Bug]:
        for _, _, body in site.statement_lists:
            for first, second in zip(body, body[1:]):
                if _is_docstring(first) or not (_own_line(site, first) and _own_line(site, second)) \
                        or isinstance(second, (ast.Return, ast.Raise)) or site.indent_of(first) != site.indent_of(second):
                    continue
                a_start, a_end = statement_lines(site, first, first)
                b_start, b_end = statement_lines(site, second, second)
                if b_start != a_end + 1:
                    continue
                text = "".join(site.lines[b_start - 1:b_end]) + "".join(site.lines[a_start - 1:a_end])
                if not site.lines[b_end - 1].endswith("\n"):
                    continue
                edit = TextEdit(a_start, 0, b_end, len(site.lines[b_end - 1].encode("utf-8")), text)
                yield Bug((edit,), f"in {site.qualname}, lines {a_start} and {b_start} run in the wrong order")


class RemoveAssign(BugModifier):
    name = "remove_assign"
    explanation = "An assignment is missing."

    def modify(self, site: Site) -> Iterable[Bug]:
        for body, index, statement in _removable(site, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            yield Bug((_remove_statement(site, body, index),),
                      f"in {site.qualname}, the assignment on line {statement.lineno} is missing")


class RemoveCondition(BugModifier):
    name = "remove_cond"
    explanation = "A conditional block is missing, with its else branch."

    def modify(self, site: Site) -> Iterable[Bug]:
        for body, index, statement in _removable(site, (ast.If,)):
            yield Bug((_remove_statement(site, body, index),),
                      f"in {site.qualname}, the 'if {site.segment(statement.test)}' block is missing")


class RemoveLoop(BugModifier):
    name = "remove_loop"
    explanation = "A loop is missing."

    def modify(self, site: Site) -> Iterable[Bug]:
        for body, index, statement in _removable(site, (ast.For, ast.AsyncFor, ast.While)):
            yield Bug((_remove_statement(site, body, index),),
                      f"in {site.qualname}, the loop on line {statement.lineno} is missing")


class RemoveWrapper(BugModifier):
    name = "remove_wrapper"
    explanation = "A try or with block is gone but its body stays: errors are no longer handled, or a context "\
                  "is no longer entered."

    def modify(self, site: Site) -> Iterable[Bug]:
        for _, _, statement in _removable(site, (ast.Try, ast.With, ast.AsyncWith)):
            if statement.body[0].lineno == statement.lineno:
                continue
            text = block_text(site, statement.body, site.indent_of(statement))
            kind = "try" if isinstance(statement, ast.Try) else "with"
            yield Bug((replace_statements(site, statement, statement, text),),
                      f"in {site.qualname}, the {kind} block on line {statement.lineno} is unwrapped")


class OperatorBreakChains(BugModifier):
    name = "op_break_chains"
    explanation = "A term of a chained operation is left out."

    def modify(self, site: Site) -> Iterable[Bug]:
        for node in site.nodes:
            if isinstance(node, ast.BinOp) and isinstance(node.left, ast.BinOp):
                shorter = ast.BinOp(left=node.left.left, op=node.op, right=node.right)
                yield Bug((replace_node(site, node, shorter),),
                          f"in {site.qualname}, '{site.segment(node.left.right)}' is left out of line {node.lineno}")
                yield Bug((replace_node(site, node, node.left),),
                          f"in {site.qualname}, '{site.segment(node.right)}' is left out of line {node.lineno}")
            elif isinstance(node, ast.BoolOp):
                for dropped, value in enumerate(node.values):
                    kept = [v for i, v in enumerate(node.values) if i != dropped]
                    new = kept[0] if len(kept) == 1 else ast.BoolOp(op=node.op, values=kept)
                    yield Bug((replace_node(site, node, new),),
                              f"in {site.qualname}, the condition '{site.segment(value)}' is left out of line "
                              f"{node.lineno}")
            elif isinstance(node, ast.Compare) and len(node.ops) > 1:
                new = ast.Compare(left=node.left, ops=node.ops[:1], comparators=node.comparators[:1])
                yield Bug((replace_node(site, node, new),),
                          f"in {site.qualname}, the chained comparison on line {node.lineno} stops after its first "
                          f"test")


def _number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


# Operations a shifted operand turns into doing nothing (`x + 0`, `x * 1`): no person writes those.
IDENTITY = {ast.Add: (("left", "right"), 0), ast.Sub: (("right",), 0), ast.Mult: (("left", "right"), 1),
            ast.Div: (("right",), 1), ast.FloorDiv: (("right",), 1), ast.Pow: (("right",), 1)}


def makes_identity(site: Site, operand: ast.AST, value: int | float) -> bool:
    """Whether `operand` becoming `value` leaves its operation doing nothing (`x + 0`), or writes `x - -1`."""
    parent, field, _ = site.parents.get(id(operand), (None, "", 0))
    if not isinstance(parent, ast.BinOp):
        return False
    sides, neutral = IDENTITY.get(type(parent.op), ((), None))
    return (field in sides and value == neutral) or (isinstance(parent.op, (ast.Add, ast.Sub)) and field == "right"
                                                    and value < 0)


def shifted_constants(site: Site, node: ast.Constant) -> Iterable[tuple[TextEdit, str]]:
    """The number literal `node` one up and one down, as its source writes numbers (the edit, the new text)."""
    for delta in (1, -1):
        new = shifted_literal(site.segment(node), node.value, delta)
        if new is not None and not makes_identity(site, node, node.value + delta):
            yield replace_node(site, node, new, 11 if new.startswith("-") else 13), new


class OperatorChangeConstant(BugModifier):
    name = "op_change_const"
    explanation = "A constant in a calculation or comparison is off by one."

    def modify(self, site: Site) -> Iterable[Bug]:
        for node in site.nodes:
            operands = ([node.left, node.right] if isinstance(node, ast.BinOp)
                        else [node.left, *node.comparators] if isinstance(node, ast.Compare) else [])
            for operand in operands:
                if _number(operand):
                    for edit, new in shifted_constants(site, operand):
                        yield Bug((edit,), f"in {site.qualname}, the constant {site.segment(operand)} on line "
                                           f"{operand.lineno} became {new}")


# The operators a person writes for one another: a sign, a division for a multiplication, a bound's strictness or
# direction, a negation; not any operator of the same family (`+` for `**`).
CONFUSED_WITH = {ast.Add: (ast.Sub,), ast.Sub: (ast.Add,), ast.Mult: (ast.Div,), ast.Div: (ast.Mult, ast.FloorDiv),
                 ast.FloorDiv: (ast.Div, ast.Mod), ast.Mod: (ast.FloorDiv,), ast.Pow: (ast.Mult,),
                 ast.BitAnd: (ast.BitOr,), ast.BitOr: (ast.BitAnd, ast.BitXor), ast.BitXor: (ast.BitOr,),
                 ast.LShift: (ast.RShift,), ast.RShift: (ast.LShift,),
                 ast.Lt: (ast.LtE, ast.Gt), ast.LtE: (ast.Lt, ast.GtE), ast.Gt: (ast.GtE, ast.Lt),
                 ast.GtE: (ast.Gt, ast.LtE), ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,), ast.Is: (ast.IsNot,),
                 ast.IsNot: (ast.Is,), ast.In: (ast.NotIn,), ast.NotIn: (ast.In,)}


def formats_text(node: ast.AST) -> bool:
    """`'...' % args`, `'-' * n` or `'a' + b`: an operator on text, which a person does not trade for another."""
    return isinstance(node, ast.BinOp) and any(isinstance(side, (ast.Constant, ast.JoinedStr))
                                               and isinstance(getattr(side, "value", ""), (str, bytes))
                                               for side in (node.left, node.right))


def with_operator(node: ast.BinOp | ast.Compare, operator: type) -> ast.AST:
    if isinstance(node, ast.BinOp):
        return ast.BinOp(left=node.left, op=operator(), right=node.right)
    return ast.Compare(left=node.left, ops=[operator()], comparators=node.comparators)


class OperatorChange(BugModifier):
    name = "op_change"
    explanation = "An operator is replaced by one a person writes for it by mistake."

    def modify(self, site: Site) -> Iterable[Bug]:
        for node in site.nodes:
            if not (isinstance(node, ast.BinOp) or (isinstance(node, ast.Compare) and len(node.ops) == 1)) \
                    or formats_text(node):
                continue
            old = type(node.op if isinstance(node, ast.BinOp) else node.ops[0])
            for new in CONFUSED_WITH.get(old, ()):
                yield Bug((replace_node(site, node, with_operator(node, new)),),
                          f"in {site.qualname}, '{SYMBOLS[old]}' became '{SYMBOLS[new]}' on line {node.lineno}")


class OperatorSwap(BugModifier):
    name = "op_swap"
    explanation = "The operands of an operation or an ordering comparison are swapped."

    def modify(self, site: Site) -> Iterable[Bug]:
        # Only swaps that read as a slip: operands of a non-commutative operation on values, the sides of a bound
        # (`a < b`); not the text and arguments of a `%` format, nor `x in y` as `y in x`.
        for node in site.nodes:
            if isinstance(node, ast.BinOp) and not isinstance(node.op, (ast.Mult, ast.BitAnd, ast.BitOr,
                                                                           ast.BitXor)) and not formats_text(node):
                swapped = ast.BinOp(left=node.right, op=node.op, right=node.left)
            elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ORDERINGS):
                swapped = ast.Compare(left=node.comparators[0], ops=node.ops, comparators=[node.left])
            else:
                continue
            yield Bug((replace_node(site, node, swapped),),
                      f"in {site.qualname}, the operands on line {node.lineno} are swapped")


ORDERINGS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
