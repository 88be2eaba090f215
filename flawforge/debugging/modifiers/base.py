"""What a bug modifier is, the sites it works on, and the registry that lists them.

A modifier is one kind of bug. Each is a small class with a name, a text that explains it,
the conditions under which it applies (the kind of site and its complexity bounds) and one
`modify` method that turns a site into the text edits of every bug it can make there. The
edits are applied to the original source, so the change stays where the bug is (comments
and formatting elsewhere are kept) and its diff is the fix read backwards. Defining a
subclass with a `name` registers it.
"""
from __future__ import annotations

import ast
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from itertools import accumulate
from typing import ClassVar, Iterable

from flawforge.debugging.syntax import parse


@dataclass(frozen=True)
class TextEdit:
    """Replace the source between (start_line, start_col) and (end_line, end_col) (1-based lines, 0-based
    columns, end exclusive, as in the ast module) with `text`."""

    start_line: int
    start_col: int
    end_line: int
    end_col: int
    text: str


@dataclass(frozen=True)
class Bug:
    """One way a modifier breaks a site: its edits and what they do, in words."""

    edits: tuple[TextEdit, ...]
    description: str
    qualname: str | None = None  # where the bug is when narrower than the site (a class's removed method)


@dataclass
class Site:
    """A function or a class of a module, with what the modifiers need to know about it."""

    path: str                       # the module's path in its project
    qualname: str                   # e.g. Cache.__getitem__, or parse for a function of the module
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    lines: list[str] = field(repr=False)  # the module's source lines, with their endings
    complexity: int = 0

    @property
    def is_class(self) -> bool:
        return isinstance(self.node, ast.ClassDef)

    @cached_property
    def nodes(self) -> list[ast.AST]:
        """Every node inside the site, in ast.walk's order: walked once, however many modifiers look."""
        return list(ast.walk(self.node))

    @cached_property
    def statement_lists(self) -> list[tuple[ast.AST, str, list[ast.stmt]]]:
        """statements_of(self.node), computed once."""
        return list(statements_of(self.node))

    @cached_property
    def parents(self) -> dict[int, tuple[ast.AST, str, int]]:
        """id(node) -> (its parent, the field it is in, its index there) for every node inside the site."""
        found = {}
        for parent in self.nodes:
            for name, value in ast.iter_fields(parent):
                for index, child in enumerate(value if isinstance(value, list) else [value]):
                    if isinstance(child, ast.AST):
                        found[id(child)] = (parent, name, index)
        return found

    def tightness_needed(self, node: ast.AST) -> int:
        """How tightly an expression put in `node`'s place must bind to need no brackets there."""
        place = self.parents.get(id(node))
        return tightness(*place) if place else 1

    def in_brackets(self, node: ast.AST) -> bool:
        """The node's text is directly inside a pair of round brackets (its own, `(a + b) * c`, or a call's with it
        as the only argument): whatever replaces it needs none of its own."""
        return (self._next_character(node.lineno, node.col_offset, backwards=True) == "("
                and self._next_character(node.end_lineno, node.end_col_offset) == ")")

    def _next_character(self, line: int, col: int, backwards: bool = False) -> str:
        """The first character other than white space (line ends included) before or after a position."""
        text = self.lines[line - 1].encode("utf-8")
        rest = (text[:col] if backwards else text[col:]).decode("utf-8", "replace").strip()
        step = -1 if backwards else 1
        while not rest and 1 <= line + step <= len(self.lines):
            line += step
            rest = self.lines[line - 1].strip()
        return rest[-1:] if backwards else rest[:1]

    def segment(self, node: ast.AST) -> str:
        """The exact source text of a node."""
        return "".join(_slice(self.lines, node.lineno, node.col_offset, node.end_lineno, node.end_col_offset))

    def indent_of(self, node: ast.stmt) -> str:
        line = self.lines[node.lineno - 1]
        return line[:len(line) - len(line.lstrip())]


def _slice(lines: list[str], start_line: int, start_col: int, end_line: int, end_col: int) -> list[str]:
    if start_line == end_line:
        return [_cols(lines[start_line - 1], start_col, end_col)]
    return ([_cols(lines[start_line - 1], start_col, None)] + lines[start_line:end_line - 1]
            + [_cols(lines[end_line - 1], 0, end_col)])


def _cols(line: str, start: int, end: int | None) -> str:
    """ast columns are UTF-8 byte offsets."""
    data = line.encode("utf-8")
    return data[start:end].decode("utf-8")


def complexity(node: ast.AST) -> int:
    """1 + branches + boolean operators + exception handlers + comparisons (nested functions included);
    a class's is the sum over its methods."""
    if isinstance(node, ast.ClassDef):
        return sum(complexity(child) for child in node.body if isinstance(child, (ast.FunctionDef,
                                                                                  ast.AsyncFunctionDef)))
    score = 1
    for child in ast.walk(node):
        if isinstance(child, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.IfExp, ast.comprehension)):
            score += 1
        elif isinstance(child, ast.BoolOp):
            score += len(child.values) - 1
        elif isinstance(child, ast.ExceptHandler):
            score += 1
        elif isinstance(child, ast.Compare):
            score += len(child.ops)
    return score


def sites_of(path: str, source: str) -> list[Site]:
    """Every function, method and class of a module, in source order (nested functions are part of theirs)."""
    lines = source.splitlines(keepends=True)
    return [Site(path, qualname, node, lines, complexity(node)) for qualname, node in definitions(parse(source))]


def definitions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]]:
    """(qualname, node) of every function, method and class of a module, in source order, those under `if PY3:`
    or `try: ... except ImportError` included (functions nested in functions are part of theirs)."""
    found = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((prefix + node.name, node))
            elif isinstance(node, ast.ClassDef):
                found.append((prefix + node.name, node))
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.If, ast.Try)):
                for part in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])):
                    visit(part, prefix)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body, prefix)

    visit(tree.body, "")
    return found


def apply_edits(source: str, edits: Iterable[TextEdit]) -> str:
    """The source with non-overlapping edits applied."""
    lines, starts = _lines_of(source)
    pieces, end = [], len(source)
    for edit in sorted(edits, key=lambda e: (e.start_line, e.start_col), reverse=True):
        first, last = lines[edit.start_line - 1], lines[edit.end_line - 1]
        begin = starts[edit.start_line - 1] + len(_cols(first, 0, edit.start_col))
        stop = starts[edit.end_line] - len(_cols(last, edit.end_col, None))
        pieces += [source[stop:end], edit.text]
        end = begin
    pieces.append(source[:end])
    return "".join(reversed(pieces))


def offset_of(source: str, line: int, col: int) -> int:
    """The character offset in `source` of an ast position (1-based line, UTF-8 byte column)."""
    lines, starts = _lines_of(source)
    return starts[line - 1] + len(_cols(lines[line - 1], 0, col))


@lru_cache(maxsize=4)
def _lines_of(source: str) -> tuple[list[str], list[int]]:
    """A module's lines and where each starts: every candidate of the module is cut from them (the module's
    text is hashed once, so the cache costs no pass over it)."""
    lines = source.splitlines(keepends=True)
    return lines, [0, *accumulate(len(line) for line in lines)]


def replace_node(site: Site, node: ast.AST, new: ast.AST | str, text_precedence: int = 13) -> TextEdit:
    """An edit replacing an expression (or a one-line statement) with `new`: a node, written from the site's own
    text (render), or text that binds as tightly as `text_precedence`. It is parenthesised only where its place
    needs it (a person adds no brackets a bracket-free expression does not need)."""
    text, binds = (new, text_precedence) if isinstance(new, str) else (render(site, new), precedence(new))
    if isinstance(node, ast.expr) and binds < site.tightness_needed(node) and not site.in_brackets(node):
        text = f"({text})"
    return TextEdit(node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, text)


BINARY_PRECEDENCE = {ast.BitOr: 5, ast.BitXor: 6, ast.BitAnd: 7, ast.LShift: 8, ast.RShift: 8, ast.Add: 9,
                     ast.Sub: 9, ast.Mult: 10, ast.MatMult: 10, ast.Div: 10, ast.FloorDiv: 10, ast.Mod: 10,
                     ast.Pow: 12}
SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.MatMult: "@", ast.Div: "/", ast.FloorDiv: "//",
           ast.Mod: "%", ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<",
           ast.RShift: ">>", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
           ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in", ast.And: "and", ast.Or: "or",
           ast.Not: "not ", ast.USub: "-", ast.UAdd: "+", ast.Invert: "~"}


def precedence(node: ast.AST) -> int:
    """How tightly an expression binds (Python's operator precedence, loosest 0)."""
    if isinstance(node, (ast.IfExp, ast.Lambda, ast.NamedExpr)):
        return 0
    if isinstance(node, ast.BoolOp):
        return 1 if isinstance(node.op, ast.Or) else 2
    if isinstance(node, ast.UnaryOp):
        return 3 if isinstance(node.op, ast.Not) else 11
    if isinstance(node, ast.Compare):
        return 4
    if isinstance(node, ast.BinOp):
        return BINARY_PRECEDENCE[type(node.op)]
    return 13


def tightness(parent: ast.AST, field: str, index: int) -> int:
    """How tightly an expression must bind to stand unbracketed as `parent`'s `field` (item `index` of a list)."""
    if isinstance(parent, ast.BinOp):
        own = precedence(parent)
        if isinstance(parent.op, ast.Pow):  # right-associative, and tighter than a unary minus on its left
            return own + 1 if field == "left" else 11
        return own if field == "left" else own + 1
    if isinstance(parent, ast.Compare):
        return 5
    if isinstance(parent, ast.BoolOp):
        return precedence(parent) + 1
    if isinstance(parent, ast.UnaryOp):
        return precedence(parent)
    if isinstance(parent, (ast.Attribute, ast.Call, ast.Subscript)) and field in ("value", "func"):
        return 13
    return 1


def _original(node: ast.AST) -> bool:
    return getattr(node, "lineno", None) is not None


def render(site: Site, node: ast.AST, needed: int = 0) -> str:
    """Source text of an expression built from the site's own nodes (an operator changed, operands swapped or
    left out): every original part keeps its exact text (quotes, number notation, spacing), brackets are added
    only where precedence needs them."""
    if _original(node):
        text = site.segment(node)
    elif isinstance(node, ast.BinOp):
        text = (f"{render(site, node.left, tightness(node, 'left', 0))} {SYMBOLS[type(node.op)]} "
                f"{render(site, node.right, tightness(node, 'right', 0))}")
    elif isinstance(node, ast.Compare):
        parts = [render(site, node.left, 5)]
        for op, comparator in zip(node.ops, node.comparators):
            parts += [SYMBOLS[type(op)], render(site, comparator, 5)]
        text = " ".join(parts)
    elif isinstance(node, ast.BoolOp):
        text = f" {SYMBOLS[type(node.op)]} ".join(render(site, v, precedence(node) + 1) for v in node.values)
    elif isinstance(node, ast.UnaryOp):
        text = SYMBOLS[type(node.op)] + render(site, node.operand, precedence(node))
    else:
        text = ast.unparse(node)
    # An original part lost the brackets around it (they were inside the replaced text): precedence says whether
    # it needs them again, and a part over several lines always does (the brackets carried the line break).
    return f"({text})" if precedence(node) < needed or (needed and "\n" in text) else text


def first_line(statement: ast.stmt) -> int:
    """A statement's first line, its decorators included."""
    return min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", []))])


def statement_lines(site: Site, first: ast.stmt, last: ast.stmt) -> tuple[int, int]:
    """The whole lines from `first` (with its decorators) to `last`."""
    return first_line(first), last.end_lineno


def replace_statements(site: Site, first: ast.stmt, last: ast.stmt, new_text: str) -> TextEdit:
    """An edit replacing whole statement lines with `new_text` (already indented, ending in a newline)."""
    start, end = statement_lines(site, first, last)
    return TextEdit(start, 0, end, len(site.lines[end - 1].encode("utf-8")), new_text)


def reindent(text: str, indent: str) -> str:
    """Lines of `text` (indented as at column 0 in a block) moved to `indent`."""
    import textwrap

    body = textwrap.dedent(text)
    return "".join(indent + line if line.strip() else line for line in body.splitlines(keepends=True))


def block_text(site: Site, body: list[ast.stmt], indent: str) -> str:
    """The source of consecutive statements `body`, moved to `indent`, ending in a newline."""
    start, end = statement_lines(site, body[0], body[-1])
    text = "".join(site.lines[start - 1:end])
    if not text.endswith("\n"):
        text += "\n"
    return reindent(text, indent)


def statements_of(node: ast.AST) -> Iterable[tuple[ast.AST, str, list[ast.stmt]]]:
    """(owner, field, body) of every statement list inside a function (nested functions' included)."""
    for owner in ast.walk(node):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(owner, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                yield owner, name, body
        if isinstance(owner, ast.Try):
            for handler in owner.handlers:
                yield handler, "body", handler.body


def starts_with(site: Site, node: ast.stmt, word: str) -> bool:
    return site.lines[node.lineno - 1][node.col_offset:].startswith(word)


PREFIXED_INTEGER = re.compile(r"0([xXoObB])([0-9a-fA-F]+)")
PLAIN_DECIMAL = re.compile(r"\d+\.\d*|\.\d+")


def shifted_literal(text: str, value: int | float, delta: int) -> str | None:
    """`value + delta` written the way `text` writes `value` (hexadecimal stays hexadecimal with its case and width,
    digit groups keep their underscores, a decimal fraction keeps its places); None where that notation cannot
    hold the new value as a person would write it (an exponent)."""
    new = value + delta
    plain = text.replace("_", "")
    prefixed = PREFIXED_INTEGER.fullmatch(plain)
    if prefixed and new >= 0:
        letter, digits = prefixed.groups()
        written = format(new, letter.lower())  # the prefix letter is the format's own
        written = written.upper() if digits.isupper() or (digits.isdigit() and letter.isupper()) else written
        return f"0{letter}{written.zfill(len(digits))}" if "_" not in text else None
    if prefixed:
        return None
    if isinstance(value, int):
        return f"{new:_}" if "_" in text else str(new)
    if PLAIN_DECIMAL.fullmatch(plain) and "_" not in text:
        places = max(1, len(plain.split(".")[1]))
        return f"{new:.{places}f}"
    return None


REGISTRY: dict[str, "BugModifier"] = {}


class BugModifier(ABC):
    name: ClassVar[str] = ""
    explanation: ClassVar[str]
    targets: ClassVar[str] = "function"   # "function" or "class"
    min_complexity: ClassVar[int] = 3
    max_complexity: ClassVar[int | None] = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name"):
            if cls.name in REGISTRY:
                raise TypeError(f"bug modifier {cls.name!r} defined twice")
            REGISTRY[cls.name] = cls()

    def applies(self, site: Site) -> bool:
        """The kind of site this modifier works on, within its complexity bounds."""
        return (site.is_class == (self.targets == "class") and site.complexity >= self.min_complexity
                and (self.max_complexity is None or site.complexity <= self.max_complexity))

    @abstractmethod
    def modify(self, site: Site) -> Iterable[Bug]:
        """Every bug this modifier can make at the site; called only where `applies` is true."""

    def bugs(self, site: Site) -> list[Bug]:
        return list(self.modify(site)) if self.applies(site) else []
