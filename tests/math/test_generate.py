"""generate_for_problem: rejects for bad templates, what runs in the sandbox, the whole corpus, determinism."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from flawforge.math.generate import generate_for_problem
from flawforge.math.mutations.realism import RULES
from flawforge.sandbox import Sandbox

from tests.math.mutation_corpus import LIMITS, all_templates, corpus_outputs, generate_all, key_of
from tests.math.test_reconstruct import PLANT_CODE, PLANT_STEPS, plant_template

REJECT_REASONS = {"invalid_template", "not_executable", "answer_not_a_number", "template_not_renderable",
                  "no_applicable_mutation", "no_plausible_mutation", "template_text_false",
                  # a candidate the proofreader refused, by its first finding
                  *(f"text_{kind}" for kind in ("false_calculation", "unreadable_calculation", "stale_number",
                                                "fraction_answer", "no_final_answer")),
                  # mutants a realism rule refused, one reject a rule (flawforge.math.mutations.realism)
                  *(f"unrealistic_{rule.name}" for rule in RULES)}


class CountingSandbox:
    """The real sandbox, counting the calls generation makes."""

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox
        self.calls = Counter()

    def trace_call(self, source, func="solve"):
        self.calls["trace_call"] += 1
        return self.sandbox.trace_call(source, func)

    def trace_batch(self, original, variants, func="solve"):
        self.calls["trace_batch"] += 1
        self.calls["variants"] += len(variants)
        return self.sandbox.trace_batch(original, variants, func)


@pytest.mark.parametrize("code, steps, reason", [
    ("def solve(:\n    return 1\n", PLANT_STEPS, "invalid_template"),
    ("def main():\n    x = 1\n    return x\n", PLANT_STEPS, "invalid_template"),
    ("def solve():\n    # L1\n    a = 0\n    b = 1 / a\n    # FA\n    answer = b\n    return answer\n",
     PLANT_STEPS, "not_executable"),
    ("def solve():\n    # FA\n    answer = 'twelve'\n    return answer\n", PLANT_STEPS, "answer_not_a_number"),
    (PLANT_CODE, [dict(PLANT_STEPS[0], solution_line_template="{no_such_variable}")], "template_not_renderable"),
    ("def solve():\n    # L1\n    a = 3\n    # FA\n    answer = a\n    return answer\n",
     [dict(PLANT_STEPS[0], output_variable="a", solution_line_template="{a}")], "no_applicable_mutation"),
])
def test_bad_templates_become_rejects(sandbox, code, steps, reason):
    output = generate_for_problem(plant_template(code=code, logical_steps=steps), sandbox,
                                  ["computational", "conceptual"], seed=1)
    assert output.candidates == []
    assert output.rejects and {r.reason for r in output.rejects} == {reason}
    assert all(r.problem_index == 1001 and r.detail for r in output.rejects)


def test_unknown_family_is_a_caller_error(sandbox):
    with pytest.raises(ValueError, match="unknown error families"):
        generate_for_problem(plant_template(), sandbox, ["typos"], seed=1)


def test_straight_line_mutants_are_evaluated_without_a_sandbox_run(sandbox):
    counting = CountingSandbox(sandbox)
    output = generate_for_problem(plant_template(), counting, ["computational", "conceptual"], seed=5)
    assert output.candidates
    assert counting.calls == {"trace_call": 1}  # the template itself; its mutants are plain arithmetic


# The same problem with a loop: not straight-line, so every mutant runs in the sandbox, in one batch.
LOOP_CODE = PLANT_CODE.replace("    total_earnings = orchid_earnings + plant_earnings\n",
                               "    total_earnings = 0\n    for part in (orchid_earnings, plant_earnings):\n"
                               "        total_earnings += part\n")


def test_other_templates_run_every_mutant_in_one_batch(sandbox):
    counting = CountingSandbox(sandbox)
    output = generate_for_problem(plant_template(code=LOOP_CODE), counting, ["computational", "conceptual"], seed=5,
                                  with_traces=True)
    assert counting.calls["trace_call"] == 1 and counting.calls["trace_batch"] == 1
    assert counting.calls["variants"] > len(output.candidates) > 0
    for c in output.candidates:
        rerun = sandbox.trace_call(c.mutated_code, "solve")
        assert rerun.trace == c.flawed_trace and rerun.return_value == c.flawed_final_answer


def test_candidates_are_complete_and_consistent(sandbox):
    template = plant_template()
    output = generate_for_problem(template, sandbox, ["computational", "conceptual"], seed=5, with_traces=True)
    assert {c.family for c in output.candidates} == {"computational", "conceptual"}
    for c in output.candidates:
        flawed = {s.name: s.value for s in c.flawed_trace}
        assert flawed[c.target_variable] == c.flawed_value
        assert flawed["answer"] == c.flawed_final_answer
        assert c.correct_final_answer.to_python() == 1375
        assert c.original_solution.endswith("#### 1375") and c.explanation and c.seed == 5
        assert c.erroneous_line_number in {"L1", "L2", "L3", "FA"}
        assert c.mutation["name"] == c.error_type
        rerun = sandbox.trace_call(c.mutated_code, "solve")
        assert rerun.trace == c.flawed_trace and rerun.return_value == c.flawed_final_answer


def test_selection_uses_the_given_seed_and_no_global_random_state(sandbox):
    template = plant_template()
    random.seed(1)
    first = generate_for_problem(template, sandbox, ["computational", "conceptual"], seed=5)
    random.seed(2)
    random.random()
    again = generate_for_problem(template, sandbox, ["computational", "conceptual"], seed=5)
    assert first == again
    others = [generate_for_problem(template, sandbox, ["computational", "conceptual"], seed=s) for s in range(6)]
    assert len({tuple(c.id for c in o.candidates) for o in others}) > 1


# --- the whole corpus -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(shared_data):
    return corpus_outputs(shared_data)


@pytest.mark.slow
def test_every_template_of_the_corpus_gives_candidates_or_reasons(corpus, shared_data):
    templates = all_templates(shared_data)
    assert len(corpus) == len(templates) > 4000
    reasons = Counter(r.reason for output in corpus.values() for r in output.rejects)
    assert set(reasons) <= REJECT_REASONS, reasons
    for key, output in corpus.items():
        assert output.candidates or output.rejects, key
    with_candidates = sum(bool(output.candidates) for output in corpus.values())
    assert with_candidates >= 0.98 * len(corpus), reasons


@pytest.mark.slow
def test_every_flawed_trace_is_what_the_sandbox_records_for_the_mutated_code(corpus):
    candidates = [c for output in corpus.values() for c in output.candidates]
    assert len(candidates) > 20_000
    with Sandbox.from_settings(limits=LIMITS, workers=4) as sandbox:
        runs = sandbox.trace_batch(candidates[0].mutated_code, [c.mutated_code for c in candidates[1:]])
    for candidate, run in zip(candidates, runs):
        assert run.outcome == "ok", (candidate.problem_index, candidate.error_type, run.detail)
        assert (run.trace, run.return_value) == (candidate.flawed_trace, candidate.flawed_final_answer), \
            (candidate.problem_index, candidate.template_model, candidate.error_type)


@pytest.mark.slow
def test_candidate_ids_are_unique_content_hashes(corpus):
    candidates = [c for output in corpus.values() for c in output.candidates]
    ids = [c.id for c in candidates]
    assert len(ids) == len(set(ids))
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


@pytest.mark.slow
def test_generation_is_deterministic(corpus, shared_data):
    # every 20th template: all tiers, both models
    sample = all_templates(shared_data)[::20]
    with Sandbox.from_settings(limits=LIMITS, workers=4) as sandbox:
        again = generate_all(sandbox, sample)
    for template in sample:
        assert again[key_of(template)] == corpus[key_of(template)], key_of(template)
    assert sum(len(o.candidates) for o in again.values()) > 1000
