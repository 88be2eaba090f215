"""Each realism rule on the real template where the audit met its mistake: the rule names the mutant and what
it refused, and the problem's whole plausible pool keeps no candidate that makes it; the problem's rejects name
the rule."""
from __future__ import annotations

import pytest

from flawforge.math import generate
from flawforge.math.mutations.realism import RULES, Story
from flawforge.math.mutations.units import same_unit, unit_of
from flawforge.math.program import BoundProgram, Program
from flawforge.math.proofread import question_numbers
from flawforge.math.selection import NO_CAPS
from flawforge.math.templates import problem_template

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
     "48 / 2 shown as 240, above the whole 48"),
    # 48 + 24 clips written 27
    ("sum_below_a_term", "tier3", 0, "digit_transposition", "total_clips", {"position": 0},
     "48 + 24 shown as 27, below the term 48"),
    # Betty's grandparents give twice the parents' $15: written $3
    ("product_below_a_factor", "tier3", 2, "off_by_factor_of_10", "grandparents_gift", {"direction": "dropped"},
     "15 x 2 shown as 3, below the factor 15"),
    # 30 trees less 5 written 52
    ("difference_above_the_minuend", "tier3", 12, "digit_transposition", "coconut_trees", {"position": 0},
     "30 - 5 shown as 52, above 30"),
    # 48 + 24 clips multiplied: 1,152 clips where the story's numbers go up to 72
    ("magnitude_outside_the_story", "tier3", 0, "operator_swap", "total_clips", {"old": "+", "new": "*"},
     "answer 1152 against 72, outside the story's numbers 2 to 72"),
    # half of 48 clips read as 48 - 2
    ("unit_breaking_swap", "tier3", 0, "operator_swap", "may_clips", {"old": "/", "new": "-"},
     "april_clips - may_divisor for april_clips / may_divisor: not one unit"),
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


def test_every_rule_has_a_real_case():
    assert {rule.name for rule in RULES} == {case[0] for case in CASES}


def test_units_read_from_names_comments_and_the_solution_text(folder, problems):
    # Natalia: clips and the divisor of "half as many"
    clips = Program.parse(*folder.files("tier3", 0, MODEL).read())
    assert (unit_of(clips, "april_clips"), unit_of(clips, "may_divisor"), unit_of(clips, "may_clips")) == (
        "clip", "ratio", "clip")
    assert same_unit(clips, "april_clips", "may_clips") and not same_unit(clips, "april_clips", "may_divisor")
    # Weng: $12 an hour is a rate, 60 minutes an hour a rate of minutes per hour, 50 minutes worked are minutes
    weng = Program.parse(*folder.files("tier4", 1, MODEL).read())
    assert (unit_of(weng, "hourly_rate"), unit_of(weng, "minutes_per_hour"), unit_of(weng, "minutes_worked")) == (
        "rate", "per hour", "minute")
