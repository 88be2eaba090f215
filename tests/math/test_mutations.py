"""Error types: registration, applicability rules and edits on a traced program, and on the whole corpus."""
from __future__ import annotations

import ast
from collections import Counter
from fractions import Fraction

import pytest

from flawforge.math.arithmetic import evaluate, is_int_like
from flawforge.math.mutations import REGISTRY, Mutation, mutations_of
from flawforge.math.program import BoundProgram, Program
from flawforge.math.selection import DEFAULT_CAPS
from flawforge.proto.math import COMPUTATIONAL_TYPES, CONCEPTUAL_TYPES

from tests.math.mutation_corpus import all_templates, corpus_outputs, key_of

PROGRAM = '''from fractions import Fraction

def solve():
    """Every kind of value and operation the error types look at."""
    # L1
    a = 12
    b = 5
    c = a + b
    # L2
    d = c * 10
    # L3
    e = d / 4
    # L4
    f = Fraction(3, 4)
    g = f * d
    # L5
    h = a + b + c
    # FA
    answer = g + h
    return answer
'''
STEPS = [{"line_number": f"L{k}", "question_inputs": [], "WK_inputs": [], "output_variable": v,
          "solution_line_template": "{" + v + "}"} for k, v in enumerate("cdegh", start=1)]


@pytest.fixture(scope="module")
def bound(sandbox) -> BoundProgram:
    program = Program.parse(PROGRAM, STEPS)
    result = sandbox.trace_call(PROGRAM, "solve")
    assert result.outcome == "ok"
    return BoundProgram.bind(program, result.trace, result.return_value.to_python())


def site(bound: BoundProgram, target: str):
    return next(s for s in bound.sites if s.target == target)


def new_values(bound: BoundProgram, mutation: str, target: str) -> list:
    """The values the target takes under each of the mutation's edits at its site."""
    at = site(bound, target)
    return [evaluate(edit.expression, at.scope) for edit in REGISTRY[mutation].edits(at)]


def test_registry_holds_exactly_the_issue_error_types():
    assert sorted(REGISTRY) == sorted(COMPUTATIONAL_TYPES + CONCEPTUAL_TYPES)
    assert {m.name for m in mutations_of(["computational"])} == set(COMPUTATIONAL_TYPES)
    assert {m.name for m in mutations_of(["conceptual"])} == set(CONCEPTUAL_TYPES)
    assert all(m.explanation and m.family in ("computational", "conceptual") for m in REGISTRY.values())


def test_adding_an_error_type_is_adding_a_class(bound):
    class DoubledValue(Mutation):
        name = "doubled_value_for_this_test"
        family = "computational"
        explanation = "{target} doubled"

        def applies(self, site):
            return isinstance(site.value, int) and not site.assignment.is_input

        def modify(self, site):
            from flawforge.math.mutations.base import Edit, literal
            from flawforge.math.mutations.computational import Miscalculate
            yield Edit(params={}, expression=literal(site.value * 2), text=Miscalculate())

    try:
        assert REGISTRY["doubled_value_for_this_test"].edits(site(bound, "c"))
        with pytest.raises(TypeError, match="defined twice"):
            type("Again", (DoubledValue,), {"name": "doubled_value_for_this_test"})
    finally:
        del REGISTRY["doubled_value_for_this_test"]


def test_computational_rules_follow_value_type_and_operation(bound):
    applicable = {name: {s.target for s in bound.sites if REGISTRY[name].applies(s)} for name in COMPUTATIONAL_TYPES}
    assert applicable["off_by_n"] == {"c", "d", "h"}           # whole results of + - *
    assert applicable["off_by_factor_of_10"] == {"d"}          # whole results of * and /
    assert applicable["digit_transposition"] == {"c", "d", "h"}
    assert applicable["stem_off_by_n"] == {"d"}                # ends in zero
    assert applicable["decimal_shift"] == {"e"}                # fractional float of * or /
    assert applicable["float_off_by_n"] == {"e"}
    assert applicable["fraction_reciprocal"] == {"g"}
    assert applicable["fraction_part_off_by_one"] == {"g"}
    assert applicable["multiplication_by_reciprocal"] == {"g"}  # g = f * d with f = 3/4
    # inputs (a, b, f) and the final answer's assignment are never miscalculated
    assert not any({"a", "b", "f", "answer"} & targets for targets in applicable.values())


def test_computational_wrong_values(bound):
    assert sorted(new_values(bound, "off_by_n", "c")) == [15, 16, 18, 19]
    assert sorted(new_values(bound, "off_by_factor_of_10", "d")) == [17, 1700]
    assert sorted(new_values(bound, "digit_transposition", "c")) == [71]
    assert sorted(new_values(bound, "digit_transposition", "d")) == [107, 710]
    assert sorted(new_values(bound, "stem_off_by_n", "d")) == [160, 180]
    assert sorted(new_values(bound, "decimal_shift", "e")) == [4.25, 425.0]
    assert sorted(new_values(bound, "float_off_by_n", "e")) == [41.5, 43.5]
    assert new_values(bound, "fraction_reciprocal", "g") == [Fraction(2, 255)]
    assert sorted(new_values(bound, "fraction_part_off_by_one", "g")) == sorted(
        [Fraction(256, 2), Fraction(254, 2), Fraction(255, 3)])  # 255/1 is not a fraction part off by one
    assert new_values(bound, "multiplication_by_reciprocal", "g") == [Fraction(4, 3) * 170]
    # each keeps the value's type
    for name in COMPUTATIONAL_TYPES:
        for target in {s.target for s in bound.sites if REGISTRY[name].applies(s)}:
            assert {type(v) for v in new_values(bound, name, target)} == {type(site(bound, target).value)}


def test_conceptual_edits(bound):
    swaps = [edit.params for edit in REGISTRY["operator_swap"].edits(site(bound, "c"))]
    assert swaps == [{"old": "+", "new": "-", "left": "a", "right": "b"}, {"old": "+", "new": "*", "left": "a", "right": "b"}]
    assert sorted(new_values(bound, "incomplete_calculation", "h")) == [17, 22, 29]  # a+b+c without one term
    assert not REGISTRY["incomplete_calculation"].applies(site(bound, "c"))        # two terms are no chain
    operands = {e.params["operand"] for e in REGISTRY["incorrect_operand"].edits(site(bound, "d"))}
    inputs = {e.params["operand"] for e in REGISTRY["input_misrepresentation"].edits(site(bound, "h"))}
    assert operands == {"c"} and inputs == {"a", "b"}
    replacements = {e.params["replacement"] for e in REGISTRY["incorrect_operand"].edits(site(bound, "d"))}
    assert replacements == {"a", "b"}  # the numbers assigned before d, other than c itself
    selected = {e.params["selected"] for e in REGISTRY["incorrect_final_answer_selection"].edits(site(bound, "answer"))}
    assert selected == {"c", "d", "e"}  # computed before the answer and not already read by it (g, h)
    assert not any(REGISTRY[name].applies(site(bound, "answer")) for name in CONCEPTUAL_TYPES
                   if name != "incorrect_final_answer_selection")


def test_mutated_code_keeps_every_line_number(bound):
    at = site(bound, "g")
    for edit in REGISTRY["multiplication_by_reciprocal"].edits(at):
        mutated = bound.program.with_value(at.assignment, edit.expression)
        original_lines, mutated_lines = PROGRAM.splitlines(), mutated.splitlines()
        assert len(mutated_lines) == len(original_lines)
        assert [n for n, (x, y) in enumerate(zip(original_lines, mutated_lines), 1) if x != y] == [at.assignment.line]
        assert ast.parse(mutated)


# --- the whole corpus -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(shared_data):
    return corpus_outputs(shared_data)


@pytest.fixture(scope="module")
def templates(shared_data):
    return {key_of(t): t for t in all_templates(shared_data)}


@pytest.mark.slow
def test_every_error_type_is_produced_somewhere(corpus):
    produced = Counter(c.error_type for output in corpus.values() for c in output.candidates)
    # Every fraction_reciprocal candidate of the shared corpus is refused by the proofreader today (a known gap:
    # its reconstruction writes text that does not read true); every other type survives somewhere.
    assert set(produced) == set(COMPUTATIONAL_TYPES + CONCEPTUAL_TYPES) - {"fraction_reciprocal"}, produced


@pytest.mark.slow
def test_computational_candidates_follow_their_rules(corpus, templates):
    for key, output in corpus.items():
        for c in output.candidates:
            if c.family != "computational":
                continue
            correct, flawed = c.correct_value.to_python(), c.flawed_value.to_python()
            assert type(correct) is type(flawed) and correct != flawed
            if c.error_type in ("off_by_n", "stem_off_by_n", "off_by_factor_of_10", "digit_transposition"):
                assert is_int_like(correct)
            if c.error_type == "off_by_n":
                assert abs(flawed - correct) in (1, 2)
            if c.error_type == "stem_off_by_n":
                assert correct % 10 == 0 and abs(flawed - correct) == 10
            if c.error_type == "off_by_factor_of_10":
                assert flawed in (correct * 10, correct / 10)
            if c.error_type == "digit_transposition":
                assert sorted(str(abs(int(correct)))) == sorted(str(abs(int(flawed))))
            if c.error_type in ("decimal_shift", "float_off_by_n"):
                assert isinstance(correct, float) and not correct.is_integer()
            if c.error_type == "decimal_shift":
                assert flawed == pytest.approx(correct * 10) or flawed == pytest.approx(correct / 10)
            if c.error_type == "float_off_by_n":
                assert abs(flawed - correct) == pytest.approx(1)
            if c.error_type == "fraction_reciprocal":
                assert flawed == 1 / correct
            if c.error_type == "fraction_part_off_by_one":
                assert isinstance(correct, Fraction) and correct.denominator != 1
            changed = [(old, new) for old, new in zip(templates[key].code.splitlines(), c.mutated_code.splitlines())
                       if old != new]
            assert len(changed) == 1 and changed[0][1].lstrip().startswith(c.target_variable + " =")
            if c.error_type == "multiplication_by_reciprocal":
                assert "Fraction(" in changed[0][1] and "*" in changed[0][1]


@pytest.mark.slow
def test_every_candidate_passes_the_plausibility_filter(corpus):
    for output in corpus.values():
        for c in output.candidates:
            correct = {s.name: s.value.to_python() for s in c.correct_trace}
            flawed = {s.name: s.value.to_python() for s in c.flawed_trace}
            assert c.flawed_final_answer.to_python() != c.correct_final_answer.to_python()
            for name, value in correct.items():
                new = flawed[name]
                if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
                    continue
                if is_int_like(value) and not isinstance(value, Fraction):
                    assert is_int_like(new), (c.id, name, value, new)
                if value != 0:  # a zero may become anything; anything else keeps its sign and stays non-zero
                    assert (value > 0) == (new > 0) and (value < 0) == (new < 0), (c.id, name, value, new)


@pytest.mark.slow
def test_caps_hold_on_every_problem(corpus):
    for output in corpus.values():
        for family in ("computational", "conceptual"):
            mine = [c for c in output.candidates if c.family == family]
            limits = DEFAULT_CAPS.of(family)
            assert max(Counter(c.error_type for c in mine).values(), default=0) <= limits.per_type
            assert max(Counter(c.erroneous_line_number for c in mine).values(), default=0) <= limits.per_line
            assert limits.total is None or len(mine) <= limits.total
