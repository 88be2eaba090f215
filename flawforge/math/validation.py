"""Validation of a formalization template against its GSM8K problem.

A template is usable when its code runs in the sandbox, returns GSM8K's final answer, and
every logical step names a variable the code assigns and only placeholders it can fill.
Beside that verdict, the structural and semantic scores are computed exactly as the
original project's validation report did, quirks included, so the two can be compared:
its trace ran only the top-level assignments of solve(), with nothing but `Fraction` in
scope, and printed fractions as written (Fraction(20, 100) -> '20/100').
"""
from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from flawforge.math.arithmetic import FUNCTIONS, Evaluator, UnsafeExpression
from flawforge.math.gsm8k import final_answer_value, solution_lines
from flawforge.math.program import expression_nodes
from flawforge.math.reconstruct import malformed_text
from flawforge.math.tiers import tier_of
from flawforge.proto.math import TemplateValidation
from flawforge.proto.values import TypedValue

# The original project's placeholder pattern, used for its scores.
_SCORE_PLACEHOLDER = re.compile(r"\{([a-zA-Z0-9_]+)\}")
# For the consistency check every innermost {...} group is a placeholder.
_BRACE_GROUP = re.compile(r"\{([^{}]*)\}")
_LINE_NUMBER = re.compile(r"^L[1-9]\d*$")
_SHOWN_PREFIX = "__flawforge_shown_"

ANSWER_REL_TOL = 1e-9
ANSWER_ABS_TOL = 1e-6


# --- the original project's scores ------------------------------------------------------------
@lru_cache(maxsize=65536)  # scoring compares the same few numbers' texts over and over
def normalize_number_text(text: str) -> str:
    """Canonical text of a number ('$1,200.0' -> '1200', '.5' -> '0.5'); other text unchanged."""
    cleaned = re.sub(r"[$,]", "", str(text).strip())
    if cleaned.startswith("."):
        cleaned = "0" + cleaned
    elif cleaned[:2] in ("-.", "+."):
        cleaned = cleaned[0] + "0" + cleaned[1:]
    try:
        number = float(cleaned)
    except ValueError:
        return cleaned
    return str(int(number)) if number.is_integer() else str(number)


def _fragments(template: str) -> list[str]:
    return _SCORE_PLACEHOLDER.split(template)[::2]


def _line_and_template(step: dict, original_lines: dict[str, str]) -> tuple[str, str | None]:
    """The GSM8K line a step stands for and its template (None when not text: the original crashed there)."""
    line_number, template = step.get("line_number"), step.get("solution_line_template", "")
    line = original_lines.get(line_number, "") if isinstance(line_number, str) else ""
    return line, template if isinstance(template, str) else None


def structural_check(steps: list[dict], original_lines: dict[str, str]) -> tuple[float, list[str]]:
    """Share of steps whose literal text (between placeholders) appears, in order, in their GSM8K line."""
    mismatches = []
    for step in steps:
        line, template = _line_and_template(step, original_lines)
        label = step.get("line_number") if isinstance(step.get("line_number"), str) else repr(step.get("line_number"))
        if template is None:
            mismatches.append(label)
            continue
        position = 0
        for fragment in _fragments(template):
            found = line.find(fragment, position)
            if found == -1:
                mismatches.append(label)
                break
            position = found + len(fragment)
    score = (len(steps) - len(mismatches)) / len(steps) if steps else 1.0
    return score, mismatches


def semantic_check(steps: list[dict], shown: dict[str, str], original_lines: dict[str, str]) -> tuple[float, list[str]]:
    """Share of placeholders whose value, as text, equals the number at that place in the GSM8K line.

    `shown` maps each variable to its value's text (absent when unassigned or None).
    """
    total, mismatches = 0, []
    for step in steps:
        line, template = _line_and_template(step, original_lines)
        if template is None:
            continue
        fragments = _fragments(template)
        position = 0
        for number, name in enumerate(_SCORE_PLACEHOLDER.findall(template)):
            total += 1
            before, after = fragments[number], fragments[number + 1]
            # As the original: a missing fragment (find == -1) is not special-cased.
            start = line.find(before, position) + len(before)
            end = line.find(after, start) if after else len(line)
            value = shown.get(name)
            if value is None or normalize_number_text(line[start:end]) != normalize_number_text(value):
                mismatches.append(name)
            position = end
    score = (total - len(mismatches)) / total if total else 1.0
    return score, mismatches


def original_answer_status(outcome_ok: bool, returned: Any, expected: float) -> str:
    """The original project's exact answer check (integer-valued floats compare as ints)."""
    if not outcome_ok:
        return "fail_not_executable"
    if isinstance(returned, float) and returned.is_integer():
        returned = int(returned)
    return "pass" if returned == (int(expected) if expected.is_integer() else expected) else "fail_wrong_answer"


# Imports Fraction by name (not the fractions module), so the sandbox can batch it with the template.
_FRACTION_AS_WRITTEN = '''
from fractions import Fraction as __flawforge_Fraction


class Fraction(__flawforge_Fraction):
    def __new__(cls, numerator=0, denominator=None):
        self = super().__new__(cls, numerator, denominator)
        self.written = self.as_integer_ratio() if denominator is None else (numerator, denominator)
        return self

    def __str__(self):
        return "%s/%s" % self.written


def __flawforge_shown(value):
    return None if value is None else str(value)
'''


def scored_names(solve: ast.FunctionDef) -> list[str]:
    """The variables the original trace shows, in the order of their marked names."""
    return list(dict.fromkeys(node.id for statement in solve.body if isinstance(statement, ast.Assign)
                              for target in statement.targets for node in expression_nodes(target)
                              if isinstance(node, ast.Name)))


def original_trace_program(solve: ast.FunctionDef) -> str:
    """Source whose solve() replays the original trace and assigns each variable's text to a marked name
    (the names of scored_names, in order)."""
    lines = [ast.unparse(statement) for statement in solve.body if isinstance(statement, ast.Assign)]  # one line each
    lines += [f"{_SHOWN_PREFIX}{number} = __flawforge_shown({name})" for number, name in enumerate(scored_names(solve))]
    return _FRACTION_AS_WRITTEN + "\n\ndef solve():\n" + "".join(f"    {line}\n" for line in lines + ["pass"])


def _fraction_as_written() -> type:
    """The scoring program's Fraction class, here: defined by the very source the sandbox runs."""
    namespace: dict[str, Any] = {}
    exec(compile(_FRACTION_AS_WRITTEN, "<fraction as written>", "exec"), namespace)  # our own source
    return namespace["Fraction"]


class _ReplayEvaluator(Evaluator):
    # What the scoring program's solve() can call: builtins and the as-written Fraction, no `math`.
    functions = {**{name: FUNCTIONS[name] for name in ("int", "float", "round", "abs", "min", "max")},
                 "Fraction": _fraction_as_written()}


def replayed_texts(solve: ast.FunctionDef) -> dict[str, str] | None:
    """What the scoring program would show for each variable, worked out here where the arithmetic
    interpreter replays it exactly: every top-level assignment binds one name to plain arithmetic over
    names assigned before it, and no name shadows a function it calls. None where only the sandboxed
    scoring program can tell (it is then run)."""
    assignments = [statement for statement in solve.body if isinstance(statement, ast.Assign)]
    if not all(len(a.targets) == 1 and isinstance(a.targets[0], ast.Name) for a in assignments):
        return None
    if {a.targets[0].id for a in assignments} & (set(_ReplayEvaluator.functions) | {"math"}):
        return None
    values: dict[str, Any] = {}
    evaluator = _ReplayEvaluator(values)
    try:
        for assignment in assignments:
            values[assignment.targets[0].id] = evaluator.evaluate(assignment.value)
        return {name: str(value) for name, value in values.items()}
    except (UnsafeExpression, ValueError):  # a failure is the scoring program's to report
        return None


# --- consistency of logical steps with the code ---------------------------------------------
def step_problems(steps: list[dict], assigned: set[str]) -> list[str]:
    """What is wrong with the logical steps, given the variables the code assigns; empty when consistent."""
    problems = []
    seen_lines: set[str] = set()
    for position, step in enumerate(steps, start=1):
        line = step.get("line_number")
        where = f"step {position} ({line})" if isinstance(line, str) else f"step {position}"
        if not isinstance(line, str) or not _LINE_NUMBER.match(line):
            problems.append(f"{where}: line_number must look like 'L<k>'")
        elif line in seen_lines:
            problems.append(f"{where}: line_number repeated")
        else:
            seen_lines.add(line)
        output = step.get("output_variable")
        if not isinstance(output, str) or output not in assigned:
            problems.append(f"{where}: output_variable {output!r} is not assigned by solve()")
        template = step.get("solution_line_template")
        if not isinstance(template, str):
            problems.append(f"{where}: solution_line_template must be text")
            continue
        for placeholder in _BRACE_GROUP.findall(template):
            if placeholder not in assigned:
                problems.append(f"{where}: placeholder {{{placeholder}}} is not a variable of solve()")
    return problems


def answers_match(returned: TypedValue, expected: float) -> bool:
    if returned.type not in ("int", "float", "fraction"):
        return False
    return math.isclose(float(returned.to_python()), expected, rel_tol=ANSWER_REL_TOL, abs_tol=ANSWER_ABS_TOL)


def find_solve(code: str) -> ast.FunctionDef:
    """The template's solve() definition; raises ValueError naming what is wrong."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise ValueError(f"code does not parse: {exc.msg}" + (f" (line {exc.lineno})" if exc.lineno else "")) from None
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        raise ValueError(f"code does not parse: {type(exc).__name__}: {exc}") from None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "solve":
            if node.args.args or node.args.posonlyargs or node.args.kwonlyargs:
                raise ValueError("solve() must take no arguments")
            return node
    raise ValueError("code defines no solve() function")


# --- the verdict ---------------------------------------------------------------------------
def validate_template(*, problem_index: int, template_model: str, gsm8k_answer: str, code: str,
                      logical_steps: list[dict], sandbox) -> TemplateValidation:
    """Checks one template in the sandbox; never raises for a bad template (the verdict says why)."""
    check = start_validation(problem_index=problem_index, template_model=template_model, gsm8k_answer=gsm8k_answer,
                             code=code, logical_steps=logical_steps)
    if isinstance(check, TemplateValidation):
        return check
    return check.finish(sandbox.trace_batch(check.programs[0], check.programs[1:], func="solve"))[0]


@dataclass
class PendingValidation:
    """A template's validation waiting for its sandbox runs: traced runs of solve() in `programs` (the template,
    then the original project's scoring program when it would score semantics). Split off so that many
    templates' programs can share one sandbox batch."""

    verdict: dict
    logical_steps: list[dict]
    expected: float
    original_lines: dict[str, str]
    scored_names: list[str]
    programs: list[str]
    shown: dict[str, str] | None = None  # the scoring texts, when replayed here instead of in `programs`

    def finish(self, results: list) -> tuple[TemplateValidation, Any]:
        """The verdict and the template's run, from the results of `programs`, in order."""
        verdict = dict(self.verdict)
        run = results[0]
        shown = self.shown
        if shown is None and len(results) > 1 and results[1].outcome == "ok":
            texts = {step.name: step.value.to_python() for step in results[1].trace}
            shown = {name: texts[f"{_SHOWN_PREFIX}{number}"] for number, name in enumerate(self.scored_names)
                     if texts.get(f"{_SHOWN_PREFIX}{number}") is not None}
        if shown is not None:
            verdict["semantic_score"], verdict["semantic_mismatches"] = semantic_check(
                self.logical_steps, shown, self.original_lines)

        ran = run.outcome == "ok"
        returned = run.return_value or TypedValue.of(None)
        verdict["answer_check_status"] = original_answer_status(ran, returned.to_python(), self.expected)
        if not ran:
            why = f"{run.error.type}: {run.error.message}" if run.error else run.detail
            return TemplateValidation(**verdict, valid=False, reason="not_executable",
                                      detail=f"{run.outcome}: {why}" if why else run.outcome), run
        if not answers_match(returned, self.expected):
            return TemplateValidation(**verdict, valid=False, reason="answer_mismatch",
                                      detail=f"solve() returned {returned.to_python()!r}, "
                                             f"GSM8K's answer is {self.expected:g}"), run
        problems = step_problems(self.logical_steps, {step.name for step in run.trace})
        if problems:
            return TemplateValidation(**verdict, valid=False, reason="inconsistent_steps",
                                      detail="; ".join(problems)), run
        values = {step.name: step.value.to_python() for step in run.trace}
        malformed = [f"{step.get('line_number')}: {why}" for step in self.logical_steps
                     if isinstance(step.get("solution_line_template"), str)
                     and (why := malformed_text(step["solution_line_template"], values))]
        if malformed:  # its text would print what no solution writes: the next model's template is tried
            return TemplateValidation(**verdict, valid=False, reason="malformed_text",
                                      detail="; ".join(malformed)), run
        return TemplateValidation(**verdict, valid=True), run


def start_validation(*, problem_index: int, template_model: str, gsm8k_answer: str, code: str,
                     logical_steps: list[dict]) -> TemplateValidation | PendingValidation:
    """The verdict, when it needs no sandbox run; otherwise the validation waiting for its runs."""
    tier = tier_of(gsm8k_answer)
    verdict = dict(problem_index=problem_index, tier=tier, template_model=template_model)
    expected = final_answer_value(gsm8k_answer)
    if expected is None:
        return TemplateValidation(**verdict, valid=False, reason="invalid_gsm8k_answer",
                                  detail="GSM8K's final answer is not a number")
    try:
        solve = find_solve(code)
    except ValueError as exc:
        return TemplateValidation(**verdict, valid=False, reason="invalid_template", detail=str(exc))

    original_lines = solution_lines(gsm8k_answer)
    structural_score, structural_mismatches = structural_check(logical_steps, original_lines)
    verdict.update(structural_score=structural_score, structural_mismatches=structural_mismatches)
    names = scored_names(solve)
    # The original scored semantics only for a perfect structure and a non-empty trace.
    scored = structural_score == 1.0 and bool(names)
    shown = replayed_texts(solve) if scored else None
    return PendingValidation(verdict=verdict, logical_steps=logical_steps, expected=expected,
                             original_lines=original_lines, scored_names=names, shown=shown,
                             programs=[code, original_trace_program(solve)] if scored and shown is None else [code])
