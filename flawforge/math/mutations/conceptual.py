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
    itself, joins_operands, operand_spans, operator_pattern


def _in_a_step(site: Site) -> bool:
    """A computed value of a numbered step (not an input, not the final answer's assignment)."""
    return (site.assignment.step.startswith("L") and not site.assignment.is_input
            and site.assignment is not site.program.answer and is_number(site.value))


# How tightly an operator binds, for the parentheses a swapped operation needs in the text.
_BINDING = {"+": 1, "-": 1, "*": 2, "/": 2}
# Unit words after the last operand of a group ("{b} hours) * 3"), which stay inside its parentheses.
_UNIT_WORDS = re.compile(r"(?:\s+(?!(?:plus|minus|times|divided|multiplied|and|of|x|X)\b)[A-Za-z][A-Za-z'-]*){0,3}")


@dataclass(frozen=True)
class SwapOperator(TextChange):
    """The operator written between `left` and `right` becomes `new`; each of `grouped` (the first and last
    variable of an operand, or of the whole operation) must then be in parentheses to read as computed:
    "7 * 2 * 3" swapped to "(7 + 2) * 3"."""

    left: str
    right: str
    old: str
    new: str
    grouped: tuple[tuple[str, str], ...] = ()

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
            if in_order:
                edits.append((first.end + match.start(), first.end + match.end(), new_token))
                edits += self._parentheses(template, found, found.index(first), same)
            elif self.new not in COMMUTATIVE:
                # "{b} + {a}" for a + b: the new, order-sensitive operation must read a - b
                new_between = between[:match.start()] + new_token + between[match.end():]
                edits.append((first.start, second.end, template[second.start:second.end] + new_between
                              + template[first.start:first.end]))
            else:
                edits.append((first.end + match.start(), first.end + match.end(), new_token))
        if not edits and shown_together:
            raise Unrenderable(f"the text writes {self.left} and {self.right} together, but not as "
                               f"{self.left} {self.old} {self.right}")
        return apply_edits(template, edits)

    def _parentheses(self, template: str, found: tuple, left: int, same: Aliases) -> list[tuple[int, int, str]]:
        """The parentheses around each group, where the text writes it in one calculation with the swapped
        operation (fields `left` and `left + 1`) and has none there already."""
        low, high = left, left + 1  # the fields of that calculation: joined by operators, no '=' between
        while low > 0 and joins_operands(template[found[low - 1].end:found[low].start]):
            low -= 1
        while high + 1 < len(found) and joins_operands(template[found[high].end:found[high + 1].start]):
            high += 1
        edits = []
        for first_name, last_name in self.grouped:
            firsts, lasts = same(first_name), same(last_name)
            begin = next((i for i in range(left + 1, low - 1, -1) if found[i].variable in firsts), None)
            end = next((i for i in range(left, high + 1) if found[i].variable in lasts), None)
            if begin is None or end is None or begin > end:
                continue  # the text does not write the group out: the proofreader judges what it does write
            opening = found[begin].start
            while opening > 0 and template[opening - 1] in "$€£":
                opening -= 1
            closing = _UNIT_WORDS.match(template, found[end].end).end()
            if template[:opening].rstrip().endswith("(") and template[closing:].lstrip().startswith(")"):
                continue
            edits += [(opening, opening, "("), (closing, closing, ")")]
        return edits


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
        for position, node, parent, left, right in _swappable_operations(site.assignment.value):
            old = operator_symbol(node.op)
            for new, prior in self.SWAPS[old]:
                expression, swapped = copy_at(site.assignment.value, position)
                swapped.op = OPERATORS[new]()
                yield Edit(params={"old": old, "new": new, "left": left, "right": right},
                           expression=expression, text=SwapOperator(left=left, right=right, old=old, new=new,
                                                                    grouped=_groups(node, parent, new)),
                           prior=prior)


@lru_cache(maxsize=PROBLEM_CACHE_SIZE)  # asked by applies() and modify() of every site (keyed by the node itself)
def _swappable_operations(expression: ast.expr) -> tuple[tuple[int, ast.BinOp, ast.AST | None, str, str], ...]:
    """(walk position, node, its parent, last variable on its left, first on its right) of each operation the
    text can show swapped."""
    found = []
    parents: dict[int, ast.AST] = {}
    for position, node in enumerate(expression_nodes(expression)):
        if isinstance(node, ast.BinOp):
            parents[id(node.left)] = parents[id(node.right)] = node
            if operator_symbol(node.op) in OperatorSwap.SWAPS:
                left, right = variables_read(node.left), variables_read(node.right)
                if left and right:
                    found.append((position, node, parents.get(id(node)), left[-1], right[0]))
    pairs = Counter((left, right) for *_, left, right in found)
    # in "a + a + a" the text cannot say which "+" changed
    return tuple(operation for operation in found if pairs[operation[3:]] == 1)


def _groups(node: ast.BinOp, parent: ast.AST | None, new: str) -> tuple[tuple[str, str], ...]:
    """The (first, last) variables of each part the text must parenthesise once `node`'s operator is `new`: an
    operand whose own operation binds less tightly ("(a + b) * c"), and the operation itself where its parent
    binds more tightly ("(a - b) * c"). Only parts that start and end with a variable can be found in the text."""
    binding = _BINDING[new]
    groups = []
    left, right = node.left, node.right
    if isinstance(left, ast.BinOp) and _BINDING.get(operator_symbol(left.op), 3) < binding:
        groups.append(_ends(left))
    if isinstance(right, ast.BinOp):
        inner = _BINDING.get(operator_symbol(right.op), 3)
        if inner < binding or (inner == binding and new in ("-", "/")):
            groups.append(_ends(right))
    if isinstance(parent, ast.BinOp):
        outer = _BINDING.get(operator_symbol(parent.op), 3)
        if outer > binding or (outer == binding and parent.right is node and operator_symbol(parent.op) in "-/"):
            groups.append(_ends(node))
    return tuple(group for group in groups if None not in group)


def _ends(node: ast.expr) -> tuple[str | None, str | None]:
    """The variables an operation's text starts and ends with (None where it starts or ends otherwise)."""
    first, last = node, node
    while isinstance(first, ast.BinOp):
        first = first.left
    while isinstance(last, ast.BinOp):
        last = last.right
    return (first.id if isinstance(first, ast.Name) else None, last.id if isinstance(last, ast.Name) else None)


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
        """The operands of the line's calculations read `new`; where the line restates the quantity in words ("she
        bought {apples} apples") it stays what it is, as every later line says it is."""
        olds = same(self.old)
        operands = set(operand_spans(template))
        edits = []
        for field in fields(template):
            if (field.start, field.end) in operands and any(field.reads(old) for old in olds):
                renamed = _WORD.sub(lambda match: self.new if match.group() in olds else match.group(),
                                    field.expression)
                body = template[field.start + 1:field.end - 1]
                edits.append((field.start, field.end, "{" + body.replace(field.expression, renamed, 1) + "}"))
        # a value the template writes as a number (often world knowledge: "60 minutes"), where it is an operand
        number = show(values.get(self.old))
        edits += [(start, end, "{" + self.new + "}") for start, end in operands
                  if template[start] != "{" and template[start:end] == number]
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
