"""Flawed solutions for one problem: from its template to review-ready candidates.

1. The correct template runs once in the sandbox, traced; that trace gives every value the
   mutations need (no prefix of the program is re-executed).
2. Every registered mutation of the requested families proposes its edits at every site.
3. A straight-line template (all but a handful) whose sandboxed trace the arithmetic
   interpreter reproduces exactly (every value, its type, its place) has its mutants
   executed by that interpreter: from the mutated assignment on, each assignment is
   evaluated again. The interpreter runs nothing but arithmetic on numbers (see
   flawforge.math.arithmetic), so these mutants need no process of their own; the test suite
   runs every candidate of the shared corpus in the sandbox and gets the same traces.
   Other templates run all their mutants in one sandbox batch.
4. Mutants whose text cannot say what they computed are dropped; near-duplicates (same type,
   line and flawed answer) are merged; the caps select the candidates.

A bad template never raises: it becomes a Reject naming the reason.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, Mapping, NamedTuple, Protocol

from flawforge.math.arithmetic import UnsafeExpression, is_number
from flawforge.math.display import show
from flawforge.math.gsm8k import numbered_lines
from flawforge.math.mutations import Edit, Mutation, mutations_of
from flawforge.math.mutations.realism import Flawed, Refusal, Story, unrealistic
from flawforge.math.proofread import Verdict, check_correct, check_flawed, question_numbers, solution_lines
from flawforge.math.program import BoundProgram, Prediction, Program, Site, TemplateError
from flawforge.math.ranking import Ranker, features, names_read, shipped_ranker, world_knowledge_names
from flawforge.math.reconstruct import SolutionWriter, Unrenderable
from flawforge.math.selection import DEFAULT_CAPS, Caps, Choice, Plausibility, ValueRule, choice_key, select, \
    stable_hash
from flawforge.math.type_mix import shipped_type_mix
from flawforge.proto.math import Candidate, ProblemTemplate, Reject
from flawforge.proto.sandbox import ExecutionResult
from flawforge.proto.values import TraceStep, TypedValue

FAMILIES = ("computational", "conceptual")
# json.dumps(..., sort_keys=True), without building an encoder on every call (it does, given any option)
SORTED_JSON = json.JSONEncoder(sort_keys=True)


class TraceExecutor(Protocol):
    """What generation needs from the sandbox (flawforge.sandbox.Sandbox)."""

    def trace_call(self, source: str, func: str = "solve") -> ExecutionResult: ...

    def trace_batch(self, original: str, variants: list[str], func: str = "solve") -> list[ExecutionResult]: ...


@dataclass
class ProblemOutput:
    candidates: list[Candidate] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)


def catalog_order(candidate: Candidate) -> tuple:
    """A candidate's place among its problem's candidates in the math-errors catalog (candidates.jsonl)."""
    return candidate.family, candidate.error_type, candidate.target_variable, candidate.id


_UNEVALUATED = object()


# Not frozen: one is made for every mutant, and a frozen dataclass's __init__ costs three times as much.
@dataclass
class _Mutant:
    mutation: Mutation
    site: Site
    edit: Edit
    value: Any = _UNEVALUATED  # the site's new value, where the arithmetic interpreter could compute it alone

    @property
    def line(self) -> str:
        return self.edit.text.erroneous_line(self.site)

    @cached_property
    def code(self) -> str:
        """The template's code with this mutation (built only for mutants that run)."""
        return self.site.program.with_value(self.site.assignment, self.edit.expression)

    @cached_property
    def key(self) -> str:
        """A stable identity: where the mutation applies and how."""
        return choice_key(self.site.assignment.position, self.mutation.name, self.edit.params)


class _Outcome(NamedTuple):
    """A mutant's flawed execution: run in the sandbox, or evaluated by the arithmetic interpreter (a tuple:
    one is made for every mutant)."""

    values: dict[str, Any]
    answer: Any
    result: ExecutionResult | None = None
    prediction: Prediction | None = None

    def trace(self, bound: BoundProgram) -> list[TraceStep]:
        return self.result.trace if self.result is not None else bound.trace_of(self.prediction)


@dataclass(frozen=True)
class _Flawed:
    mutant: _Mutant
    outcome: _Outcome
    solution: str


def generate_for_problem(template: ProblemTemplate, sandbox: TraceExecutor, families: list[str], seed: int,
                         caps: Caps = DEFAULT_CAPS, with_traces: bool = False) -> ProblemOutput:
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown error families {unknown}; expected some of {list(FAMILIES)}")

    def rejected(reason: str, detail: str) -> ProblemOutput:
        return ProblemOutput(rejects=[_reject(template, reason, detail)])

    try:
        program = Program.parse(template.code, template.logical_steps)
    except TemplateError as exc:
        return rejected("invalid_template", str(exc))
    correct = sandbox.trace_call(template.code, func="solve")
    if correct.outcome != "ok" or correct.return_value is None:
        return rejected("not_executable", _failure(correct))
    correct_answer = correct.return_value.to_python()
    if not is_number(correct_answer):
        return rejected("answer_not_a_number", f"solve() returned {correct.return_value.type}")
    bound = BoundProgram.bind(program, correct.trace, correct_answer)
    try:
        original_lines = {label: line for label, line in numbered_lines(template.gsm8k_answer).items() if label != "FA"}
        stated = question_numbers(template.question)
        writer = SolutionWriter(program, bound.final_values, correct_answer, original_lines, stated)
    except Unrenderable as exc:
        return rejected("template_not_renderable", str(exc))
    proofread = check_correct(writer.solution)
    if not proofread.ok:  # the correct text already states something false: no flaw can be told in it
        return rejected("template_text_false", proofread.reason())

    mutants = list(_mutants(bound, families))
    dropped: Counter = Counter()
    reader = _Reader(bound.final_values, stated, writer.solution)

    def tell(group: list[tuple[_Mutant, _Outcome]]) -> _Flawed | None:
        return _tell(writer, reader, group, dropped)

    if not mutants:
        outcomes = []
    elif bound.predictable:
        outcomes = [(m, _predict(bound, m)) for m in mutants]
    else:
        results = sandbox.trace_batch(template.code, [m.code for m in mutants], func="solve")[1:]
        outcomes = [(m, _ran(r)) for m, r in zip(mutants, results)]
    story = Story.of([*stated, *bound.final_values.values()])
    refused: list[tuple[_Mutant, Refusal]] = []
    groups = _plausible(bound, outcomes, dropped, story, refused)
    ranker = shipped_ranker()
    place = _Places(program, writer.order)
    selected = select([_choice(g, ranker, bound, place) for g in groups], caps, seed, accept=tell,
                      quotas=shipped_type_mix().draw(seed, caps))

    output = ProblemOutput(candidates=[_candidate(template, correct, bound, writer.solution, f, seed, with_traces)
                                       for f in selected])
    output.rejects += [_reject(template, f"text_{verdict.findings[0].kind}",
                               f"{mutant.mutation.name} at {mutant.line} ({mutant.key}): {verdict.reason()}")
                       for mutant, verdict in reader.failed]
    output.rejects += _refusals(template, refused)
    for family in families:
        if not any(c.family == family for c in output.candidates):
            proposed = sum(m.mutation.family == family for m in mutants)
            reasons = ", ".join(f"{reason}: {count}" for (fam, reason), count in sorted(dropped.items())
                                if fam == family)
            output.rejects.append(_reject(
                template, "no_plausible_mutation" if proposed else "no_applicable_mutation",
                f"{family}: {proposed} mutants" + (f" ({reasons})" if reasons else "")))
    return output


def _mutants(bound: BoundProgram, families: Iterable[str]) -> Iterable[_Mutant]:
    """Every edit of every mutation at every site, but those whose own new value is already implausible."""
    mutations = mutations_of(families)
    for site in bound.sites:
        rule = None
        for mutation in mutations:
            for edit in mutation.edits(site):
                try:
                    value = edit.value_in(site.scope)
                except UnsafeExpression:  # decided with the whole execution
                    yield _Mutant(mutation=mutation, site=site, edit=edit)
                    continue
                if rule is None:
                    rule = ValueRule.of(site.value)
                if value != site.value and rule.violation(value) is None:
                    yield _Mutant(mutation=mutation, site=site, edit=edit, value=value)


def _predict(bound: BoundProgram, mutant: _Mutant) -> _Outcome | None:
    if mutant.value is _UNEVALUATED:
        return None  # the interpreter could not compute the site's new value (e.g. a division by zero)
    try:
        prediction = bound.predict(mutant.site, mutant.value)
    except UnsafeExpression:
        return None  # the mutant would fail (e.g. divide by zero)
    return _Outcome(values=prediction.values, answer=prediction.answer, prediction=prediction)


def _ran(result: ExecutionResult) -> _Outcome | None:
    if result.outcome != "ok" or result.return_value is None:
        return None
    return _Outcome(values=result.final_values(), answer=result.return_value.to_python(), result=result)


Group = list[tuple[_Mutant, _Outcome]]


def _plausible(bound: BoundProgram, outcomes: list[tuple[_Mutant, _Outcome | None]], dropped: Counter, story: Story,
               refused: list[tuple[_Mutant, Refusal]]) -> list[Group]:
    """The mutants whose flawed execution is plausible, in groups: mutants with the same error type,
    line and flawed answer form one (the same mistake to a reviewer), most plausible first. Adds each mutant a
    realism rule refuses to `refused`."""
    groups: dict[Any, Group] = {}
    plausibility = Plausibility(bound.final_values, bound.answer)
    for mutant, outcome in outcomes:
        if outcome is None:
            dropped[(mutant.mutation.family, "not_executable")] += 1
            continue
        reason = plausibility.violation(outcome.values, outcome.answer)
        if reason is None:
            refusal = _unrealistic(mutant, outcome, bound, story)
            if refusal is not None:
                refused.append((mutant, refusal))
                reason = refusal.rule
        if reason:
            dropped[(mutant.mutation.family, reason)] += 1
            continue
        key = (mutant.mutation.name, mutant.line, show(outcome.answer))
        groups.setdefault(key, []).append((mutant, outcome))
    for group in groups.values():
        if len(group) > 1:  # most groups have one member, and a sort key is a JSON text
            group.sort(key=lambda pair: (-pair[0].edit.prior, pair[0].key))
    return list(groups.values())


class _Reader:
    """Reads every flawed solution before it is kept (flawforge.math.proofread) and remembers the failures."""

    def __init__(self, correct: Mapping[str, Any], question: frozenset, correct_solution: str):
        self.correct = correct
        self.question = question
        self.known_true = frozenset(solution_lines(correct_solution))  # read (and found true) before any mutant
        self.failed: list[tuple[_Mutant, Verdict]] = []

    def passes(self, mutant: _Mutant, outcome: _Outcome, solution: str) -> bool:
        verdict = check_flawed(solution, family=mutant.mutation.family, erroneous_line=mutant.line,
                               correct=self.correct, flawed=outcome.values, keep=self.question,
                               known_true=self.known_true)
        if not verdict.ok:
            self.failed.append((mutant, verdict))
        return verdict.ok


def _unrealistic(mutant: _Mutant, outcome: _Outcome, bound: BoundProgram, story: Story) -> Refusal | None:
    edit = mutant.edit
    expression, renamed = edit.read_as()
    return unrealistic(Flawed(site=mutant.site, error_type=mutant.mutation.name, expression=expression,
                              values=outcome.values, answer=outcome.answer, correct_answer=bound.answer,
                              renamed=renamed, params=edit.params, story=story))


REFUSALS_SHOWN = 8  # a rule's reject names this many distinct refusals of a problem, then counts the rest


def _refusals(template: ProblemTemplate, refused: list[tuple[_Mutant, Refusal]]) -> list[Reject]:
    """A reject for each realism rule that refused mutants of the problem: how many, and what they were."""
    by_rule: dict[str, list[str]] = {}
    for mutant, refusal in refused:
        by_rule.setdefault(refusal.rule, []).append(f"{mutant.mutation.name} at {mutant.line}: {refusal.what}")
    rejects = []
    for rule, refusals in sorted(by_rule.items()):
        distinct = list(dict.fromkeys(refusals))
        more = len(distinct) - REFUSALS_SHOWN
        rejects.append(_reject(template, f"unrealistic_{rule}", f"{len(refusals)} mutants: "
                               + "; ".join(distinct[:REFUSALS_SHOWN]) + (f"; and {more} more" if more > 0 else "")))
    return rejects


def _tell(writer: SolutionWriter, reader: _Reader, group: Group, dropped: Counter) -> _Flawed | None:
    """The first mutant of the group whose solution text can say what it computed, and says it truly."""
    for mutant, outcome in group:
        try:
            solution = writer.write(outcome.values, outcome.answer, step=mutant.line, change=mutant.edit.text,
                                    target=mutant.site.target, expression=mutant.edit.expression)
        except Unrenderable:
            dropped[(mutant.mutation.family, "unrenderable")] += 1
            continue
        if not reader.passes(mutant, outcome, solution):
            dropped[(mutant.mutation.family, "text_check")] += 1
            continue
        return _Flawed(mutant=mutant, outcome=outcome, solution=solution)
    return None


class _Places:
    """Where a mutant's error sits in the solution, 0 to 1 (a reported intermediate: where the solution stops),
    and which of the template's variables are world knowledge."""

    def __init__(self, program: Program, order: list[str]):
        self.index = {label: position for position, label in enumerate(order, start=1)}
        self.steps = max(1, len(order))
        self.world_knowledge = world_knowledge_names(program.source)

    def of(self, mutant: _Mutant) -> float:
        line = mutant.edit.text.shown_line(mutant.site)
        return min(1.0, self.index.get(line, self.steps) / self.steps)


def _choice(group: Group, ranker: Ranker, bound: BoundProgram, place: _Places) -> Choice[Group]:
    mutant, outcome = group[0]
    score = None
    if mutant.mutation.family == "conceptual":  # the human review judged conceptual errors only
        edit = mutant.edit
        reads = names_read(*edit.read_as())
        score = ranker.score(features(error_type=mutant.mutation.name, correct_answer=bound.answer,
                                      flawed_answer=outcome.answer, correct_value=mutant.site.value,
                                      flawed_value=outcome.values.get(mutant.site.target),
                                      position=place.of(mutant), params=edit.params,
                                      reads=reads, world_knowledge=place.world_knowledge))
    return Choice(family=mutant.mutation.family, error_type=mutant.mutation.name, line=mutant.line,
                  prior=mutant.edit.prior, key=mutant.key, item=group, score=score)


def _candidate(template: ProblemTemplate, correct: ExecutionResult, bound: BoundProgram, original_solution: str,
               flawed: _Flawed, seed: int, with_traces: bool) -> Candidate:
    mutant = flawed.mutant
    target = mutant.site.target
    fields = dict(
        problem_index=template.problem_index, tier=template.tier, template_model=template.template_model,
        family=mutant.mutation.family, error_type=mutant.mutation.name, target_variable=target,
        erroneous_line_number=mutant.line,
        correct_value=TypedValue.of(mutant.site.value),
        flawed_value=TypedValue.of(flawed.outcome.values.get(target)),
        correct_final_answer=correct.return_value, flawed_final_answer=TypedValue.of(flawed.outcome.answer),
        mutated_code=mutant.code, correct_trace=correct.trace if with_traces else None,
        flawed_trace=flawed.outcome.trace(bound) if with_traces else None,
        original_solution=original_solution, flawed_solution=flawed.solution,
        explanation=mutant.mutation.explain(mutant.site, mutant.edit),
        mutation={"name": mutant.mutation.name, **mutant.edit.params}, seed=seed,
    )
    identity = SORTED_JSON.encode({k: fields[k] for k in ("problem_index", "tier", "template_model", "error_type",
                                                          "target_variable", "erroneous_line_number", "mutated_code",
                                                          "flawed_solution")})
    return Candidate(id=stable_hash(identity)[:32], **fields)


def _reject(template: ProblemTemplate, reason: str, detail: str) -> Reject:
    return Reject(problem_index=template.problem_index, tier=template.tier, template_model=template.template_model,
                  reason=reason, detail=detail)


def _failure(result: ExecutionResult) -> str:
    error = result.error
    where = f" at line {error.line}" if error is not None and error.line else ""
    what = f"{error.type}: {error.message}" if error is not None else (result.detail or "no return value")
    return f"{result.outcome}{where}: {what}"
