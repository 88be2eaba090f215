"""Each realism rule on the real template where the audit met its mistake: the rule names the mutant, and
the problem's whole plausible pool keeps no candidate that makes it."""
from __future__ import annotations

import pytest

from flawforge.math import generate
from flawforge.math.mutations.base import Substitution
from flawforge.math.mutations.realism import RULES, Flawed, unrealistic
from flawforge.math.program import BoundProgram, Program
from flawforge.math.selection import NO_CAPS
from flawforge.math.templates import problem_template

MODEL = "google_gemini-2.5-flash"


def real_template(folder, problems, tier, index):
    code, steps = folder.files(tier, index, MODEL).read()
    return problem_template(problems[index], tier, MODEL, code, steps)


def flawed_mutant(template, sandbox, error_type, target, params):
    run = sandbox.trace_call(template.code)
    bound = BoundProgram.bind(Program.parse(template.code, template.logical_steps), run.trace,
                              run.return_value.to_python())
    for mutant in generate._mutants(bound, generate.FAMILIES):
        if (mutant.mutation.name, mutant.site.target) == (error_type, target) and \
                params.items() <= mutant.edit.params.items():
            outcome = generate._predict(bound, mutant)
            edit = mutant.edit
            expression, renamed = ((mutant.site.assignment.value, {edit.old: edit.new})
                                   if isinstance(edit, Substitution) else (edit.expression, {}))
            return Flawed(site=mutant.site, error_type=error_type, expression=expression, values=outcome.values,
                          answer=outcome.answer, correct_answer=bound.answer, renamed=renamed)
    raise AssertionError(f"no {error_type} of {target} with {params}")


CASES = [
    # Natalia's clips: 48 / 2 read as 2 / 2 (the question's April clips replaced by the divisor)
    ("self_division", "tier3", 0, "input_misrepresentation", "may_clips",
     {"operand": "april_clips", "replacement": "may_divisor"}),
    # 6 pages a week written 60 ("24/6 = 40"-style)
    ("zero_added_to_one_digit", "tier1", 4, "off_by_factor_of_10", "pages_per_friend_per_week", {"direction": "added"}),
    # 63.00000000000001 kids shifted to 6.3 kids
    ("decimal_shift_of_whole_number", "tier4", 140, "decimal_shift", "westside_rejected_kids", {"places": -1}),
    # $10 an hour: 0.2 a minute becomes 720, the answer 36,000
    ("runaway_answer", "tier4", 1, "operator_swap", "rate_per_minute", {"old": "/", "new": "*"}),
]


@pytest.mark.parametrize("rule, tier, index, error_type, target, params", CASES, ids=[c[0] for c in CASES])
def test_rule_on_its_real_template(rule, tier, index, error_type, target, params, folder, problems, sandbox):
    template = real_template(folder, problems, tier, index)
    flawed = flawed_mutant(template, sandbox, error_type, target, params)
    assert unrealistic(flawed) == rule
    output = generate.generate_for_problem(template, sandbox, list(generate.FAMILIES), seed=1, caps=NO_CAPS)
    assert not [c for c in output.candidates if (c.error_type, c.target_variable) == (error_type, target)
                and params.items() <= c.mutation.items()]


def test_every_rule_has_a_real_case():
    assert {rule.name for rule in RULES} == {case[0] for case in CASES}
