"""Conceptual errors: a wrong step of reasoning, computed correctly.

Every line of a conceptual candidate is arithmetically true; the error is in what is
computed: the wrong operation, a term left out, the wrong quantity used, a number from the
question misread, or an intermediate result reported as the answer.
"""
from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable, Mapping

from flawforge.math import PROBLEM_CACHE_SIZE
from flawforge.math.arithmetic import is_number
from flawforge.math.display import show
from flawforge.math.mutations.base import Edit, Mutation, Substitution
from flawforge.math.program import FINAL_ANSWER_STEP, OPERATORS, Site, copy_at, expression_nodes, operator_symbol, \
    replace_node, variables_read
from flawforge.math.reconstruct import COMMUTATIVE, WORDS, Aliases, TextChange, Unrenderable, apply_edits, fields, \
    itself, joins_operands, literal_spans, operator_pattern


def _in_a_step(site: Site) -> bool:
    """A computed value of a numbered step (not an input, not the final answer's assignment)."""
    return (site.assignment.step.startswith("L") and not site.assignment.is_input
            and site.assignment is not site.program.answer and is_number(site.value))


@dataclass(frozen=True)
class SwapOperator(TextChange):
    """The operator written between `left` and `right` becomes `new`."""

    left: str
    right: str
    old: str
    new: str

    def rewrite(self, template: str, values: Mapping[str, Any], same: Aliases = itself) -> str:
        pattern = operator_pattern(self.old)
        found = fields(template)
        edits: list[tuple[int, int, str]] = []
        shown_together = False  # a text that never writes the two operands side by side claims no operation
        lefts, rights = same(self.left), same(self.right)
        for first, second in zip(found, found[1:]):
            between = template[first.end:second.start]
            if (first.variable in lefts and second.variable in rights) or (first.variable in rights
                                                                             and second.variable in lefts):
                shown_together = True
            if not joins_operands(between):
                continue
            in_order = first.variable in lefts and second.variable in rights
            reversed_order = first.variable in rights and second.variable in lefts and self.old in COMMUTATIVE
            if not (in_order or reversed_order):
                continue
            matches = list(pattern.finditer(between))
            if len(matches) != 1:
                continue
            match = matches[0]
            new_token = WORDS[self.new][0] if match.group("word") else self.new
            new_between = between[:match.start()] + new_token + between[match.end():]
            if reversed_order and self.new not in COMMUTATIVE:
                # "{b} + {a}" for a + b: the new, order-sensitive operation must read a - b
                new_text = template[second.start:second.end] + new_between + template[first.start:first.end]
            else:
                new_text = template[first.start:first.end] + new_between + template[second.start:second.end]
            edits.append((first.start, second.end, new_text))
        if not edits and shown_together:
            raise Unrenderable(f"the text writes {self.left} and {self.right} together, but not as "
                               f"{self.left} {self.old} {self.right}")
        return apply_edits(template, edits)


class OperatorSwap(Mutation):
    name = "operator_swap"
    family = "conceptual"
    explanation = ("Incorrect operation: {target} should be computed with '{old}' ({left} {old} {right}) "
                   "but '{new}' was used.")
    # The inverse operation is the common confusion; the other is the "wrong kind of combining".
    SWAPS = {"+": (("-", 1.0), ("*", 0.5)), "-": (("+", 1.0), ("/", 0.3)),
             "*": (("/", 1.0), ("+", 0.5)), "/": (("*", 1.0), ("-", 0.3))}

    def applies(self, site: Site) -> bool:
        return _in_a_step(site) and bool(_swappable_operations(site.assignment.value))

    def modify(self, site: Site) -> Iterable[Edit]:
        for position, node, left, right in _swappable_operations(site.assignment.value):
            old = operator_symbol(node.op)
            for new, prior in self.SWAPS[old]:
                expression, swapped = copy_at(site.assignment.value, position)
                swapped.op = OPERATORS[new]()
                yield Edit(params={"old": old, "new": new, "left": left, "right": right},
                           expression=expression, text=SwapOperator(left=left, right=right, old=old, new=new),
                           prior=prior)


@lru_cache(maxsize=PROBLEM_CACHE_SIZE)  # asked by applies() and modify() of every site (keyed by the node itself)
def _swappable_operations(expression: ast.expr) -> tuple[tuple[int, ast.BinOp, str, str], ...]:
    """(walk position, node, last variable on its left, first on its right) of each operation the text can
    show swapped."""
    found = []
    for position, node in enumerate(expression_nodes(expression)):
        if isinstance(node, ast.BinOp) and operator_symbol(node.op) in OperatorSwap.SWAPS:
            left, right = variables_read(node.left), variables_read(node.right)
            if left and right:
                found.append((position, node, left[-1], right[0]))
    pairs = Counter((left, right) for _, _, left, right in found)
    # in "a + a + a" the text cannot say which "+" changed
    return tuple(operation for operation in found if pairs[operation[2:]] == 1)


@dataclass(frozen=True)
class DropTerm(TextChange):
    """The line leaves `term` (joined by `op`) out of its calculation."""

    term: str
    op: str

    def rewrite(self, template: str, values: Mapping[str, Any], same: Aliases = itself) -> str:
        operator = operator_pattern(self.op)
        joined = operator_pattern(self.op, with_list_joins=True)

        def strength(gap: str) -> int:
            """2: the gap is the operator ("+", "plus"); 1: a list join (", ", "and"); 0: neither."""
            if not joins_operands(gap):
                return 0
            return 2 if operator.search(gap) else 1 if joined.search(gap) else 0

        found = fields(template)
        terms = same(self.term)
        edits = []
        for index, field in enumerate(found):
            if field.variable not in terms:
                continue
            before = found[index - 1] if index > 0 else None
            after = found[index + 1] if index + 1 < len(found) else None
            left = strength(template[before.end:field.start]) if before else 0
            right = strength(template[field.end:after.start]) if after else 0
            if left and left >= right:
                edits.append((before.end, field.end, ""))
            elif right:
                edits.append((field.start, after.start, ""))
        if not edits and any(field.variable in terms for field in found):
            raise Unrenderable(f"the text shows the term {self.term} but not as part of the calculation")
        return apply_edits(template, edits)


class IncompleteCalculation(Mutation):
    name = "incomplete_calculation"
    family = "conceptual"
    explanation = "Incomplete calculation: the term '{term}' (value: {term_value}) was left out of {target}."
    MIN_TERMS = 3  # with two terms, leaving one out is not a calculation any more
    PRIORS = {"+": 1.0, "*": 0.5}

    def applies(self, site: Site) -> bool:
        return _in_a_step(site) and bool(_chains(site.assignment.value))

    def modify(self, site: Site) -> Iterable[Edit]:
        for position, symbol, terms in _chains(site.assignment.value):
            for dropped in terms:
                if dropped not in site.scope:
                    continue
                kept = [t for t in terms if t != dropped]
                chain: ast.expr = ast.Name(id=kept[0], ctx=ast.Load())
                for term in kept[1:]:
                    chain = ast.BinOp(left=chain, op=OPERATORS[symbol](), right=ast.Name(id=term, ctx=ast.Load()))
                expression, old = copy_at(site.assignment.value, position)
                expression = replace_node(expression, old, chain)
                yield Edit(params={"term": dropped, "op": symbol}, expression=expression,
                           text=DropTerm(term=dropped, op=symbol), prior=self.PRIORS[symbol])

    def explanation_values(self, site: Site, edit: Edit) -> dict:
        return {"term_value": show(site.scope[edit.params["term"]])}


def _chain(node: ast.expr, op: type) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, op):
        return _chain(node.left, op) + _chain(node.right, op)
    return [node]


def _chains(expression: ast.expr) -> tuple[tuple[int, str, list[str]], ...]:
    """(position, operator, term names) of each maximal +/* chain of named terms."""
    found = []
    inside: set[int] = set()
    for position, node in enumerate(expression_nodes(expression)):
        if not isinstance(node, ast.BinOp) or id(node) in inside:
            continue
        symbol = operator_symbol(node.op)
        if symbol not in IncompleteCalculation.PRIORS:
            continue
        terms = _chain(node, type(node.op))
        inside.update(id(n) for n in expression_nodes(node) if isinstance(n, ast.BinOp) and isinstance(n.op, type(node.op)))
        names = [t.id for t in terms if isinstance(t, ast.Name)]
        # each term named once, so the text can show which one is left out
        if len(terms) >= IncompleteCalculation.MIN_TERMS and len(set(names)) == len(terms):
            found.append((position, symbol, names))
    return tuple(found)


_WORD = re.compile(r"(?<![\w.])\w+")  # a whole name or number in an expression (not an attribute)


@dataclass(frozen=True)
class SubstituteName(TextChange):
    """The line uses variable `new` where it used `old`."""

    old: str
    new: str

    def rewrite(self, template: str, values: Mapping[str, Any], same: Aliases = itself) -> str:
        edits = []
        olds = same(self.old)
        for field in fields(template):
            if any(field.reads(old) for old in olds):
                renamed = _WORD.sub(lambda match: self.new if match.group() in olds else match.group(),
                                    field.expression)
                body = template[field.start + 1:field.end - 1]
                edits.append((field.start, field.end, "{" + body.replace(field.expression, renamed, 1) + "}"))
        if not edits:
            # a value the template wrote as a number (often world knowledge, e.g. 60 minutes)
            number = re.escape(show(values.get(self.old)))
            spans = literal_spans(template)
            for match in re.finditer(rf"(?<![\w.]){number}(?![\w]|\.\d)", template):
                if any(start <= match.start() and match.end() <= end for start, end in spans):
                    edits.append((match.start(), match.end(), "{" + self.new + "}"))
        # a text that never shows the replaced operand makes no claim about it
        return apply_edits(template, edits)


class OperandSubstitution(Mutation):
    """Another variable in scope takes the place of one the line reads."""

    family = "conceptual"
    replaces_inputs: bool

    def _operands(self, site: Site) -> list[str]:
        inputs = site.program.input_names
        return [name for name in site.assignment.reads
                if (name in inputs) == self.replaces_inputs and is_number(site.scope.get(name))]

    def applies(self, site: Site) -> bool:
        return _in_a_step(site) and bool(self._operands(site))

    def modify(self, site: Site) -> Iterable[Edit]:
        candidates = site.numeric_scope()
        for operand in self._operands(site):
            for replacement, value in candidates.items():
                if replacement in (operand, site.target) or value == site.scope[operand]:
                    continue
                yield Substitution(site=site, old=operand, new=replacement,
                                   params={"operand": operand, "replacement": replacement},
                                   text=SubstituteName(old=operand, new=replacement))

    def explanation_values(self, site: Site, edit: Edit) -> dict:
        return {"operand_value": show(site.scope[edit.params["operand"]]),
                "replacement_value": show(site.scope[edit.params["replacement"]])}


class IncorrectOperand(OperandSubstitution):
    name = "incorrect_operand"
    explanation = ("Incorrect operand: {target} used '{replacement}' (value: {replacement_value}) "
                   "instead of '{operand}' (value: {operand_value}).")
    replaces_inputs = False


class InputMisrepresentation(OperandSubstitution):
    name = "input_misrepresentation"
    explanation = ("Input misrepresentation: {target} used '{replacement}' (value: {replacement_value}) "
                   "where the question's '{operand}' (value: {operand_value}) belongs.")
    replaces_inputs = True


@dataclass(frozen=True)
class StopAt(TextChange):
    """The solution stops after the step that computes `variable` and reports it as the answer."""

    variable: str

    @property
    def reported(self) -> str | None:
        return self.variable

    def erroneous_line(self, site: Site) -> str:
        return FINAL_ANSWER_STEP

    def shown_line(self, site: Site) -> str:
        return site.program.step_of(self.variable)


class IncorrectFinalAnswerSelection(Mutation):
    name = "incorrect_final_answer_selection"
    family = "conceptual"
    explanation = ("Incorrect final answer: the intermediate value '{selected}' (value: {selected_value}) was "
                   "reported instead of the answer '{answer_variable}' (value: {answer_value}).")

    def applies(self, site: Site) -> bool:
        return site.assignment is site.program.answer

    def modify(self, site: Site) -> Iterable[Edit]:
        program = site.program
        computed = [a.target for a in program.assignments[:site.assignment.position] if not a.is_input]
        for rank, name in enumerate(dict.fromkeys(reversed(computed))):
            value = site.scope.get(name)
            if name in site.assignment.reads or not is_number(value) or value == site.value:
                continue
            yield Edit(params={"selected": name}, expression=ast.Name(id=name, ctx=ast.Load()),
                       text=StopAt(variable=name), prior=1.0 / (1 + rank))

    def explanation_values(self, site: Site, edit: Edit) -> dict:
        return {"selected_value": show(site.scope[edit.params["selected"]]), "answer_value": show(site.value),
                "answer_variable": ast.unparse(site.assignment.value)}
