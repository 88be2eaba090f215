"""Each realism rule on the real template where the audit met its mistake: the rule names the mutant and what
it refused, and the problem's whole plausible pool keeps no candidate that makes it; the problem's rejects name
the rule."""
from __future__ import annotations

import ast
import re
from collections import Counter

import pytest

from flawforge.math import generate
from flawforge.math.arithmetic import evaluate
from flawforge.math.mutations.realism import RULES, Story
from flawforge.math.mutations.units import comparison_factor, same_unit, unit_of
from flawforge.math.program import BoundProgram, Program
from flawforge.math.proofread import question_numbers
from flawforge.math.selection import NO_CAPS
from flawforge.math.templates import problem_template
from flawforge.sandbox import Sandbox

from tests.math.mutation_corpus import LIMITS, all_templates, generate_all, key_of

MODEL = "google_gemini-2.5-flash"


def real_template(folder, problems, tier, index):
    code, steps = folder.files(tier, index, MODEL).read()
    return problem_template(problems[index], tier, MODEL, code, steps)


def refusal_of(template, sandbox, error_type, target, params):
    run = sandbox.trace_call(template.code)
    bound = BoundProgram.bind(Program.parse(template.code, template.logical_steps), run.trace,
                              run.return_value.to_python())
    story = Story.of([*question_numbers(template.question), *bound.final_values.values()])
    for mutant in generate._mutants(bound, generate.FAMILIES):
        if (mutant.mutation.name, mutant.site.target) == (error_type, target) and \
                params.items() <= mutant.edit.params.items():
            return generate._unrealistic(mutant, generate._predict(bound, mutant), bound, story)
    raise AssertionError(f"no {error_type} of {target} with {params}")


CASES = [
    # Natalia's clips: 48 / 2 read as 2 / 2 (the question's April clips replaced by the divisor)
    ("self_division", "tier3", 0, "input_misrepresentation", "may_clips",
     {"operand": "april_clips", "replacement": "may_divisor"}, "may_divisor / may_divisor divides 2 by itself"),
    # 6 pages a week written 60 ("24/6 = 40"-style)
    ("zero_added_to_one_digit", "tier1", 4, "off_by_factor_of_10", "pages_per_friend_per_week",
     {"direction": "added"}, "pages_per_friend_per_week 6 written 60"),
    # 63.00000000000001 kids shifted to 6.3 kids
    ("decimal_shift_of_whole_number", "tier4", 140, "decimal_shift", "westside_rejected_kids", {"places": -1},
     "westside_rejected_kids 63.00000000000001 is whole but for float error"),
    # $10 an hour: 0.2 a minute becomes 720, the answer 36,000
    ("runaway_answer", "tier4", 1, "operator_swap", "rate_per_minute", {"old": "/", "new": "*"},
     "answer 36000 is over 1000 times 10"),
    # half of Natalia's 48 clips written 240
    ("part_above_the_whole", "tier3", 0, "off_by_factor_of_10", "may_clips", {"direction": "added"},
     "48 / 2 shown as 240, not below the whole 48"),
    # 48 + 24 clips written 27
    ("sum_below_a_term", "tier3", 0, "digit_transposition", "total_clips", {"position": 0},
     "48 + 24 shown as 27, not above the term 48"),
    # Betty's grandparents give twice the parents' $15: written $3
    ("product_below_a_factor", "tier3", 2, "off_by_factor_of_10", "grandparents_gift", {"direction": "dropped"},
     "15 x 2 shown as 3, not above the factor 15"),
    # 30 trees less 5 written 52
    ("difference_above_the_minuend", "tier3", 12, "digit_transposition", "coconut_trees", {"position": 0},
     "30 - 5 shown as 52, not below 30"),
    # Joseph's 5 hours each way, twice: 5 x 2 written 100 hours
    ("tenfold_small_fact", "tier1", 1614, "off_by_factor_of_10", "route_a_round_trip_time", {"direction": "added"},
     "5 x 2 shown as 100: a one-digit fact"),
    # 48 + 24 clips multiplied: 1,152 clips where the story's numbers go up to 72
    ("magnitude_outside_the_story", "tier3", 0, "operator_swap", "total_clips", {"old": "+", "new": "*"},
     "answer 1152 against 72, outside the story's numbers 2 to 72"),
    # half of 48 clips read as 48 - 2
    ("unit_breaking_swap", "tier3", 0, "operator_swap", "may_clips", {"old": "/", "new": "-"},
     "april_clips - may_divisor for april_clips / may_divisor: not one unit"),
    # Fern's kids: "Then add the number of kids from each school to find the total: 120 kids + 90 kids - 50 kids"
    ("swap_against_its_words", "tier4", 140, "operator_swap", "total_initial_kids",
     {"old": "+", "new": "-", "right": "mountaintop_total_kids"}, "'-' for '+' on a line that says 'add'"),
]


@pytest.mark.parametrize("rule, tier, index, error_type, target, params, what", CASES, ids=[c[0] for c in CASES])
def test_rule_on_its_real_template(rule, tier, index, error_type, target, params, what, folder, problems, sandbox):
    template = real_template(folder, problems, tier, index)
    refusal = refusal_of(template, sandbox, error_type, target, params)
    assert (refusal.rule, refusal.what) == (rule, what)
    output = generate.generate_for_problem(template, sandbox, list(generate.FAMILIES), seed=1, caps=NO_CAPS)
    assert not [c for c in output.candidates if (c.error_type, c.target_variable) == (error_type, target)
                and params.items() <= c.mutation.items()]
    named = [r.detail for r in output.rejects if r.reason == f"unrealistic_{rule}"]
    assert len(named) == 1 and what in named[0]


# Errors the human review accepted that a rule once refused, and that people make: each is kept, and the problem's
# uncapped pool has it
KEPT = [
    # Marcus paints 2 paintings, then twice as many each day: 2 / 2 divides by the factor, not 2 paintings by itself
    ("tier1", 1538, "operator_swap", "paintings_day2", {"old": "*", "new": "/", "right": "multiplier_twice"}),
    # a 3 ft by 3 ft sandbox taken as 3 + 3 square feet: length and width are both feet
    ("tier4", 2307, "operator_swap", "sandbox_sq_footage", {"old": "*", "new": "+", "right": "sandbox_width"}),
    # Jerome lost three times Seth's 17.5 pounds, read as three more: 3 + 17.5
    ("tier2", 1489, "operator_swap", "jerome_lost_pounds", {"old": "*", "new": "+", "left": "jerome_multiplier"}),
    # Mark has thrice Lloyd's cards, so Lloyd has 90 - 3
    ("tier3", 940, "operator_swap", "lloyd_cards", {"old": "/", "new": "-", "right": "lloyd_multiplier"}),
]


@pytest.mark.parametrize("tier, index, error_type, target, params", KEPT, ids=[str(c[1]) for c in KEPT])
def test_a_slip_people_make_is_kept(tier, index, error_type, target, params, folder, problems, sandbox):
    template = real_template(folder, problems, tier, index)
    assert refusal_of(template, sandbox, error_type, target, params) is None
    output = generate.generate_for_problem(template, sandbox, ["conceptual"], seed=1, caps=NO_CAPS)
    assert [c for c in output.candidates if (c.error_type, c.target_variable) == (error_type, target)
            and params.items() <= c.mutation.items()]


def test_every_rule_has_a_real_case():
    assert {rule.name for rule in RULES} == {case[0] for case in CASES}


def test_units_read_from_names_comments_and_the_solution_text(folder, problems):
    # Natalia: clips and the divisor of "half as many"
    clips = Program.parse(*folder.files("tier3", 0, MODEL).read())
    assert (unit_of(clips, "april_clips"), unit_of(clips, "may_divisor"), unit_of(clips, "may_clips")) == (
        "clip", "ratio", "clip")
    assert same_unit(clips, "april_clips", "may_clips") and not same_unit(clips, "april_clips", "may_divisor")
    # a sandbox's length and width are lengths; Jerome's multiplier is a comparison's factor, Natalia's divisor not
    sandbox = Program.parse(*folder.files("tier4", 2307, MODEL).read())
    assert same_unit(sandbox, "sandbox_length", "sandbox_width")
    jerome = Program.parse(*folder.files("tier2", 1489, MODEL).read())  # jerome_multiplier = 3
    assert comparison_factor(jerome, "jerome_multiplier") and not comparison_factor(clips, "may_divisor")
    # a percentage's or a wage's multiplier scales a quantity, it compares none: '80 + 100' is no confusion
    percent = Program.parse(*folder.files("tier3", 434, "openai_gpt-4.1").read())  # percent_multiplier = 100
    overtime = Program.parse(*folder.files("tier4", 470, MODEL).read())  # overtime_multiplier = 1.5
    assert not comparison_factor(percent, "percent_multiplier")
    assert not comparison_factor(overtime, "overtime_multiplier")
    # Weng: $12 an hour is a rate, 60 minutes an hour a rate of minutes per hour, 50 minutes worked are minutes
    weng = Program.parse(*folder.files("tier4", 1, MODEL).read())
    assert (unit_of(weng, "hourly_rate"), unit_of(weng, "minutes_per_hour"), unit_of(weng, "minutes_worked")) == (
        "rate", "per hour", "minute")


# --- the rules hold on what generation keeps: a part of the shared corpus at the default caps, each check written
# again here from the candidates and the templates (not through the rules) ---------------------------------------
_ROUNDING = {"int", "float", "round", "floor", "ceil"}


@pytest.fixture(scope="module")
def kept(shared_data):
    templates = {key_of(t): t for t in all_templates(shared_data) if t.problem_index < 300}
    with Sandbox.from_settings(limits=LIMITS, workers=2) as sandbox:
        outputs = generate_all(sandbox, tuple(templates.values()))
    return [(templates[key], c) for key, output in outputs.items() for c in output.candidates]


def _visible_operation(template, candidate):
    """The erroneous line's operation as the template writes it, with its operands' correct values."""
    steps, step = {}, ""
    for number, text in enumerate(template.code.splitlines(), start=1):
        marker = re.match(r"\s*#\s*(L\d+|FA)\b", text)
        step = marker.group(1) if marker else step
        steps[number] = step
    assignment = [node for node in ast.walk(ast.parse(template.code)) if isinstance(node, ast.Assign)
                  and getattr(node.targets[0], "id", "") == candidate.target_variable
                  and steps[node.lineno] == candidate.erroneous_line_number][-1]
    expression = assignment.value
    while isinstance(expression, ast.Call) and getattr(expression.func, "id", getattr(expression.func, "attr", "")) \
            in _ROUNDING:
        expression = expression.args[0]
    if not isinstance(expression, ast.BinOp):
        return None
    scope = {}
    for traced in candidate.correct_trace:  # the values before the line
        if traced.name == candidate.target_variable and assignment.lineno <= traced.line <= assignment.end_lineno:
            break
        scope[traced.name] = traced.value.to_python()
    left, right = (evaluate(side, scope) for side in (expression.left, expression.right))
    return type(expression.op).__name__, float(left), float(right)


def test_no_kept_slip_goes_the_impossible_way(kept):
    judged, impossible = Counter(), []
    for template, c in kept:
        if c.family != "computational":
            continue
        operation = _visible_operation(template, c)
        if operation is None:
            continue
        op, a, b = operation
        new = float(c.flawed_value.to_python())
        judged[op] += 1
        # an operation on positive numbers goes strictly one way: equal counts as wrong too ('2 - 1/2 = 2')
        wrong = ((op == "Add" and a > 0 and b > 0 and new <= max(a, b) + 1e-9)
                 or (op == "Sub" and a > 0 and b > 0 and new >= a - 1e-9)
                 or (op == "Mult" and a > 0 and b > 1 and new <= a + 1e-9)
                 or (op == "Mult" and b > 0 and a > 1 and new <= b + 1e-9)
                 or (op == "Mult" and 0 < a < 1 and b > 0 and new >= b - 1e-9)
                 or (op == "Mult" and 0 < b < 1 and a > 0 and new >= a - 1e-9)
                 or (op in ("Div", "FloorDiv") and a > 0 and b > 1 and new >= a - 1e-9)
                 or (op in ("Div", "FloorDiv") and a > 0 and 0 < b < 1 and new <= a + 1e-9))
        # a tenfold slip of a one-digit fact ('5 x 2 = 100') is no slip
        wrong = wrong or (c.error_type in ("off_by_factor_of_10", "decimal_shift")
                          and all(v.is_integer() and 0 <= v <= 9 for v in (a, b)))
        if wrong:
            impossible.append((c.problem_index, c.error_type, op, a, b, new))
    print(dict(judged))
    assert min(judged[op] for op in ("Add", "Sub", "Mult", "Div")) >= 20
    assert impossible == []


def test_no_kept_conceptual_answer_is_ten_times_off_outside_the_story(kept):
    judged, far, outside = 0, 0, []
    for template, c in kept:
        if c.family != "conceptual":
            continue
        new, correct = float(c.flawed_final_answer.to_python()), float(c.correct_final_answer.to_python())
        if not new or not correct:
            continue
        judged += 1
        ratio = abs(new / correct)
        if ratio < 10 and ratio > 0.1:
            continue
        far += 1
        # the numbers the question states (digits and number words) and the values the correct solution computes
        story = [float(n) for n in question_numbers(template.question)]
        story += [float(s.value.to_python()) for s in c.correct_trace if s.value.type in ("int", "float", "fraction")]
        story = [abs(n) for n in story if n]
        if not min(story) * (1 - 1e-9) <= abs(new) <= max(story) * (1 + 1e-9):
            outside.append((c.problem_index, c.error_type, correct, new))
    print(judged, "conceptual answers,", far, "ten times off but within the story's numbers")
    assert judged > 1000 and outside == []


def test_kept_subtractions_for_divisions_and_sums_for_products_are_between_one_unit_or_with_a_comparison_factor(kept):
    swaps = [(template, c) for template, c in kept if c.error_type == "operator_swap"]
    breaking = [(template, c) for template, c in swaps
                if (c.mutation["old"], c.mutation["new"]) in {("/", "-"), ("*", "+")}]
    assert len(swaps) > 200
    assert all(same_unit(Program.parse(template.code, template.logical_steps), c.mutation["left"], c.mutation["right"])
               or comparison_factor(Program.parse(template.code, template.logical_steps), c.mutation["left"])
               or comparison_factor(Program.parse(template.code, template.logical_steps), c.mutation["right"])
               for template, c in breaking)
