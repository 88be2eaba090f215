"""Realism filters: a candidate bug whose change reads as a machine's edit is not tried.

A person who breaks code writes `n + 1` for `n`, `<` for `<=`, forgets a case; a program that
rewrites a syntax tree also writes `x + 0`, `x[(-1)]`, `0xD800` as `55297`, `'a'` for `"a"`,
`(name)` and `class A:` for `class A(object):`. Each filter is one such form, looked for in the
lines the change touched, in the buggy module against the same lines of the clean one: a form
the clean code already had is not the change's doing. Pure: two module texts in, a filter (or
None) out; the module's tokens and tree are computed once per text.
"""
from __future__ import annotations

import ast
import io
import keyword
import tokenize
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

from flawforge.debugging.candidates import Candidate, changes_code, source_lines, touched
from flawforge.debugging.modifiers.procedural import IDENTITY

FILTERS: dict[str, "MechanicalForm"] = {}


@dataclass(frozen=True)
class Changed:
    """One side of a change: the whole lines it touched (first, last, 1-based), their tokens, the nodes that
    start on them and every node of the top-level statements around them (a block whose body the change emptied
    starts before it)."""

    first: int
    last: int
    tokens: tuple[tokenize.TokenInfo, ...]
    nodes: tuple[ast.AST, ...]
    around: tuple[ast.AST, ...]


def _tokens(lines: list[str]) -> tuple[tokenize.TokenInfo, ...]:
    """The tokens of some whole lines, read without their indentation (a block cut from a module has no consistent
    indentation of its own); a bracket the lines leave open ends the reading, with the tokens read so far."""
    found = []
    try:
        for token in tokenize.generate_tokens(io.StringIO("".join(line.lstrip() for line in lines)).readline):
            found.append(token)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return tuple(found)


def _within(statements, first: int, last: int) -> tuple[ast.AST, ...]:
    return tuple(node for statement in statements for node in ast.walk(statement)
                 if hasattr(node, "lineno") and first <= node.lineno <= last)


def changed_sides(clean: str, buggy: str) -> tuple[Changed, Changed]:
    """The lines the change touched in the clean module and in the buggy one (candidates.touched)."""
    change = touched(clean, buggy)
    first, clean_last, buggy_last = change.first, change.clean_last, change.buggy_last
    buggy_part = change.buggy or []
    clean_lines, buggy_lines = source_lines(clean), source_lines(buggy)
    return (Changed(first, clean_last, _tokens(clean_lines[first - 1:clean_last]),
                    _within(change.clean, first, clean_last), _every(change.clean)),
            Changed(first, buggy_last, _tokens(buggy_lines[first - 1:buggy_last]),
                    _within(buggy_part, first, buggy_last), _every(buggy_part)))


def _every(statements) -> tuple[ast.AST, ...]:
    return tuple(node for statement in statements for node in ast.walk(statement))


class MechanicalForm(ABC):
    """One form that reads as a machine's edit. Defining a subclass with a `name` registers it."""

    name: ClassVar[str] = ""
    explanation: ClassVar[str]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name"):
            FILTERS[cls.name] = cls()

    @abstractmethod
    def found(self, clean: Changed, buggy: Changed) -> bool:
        """Whether the change brought the form in."""


class CountedForm(MechanicalForm):
    """A form that can be counted in each side: the change brought it in when the buggy lines have more of it."""

    def found(self, clean: Changed, buggy: Changed) -> bool:
        return self.count(buggy) > self.count(clean)

    @abstractmethod
    def count(self, side: Changed) -> int:
        """How often the form occurs in one side's lines."""


class IdentityOperation(CountedForm):
    name = "identity_operation"
    explanation = "An operation that does nothing or a doubled sign: `x + 0`, `x * 1`, `x ** 1`, `x - -1`."

    def count(self, side: Changed) -> int:
        found = 0
        for node in side.nodes:
            if not isinstance(node, ast.BinOp):
                continue
            sides, neutral = IDENTITY.get(type(node.op), ((), None))
            found += any(isinstance(getattr(node, field), ast.Constant) and getattr(node, field).value == neutral
                         and type(getattr(node, field).value) in (int, float) for field in sides)
            found += (isinstance(node.op, (ast.Add, ast.Sub)) and isinstance(node.right, ast.UnaryOp)
                      and isinstance(node.right.op, ast.USub) and isinstance(node.right.operand, ast.Constant))
        return found


def _pairs(tokens: tuple[tokenize.TokenInfo, ...]) -> list[tuple[int, int]]:
    """(index of `(`, index of its `)`) for every round bracket pair closed within the tokens."""
    stack, pairs = [], []
    for index, token in enumerate(tokens):
        if token.type == tokenize.OP and token.string == "(":
            stack.append(index)
        elif token.type == tokenize.OP and token.string == ")" and stack:
            pairs.append((stack.pop(), index))
    return pairs


def _groups(tokens: tuple[tokenize.TokenInfo, ...], opening: int) -> bool:
    """The bracket at `opening` groups an expression (it follows no callee, subscript or definition name)."""
    before = tokens[opening - 1] if opening else None
    if before is None:
        return True
    if before.type == tokenize.NAME:
        return keyword.iskeyword(before.string)
    return not (before.type == tokenize.OP and before.string in (")", "]")) and before.type != tokenize.STRING


def _top_level_comma(tokens: tuple[tokenize.TokenInfo, ...], start: int, end: int) -> bool:
    depth = 0
    for token in tokens[start + 1:end]:
        if token.string in ("(", "[", "{"):
            depth += 1
        elif token.string in (")", "]", "}"):
            depth -= 1
        elif depth == 0 and (token.string == "," or token.string == "for"):
            return True
    return False


class RedundantBrackets(CountedForm):
    name = "redundant_brackets"
    explanation = "Brackets a person does not write: around a single name or number (`x[(-1)]`, `(count)`), or a "\
                  "second pair around a bracketed expression (`f((a - b))`)."

    def count(self, side: Changed) -> int:
        tokens = tuple(t for t in side.tokens if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT,
                                                                tokenize.INDENT, tokenize.DEDENT))
        pairs = _pairs(tokens)
        closing_of = dict(pairs)
        found = 0
        for opening, closing in pairs:
            inside = tokens[opening + 1:closing]
            atom = (len(inside) == 1 and inside[0].type in (tokenize.NAME, tokenize.NUMBER)
                    and not keyword.iskeyword(inside[0].string)) or (
                len(inside) == 2 and inside[0].string == "-" and inside[1].type == tokenize.NUMBER)
            doubled = (closing_of.get(opening + 1) == closing - 1
                       and not _top_level_comma(tokens, opening + 1, closing - 1) and closing - opening > 3)
            found += (atom and _groups(tokens, opening)) or doubled
        return found


def _notation(text: str) -> str:
    lowered = text.lower()
    if lowered[:2] in ("0x", "0o", "0b"):
        return lowered[:2]
    return "".join(mark for mark in ("_", "e", ".", "j") if mark in lowered) or "integer"


def _value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


class RespelledLiteral(MechanicalForm):
    name = "respelled_literal"
    explanation = "A literal written differently from the code around it: `0xD800` as `55297`, `1e6` as "\
                  "`1000000.0`, `\"text\"` as `'text'`, a named constant as its number."

    def found(self, clean: Changed, buggy: Changed) -> bool:
        kinds = (tokenize.NUMBER, tokenize.STRING)
        before = Counter(t.string for t in clean.tokens if t.type in kinds)
        after = Counter(t.string for t in buggy.tokens if t.type in kinds)
        removed, added = list((before - after).elements()), list((after - before).elements())
        for new in added:
            for old in removed:
                old_value, new_value = _value(old), _value(new)
                if old_value is not None and type(old_value) is type(new_value) and old_value == new_value:
                    return True  # the same value in other quotes or another notation
                if isinstance(old_value, (int, float)) and isinstance(new_value, (int, float)) \
                        and _notation(old) != _notation(new) and abs(old_value - new_value) <= 1:
                    return True
        constants = Counter(t.string for t in clean.tokens if t.type == tokenize.NAME and t.string.isupper()
                            and len(t.string) > 1) - Counter(t.string for t in buggy.tokens if t.type == tokenize.NAME)
        return bool(constants) and any(_value(new) is not None and isinstance(_value(new), (int, float))
                                       for new in added)


class ObjectBaseDropped(MechanicalForm):
    name = "object_base_dropped"
    explanation = "`object` removed from a class's bases, which changes nothing in Python 3."

    def found(self, clean: Changed, buggy: Changed) -> bool:
        return _object_bases(buggy) < _object_bases(clean)


def _object_bases(side: Changed) -> int:
    return sum(1 for node in side.nodes if isinstance(node, ast.ClassDef)
               for base in node.bases if isinstance(base, ast.Name) and base.id == "object")


class TextArithmetic(CountedForm):
    name = "text_arithmetic"
    explanation = "Arithmetic on a text literal that no one writes: `'%s' ** n`, `'abc' - x`, `x // 'fmt'`."

    def count(self, side: Changed) -> int:
        return sum(1 for node in side.nodes if isinstance(node, ast.BinOp)
                   and not isinstance(node.op, (ast.Add, ast.Mod, ast.Mult))
                   and any(isinstance(operand, ast.JoinedStr) or (isinstance(operand, ast.Constant)
                                                                  and isinstance(operand.value, (str, bytes)))
                           for operand in (node.left, node.right)))


class LiteralFirst(CountedForm):
    name = "literal_first"
    explanation = "A number put before what it works on where code puts it after: `10 % n`, `7 // days` (operands "\
                  "swapped), `0 > count` (a comparison read backwards; a lower bound such as `0 <= i` is how "\
                  "people write one)."

    ORDERING = (ast.Gt, ast.GtE)

    def count(self, side: Changed) -> int:
        found = 0
        for node in side.nodes:
            if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.FloorDiv)):
                found += _number(node.left) and not _number(node.right)
            elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], self.ORDERING):
                found += _number(node.left) and not _number(node.comparators[0])
        return found


def _number(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


class PassForBody(CountedForm):
    name = "pass_for_body"
    explanation = "A block whose only statement is `pass` where the code did something: `for x in items: pass`, "\
                  "`try: pass`, `else: pass`, a function emptied to `pass` (an `except ...: pass` is a person's "\
                  "idiom, not counted)."

    BLOCKS = (ast.For, ast.AsyncFor, ast.While, ast.If, ast.With, ast.AsyncWith, ast.Try, ast.FunctionDef,
              ast.AsyncFunctionDef)

    def count(self, side: Changed) -> int:
        return sum(1 for node in side.around if isinstance(node, self.BLOCKS)
                   for block in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", []))
                   if len(block) == 1 and isinstance(block[0], ast.Pass) and side.first <= block[0].lineno <= side.last)


class OverloadAfterImplementation(CountedForm):
    name = "overload_after_implementation"
    explanation = "An `@overload` stub moved below the function it describes, which then replaces it: a "\
                  "reordering no one writes by hand."

    def count(self, side: Changed) -> int:
        implemented, found = set(), 0
        for node in sorted((n for n in side.nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))),
                           key=lambda n: n.lineno):
            stub = any((isinstance(d, ast.Name) and d.id == "overload")
                       or (isinstance(d, ast.Attribute) and d.attr == "overload") for d in node.decorator_list)
            if stub:
                found += node.name in implemented
            else:
                implemented.add(node.name)
        return found


def mechanical_form(clean: str, buggy: str) -> MechanicalForm | None:
    """The first filter whose form the change from `clean` to `buggy` brings in, or None for a change a person
    could have made."""
    before, after = changed_sides(clean, buggy)
    return next((form for form in FILTERS.values() if form.found(before, after)), None)


def worth_trying(candidate: Candidate, clean: str) -> bool:
    """The candidate changes the code (changes_code) in a way a person could have written."""
    return changes_code(candidate, clean) and mechanical_form(clean, candidate.buggy_source) is None
