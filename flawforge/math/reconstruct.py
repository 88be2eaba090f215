"""Solution text that tells the truth about the computation behind it.

A solution is written from the template's logical steps, one line per step, filled with the
values of a trace, and ends with `#### <answer>`. For a flawed computation the text must say
what was computed:

- the erroneous step's template is changed the way the code was (the operator written between
  the two operands, the variable used, the term left out): each mutation's TextChange does it
  (flawforge.math.mutations), with the template tools here; a change the text cannot show
  makes the candidate unrenderable rather than a solution that contradicts its own numbers;
- every `<<expr=value>>` annotation whose template does not match the code (templates are
  written by language models) is rewritten from the code, so conceptual candidates are true in
  every annotation, and a computational candidate is false in exactly the injected line;
- a reported intermediate result ends the solution at the step that computed it;
- placeholders are filled the way the template asks: `{x}`, `{x:.0%}`, `{x.denominator}`,
  `{x*100}`; fractions and negative numbers are parenthesised inside annotation expressions so
  the expression still means what the code computed.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Callable, Collection, Mapping

from flawforge.math import PROBLEM_CACHE_SIZE
from flawforge.math.arithmetic import UnsafeExpression, evaluate
from flawforge.math.display import show, show_answer, show_percent
from flawforge.math.proofread import ANNOTATION, NOT_MIXED_AFTER, Number, as_written, check_annotation, numbers_in
from flawforge.math.program import Program, Site, clone
from flawforge.proto.values import identical

FINAL_ANSWER_PREFIX = "#### "


class Unrenderable(ValueError):
    """The template cannot be filled, or cannot be changed to say what the computation did."""


# --- templates: fields and rendering ----------------------------------------------------------
# Not frozen: every template a mutant's text changes is read into new fields, and a frozen dataclass's
# __init__ costs three times as much.
@dataclass
class Field:
    start: int  # offset of '{'
    end: int    # offset after '}'
    expression: str
    spec: str

    @property
    def variable(self) -> str | None:
        """The variable when the field is a plain `{name}`."""
        return self.expression if self.expression.isidentifier() else None

    def reads(self, name: str) -> bool:
        return name in self.names

    @cached_property  # fields are cached per template and asked about every mutant's change
    def names(self) -> frozenset[str]:
        """The names the field's expression reads (not attributes such as `.denominator`)."""
        return frozenset(_NAME.findall(self.expression))


_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
_FIELD_OR_ESCAPE = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")
_ANNOTATION_TEMPLATE = re.compile(r"<<(.*?)>>")


@lru_cache(maxsize=PROBLEM_CACHE_SIZE)  # the same few templates are read for every mutant of a problem
def fields(template: str) -> tuple[Field, ...]:
    """The replacement fields of a str.format template, with their offsets ('{{' is a literal)."""
    found = []
    for match in _FIELD_OR_ESCAPE.finditer(template):
        body = match.group(1)
        if body is None:
            continue
        expression, _, spec = body.partition(":")
        found.append(Field(start=match.start(), end=match.end(), expression=expression.split("!", 1)[0].strip(),
                           spec=spec))
    return tuple(found)


def _annotation_expression_spans(template: str) -> list[tuple[int, int]]:
    """Offsets of the expression part (between '<<' and the last '=') of each annotation."""
    return [(slot.start + 2, slot.equals) for slot in _annotation_slots(template)]


def field_value(expression: str, values: Mapping[str, Any]) -> Any:
    if expression.isidentifier():
        if expression not in values:
            raise Unrenderable(f"no value for placeholder {{{expression}}}")
        return values[expression]
    try:
        return evaluate(expression, values)
    except UnsafeExpression as exc:
        raise Unrenderable(f"placeholder {{{expression}}}: {exc}") from None


class Styles:
    """How the original solution writes each variable's values, so that a flawed value is written alike: a share
    it writes as a percentage ("50%") in percent, where the template would show the fraction the code computes
    with; a value it writes as a whole number or a decimal with decimals ("20.8 plants", never "104/5 plants").
    A value it writes as a mixed number ("1 1/2", "1 and 1/3") is written so in prose, never "3/2", and a fraction it
    writes in other terms ("6/100") in those terms, never reduced ("3/50"). Only a variable whose value is a
    fraction the original does not write otherwise keeps fractions in lowest terms ("3/4")."""

    def __init__(self, values: Mapping[str, Any] = MappingProxyType({}), original: str = ""):
        written = numbers_in(original) if original else ()
        mixed_forms = {int(whole) + Fraction(int(over), int(under)): joiner
                       for whole, joiner, over, under in _MIXED.findall(original) if 0 < int(over) < int(under)}
        self.mixed: dict[str, str] = {}  # name -> how the original joins a mixed number's parts (" " or " and ")
        self.terms: dict[str, int] = {}  # name -> the denominator the original writes its fraction over
        # money with one decimal ("$0.3") only where the original writes it so: 130 of 1,692 such amounts in GSM8K
        self.cents = not _ONE_DECIMAL_MONEY.search(ANNOTATION.sub("", original))
        percent, decimal = set(), set()
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
                continue
            exact = as_written(value)
            if exact is None:
                continue
            forms = [number for number in written if _states(number, exact)]
            if any(number.percent for number in forms) and show_percent(value) is not None:
                percent.add(name)
            if exact == int(exact) or (any(number.decimals for number in forms) and show_answer(value) is not None):
                decimal.add(name)
            elif exact in mixed_forms:
                self.mixed[name] = mixed_forms[exact]
            else:
                over = next((int(number.text.partition("/")[2]) for number in forms if "/" in number.text), None)
                if over is not None and over != Fraction(exact).denominator:
                    self.terms[name] = over
        self.percent = frozenset(percent)
        self.decimal = frozenset(decimal)

    def show(self, name: str | None, value: Any, prose: bool) -> str:
        """`value` of variable `name` as the original writes it, in prose or in an annotation."""
        if name is not None:
            if prose and name in self.percent:
                text = show_percent(value)
                if text is None:
                    raise Unrenderable(f"{name} = {show(value)} is no percentage with at most two decimals")
                return text
            if isinstance(value, Fraction) and value.denominator != 1 and name in self.decimal:
                text = show_answer(value)
                if text is None:
                    raise Unrenderable(f"{name} = {show(value)} has no decimal a student would write")
                return text
            if prose and name in self.mixed and isinstance(value, Fraction) and value > 1 and value.denominator != 1:
                whole, part = divmod(value, 1)
                return f"{whole}{self.mixed[name]}{part.numerator}/{part.denominator}"
            if name in self.terms and isinstance(value, Fraction) and 0 < value < 1:
                over = value * self.terms[name]
                if over.denominator == 1:
                    return f"{over.numerator}/{self.terms[name]}"
        return show(value)


_ONE_DECIMAL_MONEY = re.compile(r"\$\s?\d+\.\d(?!\d|\.\d)")  # "$7.5." ends a sentence
# A whole number and a proper fraction after it, apart by a space or " and ": how GSM8K writes 1 1/2.
_MIXED = re.compile(rf"(?<![\w./])(\d+)( | and )(\d+)/(\d+)(?![\w/]|\.\d|{NOT_MIXED_AFTER.pattern})")


def _states(number: Number, value: Fraction | int) -> bool:
    """Whether a number the original writes states `value` (a percentage of it, or it rounded to the decimals
    written)."""
    written = Fraction(number.value) / 100 if number.percent else number.value
    if number.decimals:
        return abs(written - value) <= Fraction(1, 2 * 10**number.decimals)
    return written == value


PLAIN = Styles()  # values as the template writes them (show)


def _format(value: Any, spec: str, in_expression: bool, text: str | None = None) -> str:
    if spec:
        try:
            return format(value, spec)
        except (TypeError, ValueError):
            try:
                return format(float(value), spec)
            except (TypeError, ValueError) as exc:
                raise Unrenderable(f"format spec {spec!r}: {exc}") from None
    if text is None:
        text = show(value)
    # '/' first: only a Fraction's text has one, and testing a value against Fraction (an abstract base class's
    # subclass) is slow
    needs_parentheses = text.startswith("-") or ("/" in text and isinstance(value, Fraction))
    return f"({text})" if in_expression and needs_parentheses else text


def render(template: str, values: Mapping[str, Any], styles: Styles = PLAIN) -> str:
    """The template with every field filled from `values`, each plain `{name}` written in its style."""
    pieces, tail = _rendering_plan(template)
    rendered = []
    for literal, field, grouped, prose, money in pieces:
        rendered.append(literal)
        value = field_value(field.expression, values)
        text = styles.show(field.variable, value, prose) if not field.spec else None
        if money and styles.cents and text is not None and _ONE_DECIMAL.fullmatch(text):
            text += "0"  # "$0.30", as people write money, not "$0.3"
        rendered.append(_format(value, field.spec, grouped, text))
    rendered.append(tail)
    return "".join(rendered)


# A fraction written after a division sign reads as two divisions ("80 / 3/10" is 80/3/10), so it is grouped.
_AFTER_DIVISION = re.compile(r"(?:/|÷|\bdivided by)\s*\$?$")


# Money: a "$" right before a field, or before the annotation whose result the field shows ("$<<2*0.15=0.3>>{cost}").
_MONEY_BEFORE = re.compile(r"\$\s?(?:<<[^<>]*>>)?$")
_ONE_DECIMAL = re.compile(r"-?\d+\.\d")
_SCALE_AFTER = re.compile(r"\s*(?:thousand|million|billion|trillion|k\b)", re.I)  # "$2.5 million" is no cents


@lru_cache(maxsize=PROBLEM_CACHE_SIZE)  # every mutant's solution renders its problem's few templates again
def _rendering_plan(template: str) -> tuple[tuple[tuple[str, Field, bool, bool, bool], ...], str]:
    """(literal text before it, the field, whether its value must be grouped: it sits in an annotation's
    expression or follows a division sign, whether it is prose: outside annotations and not written before a '%'
    of the template's own, whether it is money in prose: after a "$") for each field, and the literal text after the
    last."""
    spans = _annotation_expression_spans(template)
    annotations = [(slot.start, slot.end) for slot in _annotation_slots(template)]
    pieces, position = [], 0
    for field in fields(template):
        grouped = any(start <= field.start < end for start, end in spans) or bool(
            _AFTER_DIVISION.search(template[max(0, field.start - 16):field.start]))
        prose = not any(start <= field.start < end for start, end in annotations) \
            and not template.startswith("%", field.end)
        money = prose and bool(_MONEY_BEFORE.search(template[max(0, field.start - 200):field.start])) \
            and not _SCALE_AFTER.match(template, field.end)
        pieces.append((_literal(template[position:field.start]), field, grouped, prose, money))
        position = field.end
    return tuple(pieces), _literal(template[position:])


def _literal(text: str) -> str:
    return text.replace("{{", "{").replace("}}", "}")


# --- changing a step's template the way the code was changed ----------------------------------
Aliases = Callable[[str], frozenset[str]]


def itself(name: str) -> frozenset[str]:
    return frozenset((name,))


class TextChange:
    """How a mutation's solution differs from the correct one. Each kind of change is a subclass beside the
    mutation that makes it (flawforge.math.mutations), so a new error type is one file: the writer only asks
    these questions."""

    __slots__ = ()

    def rewrite(self, template: str, values: Mapping[str, Any], same: Aliases = itself) -> str:
        """The erroneous step's line template changed the way the code was; `same` gives the names a variable
        is also known by. Raises Unrenderable when the text cannot say what the code does."""
        return template

    def annotations(self, target: str, expression: ast.expr) -> tuple[Mapping[str, ast.expr], str | None]:
        """What the annotations are written from: the expressions that computed some variables in the flawed
        execution (`target` is now computed by `expression`), and the variable whose annotation must be false
        (None: every annotation is true)."""
        return {target: expression}, None

    @property
    def reported(self) -> str | None:
        """The variable the solution reports as its answer, stopping at the step that computes it (None: the
        solution goes on to the answer)."""
        return None

    def erroneous_line(self, site: Site) -> str:
        """The label of the line the candidate names as erroneous."""
        return site.assignment.step or site.program.step_of(site.target)

    def shown_line(self, site: Site) -> str:
        """The label of the line where the flaw shows in the solution."""
        return self.erroneous_line(site)


SIGNS = {"+": ("+",), "-": ("-", "−", "–"), "*": ("*", "x", "X", "×", "·"), "/": ("/", "÷")}
WORDS = {"+": ("plus",), "-": ("minus",), "*": ("times", "multiplied by"), "/": ("divided by",)}
# Ways a list of summed terms is joined in prose ("45, 30, 50 and 25").
LIST_JOINS = {"+": (",", "and"), "*": ()}
_EDGE = r"(?:^|(?<=[\s()$]))"
_AFTER = r"(?=[\s()$]|$)"
COMMUTATIVE = {"+", "*"}


@lru_cache(maxsize=None)
def operator_pattern(op: str, with_list_joins: bool = False) -> re.Pattern:
    signs = "|".join(re.escape(sign) for sign in SIGNS.get(op, ()))
    words = list(WORDS.get(op, ())) + (list(LIST_JOINS.get(op, ())) if with_list_joins else [])
    word_alternatives = "|".join(rf"\b{re.escape(word)}\b" if word[0].isalpha() else re.escape(word) for word in words)
    alternatives = [f"{_EDGE}(?P<sign>{signs}){_AFTER}"] if signs else []
    if word_alternatives:
        alternatives.append(f"(?P<word>{word_alternatives})")
    return re.compile("|".join(alternatives))


def joins_operands(between: str) -> bool:
    """Text between two fields that can be the operator joining them (not '=' or an annotation edge)."""
    return not any(mark in between for mark in ("=", "<<", ">>")) and len(between) <= 40


def literal_spans(template: str) -> list[tuple[int, int]]:
    spans, position = [], 0
    for field in fields(template):
        spans.append((position, field.start))
        position = field.end
    spans.append((position, len(template)))
    return spans


# An operator written next to an operand: before it ("x {a}", "+ ${a}", "(") or after it, past up to three unit
# words or rates ("{a} hours * 3", "${a}/book x 3", "{a} = ").
_OPERATOR_BEFORE = re.compile(r"(?:(?:^|(?<=[\s\d)}%]))[-+*/x×÷−–·X]|\bplus|\bminus|\btimes|\bby|[(=])\s*[$€£]?\s*$")
_OPERATOR_AFTER = re.compile(r"\s*%?\s*(?:/?[A-Za-z][A-Za-z'-]*\s*){0,3}?(?:[-+*/x×÷−–·X=)(](?=[\s\d$({(]|$)|plus\b|minus\b"
                             r"|times\b|multiplied\b|divided\b|equals\b)")
_LITERAL_NUMBER = re.compile(r"(?<![\w.{/])\d+(?:/\d+|\.\d+)?(?![\w}/]|\.\d)")


@lru_cache(maxsize=PROBLEM_CACHE_SIZE)
def operand_spans(template: str) -> tuple[tuple[int, int], ...]:
    """Where the template writes an operand of a calculation: every field and number in an annotation, and in the
    prose each field or literal number with an operator written beside it ("{a} x {b} =", "5 * 7"). The rest
    restates quantities ("Tobias played for {days} days")."""
    annotations = [(match.start(), match.end()) for match in _ANNOTATION_TEMPLATE.finditer(template)]
    candidates = [(field.start, field.end) for field in fields(template)]
    spans = literal_spans(template)
    candidates += [(match.start(), match.end()) for match in _LITERAL_NUMBER.finditer(template)
                   if any(start <= match.start() and match.end() <= end for start, end in spans)]
    found = []
    for start, end in sorted(candidates):
        inside = any(left <= start and end <= right for left, right in annotations)
        if inside or _OPERATOR_BEFORE.search(template, 0, start) or _OPERATOR_AFTER.match(template, end):
            found.append((start, end))
    return tuple(found)


def apply_edits(template: str, edits: list[tuple[int, int, str]]) -> str:
    ordered = sorted(edits)
    if any(end > start for (_, end, _), (start, _, _) in zip(ordered, ordered[1:])):
        raise Unrenderable("the text changes overlap")
    for start, end, text in reversed(ordered):
        template = template[:start] + text + template[end:]
    return template


# --- annotations rewritten from the code ------------------------------------------------------
def expression_template(expression: ast.expr) -> str:
    """A template for an annotation expression: the code with each variable as a field."""
    class ToTemplate(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.expr:
            return ast.Name(id="{" + node.id + "}", ctx=node.ctx)

        def visit_Call(self, node: ast.Call) -> ast.expr:
            if (isinstance(node.func, ast.Name) and node.func.id == "Fraction" and len(node.args) == 2
                    and not node.keywords):
                return ast.BinOp(left=self.visit(node.args[0]), op=ast.Div(), right=self.visit(node.args[1]))
            return self.generic_visit(node)

    converted = ToTemplate().visit(clone(expression))
    return ast.unparse(converted).replace(" ", "")


@dataclass(frozen=True)
class _AnnotationSlot:
    """An annotation in a template: where it is and which variable it shows as its value."""

    start: int
    end: int
    equals: int          # offset of its last '=' in the template
    result: str | None   # the `v` of `={v}>>`


@lru_cache(maxsize=PROBLEM_CACHE_SIZE)
def _annotation_slots(template: str) -> tuple[_AnnotationSlot, ...]:
    slots = []
    for match in _ANNOTATION_TEMPLATE.finditer(template):
        body = match.group(1)
        equals = body.rfind("=")
        if equals == -1:
            continue
        shown = fields(body[equals + 1:])
        slots.append(_AnnotationSlot(start=match.start(), end=match.end(), equals=match.start(1) + equals,
                                     result=shown[0].variable if len(shown) == 1 else None))
    return tuple(slots)



def _render_line(template: str, values: Mapping[str, Any], code: Mapping[str, ast.expr],
                 miscalculated: str | None, styles: Styles = PLAIN) -> str:
    """The line, with each annotation true, except the one showing `miscalculated` (false).

    An annotation that is not what it must be is rewritten from `code`; raises Unrenderable
    when that does not help either."""
    slots = _annotation_slots(template)
    line = render(template, values, styles)
    wanted = [miscalculated is None or slot.result != miscalculated for slot in slots]
    found = ANNOTATION.findall(line)
    if len(found) == len(slots) and all((check_annotation(body) is None) == want for body, want in zip(found, wanted)):
        return line
    edits = []
    for slot, want in zip(slots, wanted):
        original = template[slot.start:slot.end]
        if _annotation_is_true(original, values, styles) == want:
            continue
        if slot.result is None or slot.result not in code:
            raise Unrenderable(f"annotation {original!r} does not match the computation")
        rewritten = "<<" + expression_template(code[slot.result]) + template[slot.equals:slot.end]
        if _annotation_is_true(rewritten, values, styles) != want:
            raise Unrenderable(f"annotation {original!r} cannot be written from the code")
        edits.append((slot.start, slot.end, rewritten))
    return render(apply_edits(template, edits), values, styles)


def _annotation_is_true(annotation_template: str, values: Mapping[str, Any], styles: Styles) -> bool:
    found = ANNOTATION.findall(render(annotation_template, values, styles))
    return bool(found) and check_annotation(found[0]) is None


# --- whole solutions --------------------------------------------------------------------------
# Some templates wrap an annotation in braces ("${<<{a}*{b}={c}>>}{c}"), which is no field; some lost an
# annotation's opening to a brace ("${<{a}*{b}={c}>>{c}") or altogether ("=${a}/{b}={c}>>{c}"), which renders
# "$30/6=5>>5".
_BRACED_ANNOTATION = re.compile(r"(?<!\{)\{(<<[^<>]*>>)\}(?!\})")
_BRACE_FOR_OPENING = re.compile(r"\$\{<(?!<)")
_NO_OPENING = re.compile(r"(?<=\$)(?=\{[^<>$]*=\{[^{}<>]+\}>>)")


def step_templates(program: Program) -> list[tuple[str, str]]:
    return [(step["line_number"], _repaired(step["solution_line_template"])) for step in program.logical_steps
            if isinstance(step.get("line_number"), str) and isinstance(step.get("solution_line_template"), str)]


def _money_as_original(template: str, original: str | None) -> str:
    """The template with "$" before each annotation whose counterpart in the original line has one ("= $<<80-20=60>>60",
    where the template wrote "= <<80-20=60>>60"): the result is money as the original says."""
    if not original or "$<<" not in original:
        return template
    theirs = [match.start() for match in _ANNOTATION_TEMPLATE.finditer(original)]
    slots = _annotation_slots(template)
    if len(theirs) != len(slots):
        return template  # no telling which annotation is which
    return apply_edits(template, [(slot.start, slot.start, "$") for slot, at in zip(slots, theirs)
                                  if original[:at].endswith("$") and not template[:slot.start].endswith("$")])


_RESULT_BEFORE_ITS_CALCULATION = re.compile(r"(?<!\{)\{[^{}]*\}\$?<<")


def malformed_text(template: str, values: Mapping[str, Any] = MappingProxyType({})) -> str | None:
    """What a solution line's template (as repaired) would print that no solution writes, or None: a brace, an
    unpaired `<<` or `>>`, `$.` before anything but a whole number of cents from 10 to 99 (`$.0.25`, `$.5`; `$.{cents}`
    with 25 is how GSM8K writes money), a result written before its own calculation (`=$125$<<500*0.25=125>>125`).
    `values`: the template's variables as its run assigned them."""
    template = _repaired(template)
    # fields print their values, '{{' and '}}' a brace each: any brace left is one the solution prints
    printed = _FIELD_OR_ESCAPE.sub(lambda match: "" if match.group(1) is not None else match.group()[0], template)
    if "{" in printed or "}" in printed:
        return "a brace the solution would print"
    marks = re.findall(r"<<|>>", template)
    if len(marks) % 2 or any(mark != ("<<", ">>")[n % 2] for n, mark in enumerate(marks)):
        return "an unpaired << or >>"
    for field in fields(template):
        if template[:field.start].endswith("$.") and not _cents(field, values):
            return "'$.' before a value that prints its own decimals"
    if _RESULT_BEFORE_ITS_CALCULATION.search(template):
        return "a result written before its own calculation"
    return None


def _cents(field: Field, values: Mapping[str, Any]) -> bool:
    """The field prints a whole number of cents from 10 to 99 (what GSM8K writes after `$.`: `$.25`)."""
    try:
        value = field_value(field.expression, values)
    except Unrenderable:
        return False
    return (not field.spec and isinstance(value, (int, float, Fraction)) and not isinstance(value, bool)
            and value == int(value) and 10 <= value <= 99)


def _repaired(template: str) -> str:
    template = _BRACED_ANNOTATION.sub(r"\1", template)
    if ">>" in template:
        template = _NO_OPENING.sub("<<", _BRACE_FOR_OPENING.sub("$<<", template))
    return template


def code_of(program: Program) -> dict[str, ast.expr]:
    return {assignment.target: assignment.value for assignment in program.assignments}


class SolutionWriter:
    """Writes a problem's correct solution, then flawed ones.

    A flawed solution reuses each correct line whose template reads no value the flaw
    changed, so only the lines the flaw reaches are written again."""

    def __init__(self, program: Program, values: Mapping[str, Any], answer: Any,
                 source_lines: Mapping[str, str] | None = None, stated: Collection[Fraction] = ()):
        """`source_lines` are the original solution's lines by label ('L1', ...): the ones no
        step writes are kept as they are, so line labels mean the same in every solution.
        `stated`: numbers the question states, which a line may write whatever the flaw changed."""
        self.program = program
        self.values = values
        self.code = code_of(program)
        self.templates = [(number, _money_as_original(template, (source_lines or {}).get(number)))
                          for number, template in step_templates(program)]
        if not self.templates:
            raise Unrenderable("the template has no solution lines")
        self.template_of = dict(self.templates)  # by line label
        self.reads = {number: {name for field in fields(template) for name in field.names} & values.keys()
                      for number, template in self.templates}
        self.styles = Styles(values, "\n".join((source_lines or {}).values()))
        self.lines = {number: _render_line(template, values, self.code, None, self.styles)
                      for number, template in self.templates}
        self.order = [number for number, _ in self.templates]
        kept = _unwritten_lines(self.order, source_lines or {})
        for number, line in kept.items():
            self.lines[number] = line
            self.reads[number] = set()
        if kept:
            self.order = sorted(self.order + list(kept), key=lambda number: int(number[1:]))
        # Numbers written as text (a kept line, a template's own words) that state a computed value: a flaw that
        # changes the value rewrites them.
        self.restater = _Restater(values, program.input_names, stated, self.styles)
        self.written = {number: self.restater.mentions(kept[number] if number in kept else self.template_of[number],
                                                        literal_only=number not in kept)
                        for number in self.order}
        self.solution = self._join([self.lines[number] for number in self.order], answer)

    def write(self, values: Mapping[str, Any], answer: Any, *, step: str, change: TextChange, target: str,
              expression: ast.expr) -> str:
        """The solution for a flawed execution's `values`, in which `expression` computes `target`; `change`
        says how the text of `step` differs. A number written as text that states a value the flaw changed, from
        `step` on, is rewritten to the flawed value, or the solution is unrenderable."""
        overrides, miscalculated = change.annotations(target, expression)
        code = {**self.code, **overrides}
        order = self.order
        reported = change.reported
        if reported is not None:
            kept = _until(self.templates, self.program.step_of(reported), reported)
            order = order[:order.index(kept[-1][0]) + 1]
        elif step not in self.template_of:
            raise Unrenderable(f"no solution line for step {step}")
        changed = {name for name, value in values.items()
                   if name not in self.values or not identical(value, self.values[name])}
        lines = []
        reached = False
        for number in order:
            reached = reached or number == step
            template = self.template_of.get(number)
            restated = reached and bool(self.written[number] & changed)
            if number != step and not (self.reads[number] & changed) and not restated:
                lines.append(self.lines[number])
                continue
            if template is None:  # a line of the original solution, kept: only its numbers change
                lines.append(self.restater.rewrite(self.lines[number], values, changed, literal_only=False))
                continue
            if number == step:
                template = change.rewrite(template, values, self.program.aliases)
                if miscalculated is not None and miscalculated not in {
                        slot.result for slot in _annotation_slots(template)}:
                    raise Unrenderable(f"no annotation of step {step} shows {miscalculated}")
            if restated:
                template = self.restater.rewrite(template, values, changed, literal_only=True)
            lines.append(_render_line(template, values, code, miscalculated if number == step else None,
                                      self.styles))
        return self._join(lines, answer)

    @staticmethod
    def _join(lines: list[str], answer: Any) -> str:
        shown = show_answer(answer)
        if shown is None:
            raise Unrenderable(f"the final answer {show(answer)} has no exact decimal a student would write")
        return "\n".join(lines + [FINAL_ANSWER_PREFIX + shown])


class _Restater:
    """Finds the numbers a text writes out (digits or words, outside a template's fields) that state a
    computed value, and rewrites them for a flawed execution."""

    def __init__(self, values: Mapping[str, Any], inputs: Collection[str], stated: Collection[Fraction],
                 styles: Styles = PLAIN):
        self.styles = styles
        self.names: dict[Fraction, set[str]] = {}
        self.fixed: set[Fraction] = set(stated)  # what the question states, or an input holds, stays as written
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)) or value != value:
                continue
            try:
                exact = Fraction(value)
            except (OverflowError, ValueError):
                continue
            (self.fixed.add(exact) if name in inputs else self.names.setdefault(exact, set()).add(name))

    def _stated(self, number: Number) -> tuple[set[str], bool]:
        """The computed variables a written number may state, and whether it states them as a percentage."""
        if number.value in self.fixed:
            return set(), False
        if number.percent and number.value / 100 not in self.fixed and number.value / 100 in self.names:
            return self.names[number.value / 100], True
        return self.names.get(number.value, set()), False

    def _numbers(self, text: str, literal_only: bool) -> list[Number]:
        found = numbers_in(text)
        if not literal_only:
            return list(found)
        spans = literal_spans(text)
        return [n for n in found if any(start <= n.start and n.end <= end for start, end in spans)]

    def mentions(self, text: str, literal_only: bool) -> frozenset[str]:
        return frozenset(name for number in self._numbers(text, literal_only) for name in self._stated(number)[0])

    def rewrite(self, text: str, values: Mapping[str, Any], changed: Collection[str], literal_only: bool) -> str:
        edits = []
        for number in self._numbers(text, literal_only):
            names, percent = self._stated(number)
            if not names & set(changed):
                continue
            if not names <= set(changed):
                continue  # the number also states a value the flaw kept: it may stay
            # a number written as text is prose: a percentage stays one, a fraction is written as a decimal
            shown = {show(values[name] * 100) if percent else self.styles.show(name, values[name], prose=False)
                     for name in names if name in values}
            if len(shown) != 1:
                raise Unrenderable(f"{number.text!r} states values the flaw changed differently")
            edits.append((number.start, number.end, shown.pop()))
        return apply_edits(text, edits)


_STEP_LABEL = re.compile(r"L[1-9]\d*")


def _unwritten_lines(step_numbers: list[str], source_lines: Mapping[str, str]) -> dict[str, str]:
    """The original lines no step writes, when every label is 'L<k>' (else none: no common numbering)."""
    labels = list(step_numbers) + list(source_lines)
    if not all(_STEP_LABEL.fullmatch(label) for label in labels):
        return {}
    return {number: line for number, line in source_lines.items() if number not in step_numbers}


def _until(templates: list[tuple[str, str]], step: str, variable: str) -> list[tuple[str, str]]:
    numbers = [number for number, _ in templates]
    if step not in numbers:
        raise Unrenderable(f"{variable} is not computed in a solution line")
    kept = templates[:numbers.index(step) + 1]
    if not any(field.variable == variable for _, template in kept for field in fields(template)):
        raise Unrenderable(f"the solution never shows {variable}")
    return kept


def final_answer_line(solution: str) -> str:
    """The text after '#### ' on the last line."""
    last = solution.rstrip().splitlines()[-1]
    if not last.startswith(FINAL_ANSWER_PREFIX):
        raise ValueError("the solution does not end with '#### <answer>'")
    return last[len(FINAL_ANSWER_PREFIX):]
