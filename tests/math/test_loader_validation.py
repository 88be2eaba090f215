"""Template validation in the real sandbox: the original project's report reproduced, and the verdicts."""
from __future__ import annotations

import ast
import csv
from fractions import Fraction
from concurrent.futures import ThreadPoolExecutor

import pytest

from flawforge.math.templates import InvalidTemplate, choose_template, choose_templates
from flawforge.math.validation import (find_solve, normalize_number_text, original_trace_program, replayed_texts,
                                      scored_names, step_problems, validate_template)

GEMINI, GPT = "google_gemini-2.5-flash", "openai_gpt-4.1"


def validate(folder, problems, sandbox, tier, index, model):
    code, steps = folder.files(tier, index, model).read()
    return validate_template(problem_index=index, template_model=model, gsm8k_answer=problems[index].answer,
                             code=code, logical_steps=steps, sandbox=sandbox)


def report_row(row: dict) -> tuple:
    """A row of the original report as (status, structural, semantic, structural mismatches, semantic mismatches)."""
    return (row["answer_check_status"], float(row["structural_score"]),
            float(row["semantic_score"]) if row["semantic_score"] else None,
            ast.literal_eval(row["structural_mismatches"]),
            ast.literal_eval(row["semantic_mismatches"]) if row["semantic_mismatches"] else None)


@pytest.mark.slow
def test_scores_reproduce_the_original_report_on_every_row(shared_data, folder, problems, sandbox):
    with open(shared_data / "formalization-templates" / "template_validation_report.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2380
    with ThreadPoolExecutor(sandbox.workers) as pool:  # the sandbox runs that many units at once
        verdicts = pool.map(lambda row: validate(folder, problems, sandbox, row["tier"], int(row["index"]),
                                                 row["model"]), rows)
    disagreements = []
    for row, verdict in zip(rows, verdicts):
        ours = (verdict.answer_check_status, verdict.structural_score, verdict.semantic_score,
                verdict.structural_mismatches, verdict.semantic_mismatches)
        if ours != report_row(row):
            disagreements.append((row["index"], ours, report_row(row)))
    assert disagreements == [], f"{len(disagreements)} of {len(rows)} rows differ, e.g. {disagreements[:3]}"


@pytest.mark.slow
def test_replayed_scoring_texts_are_what_the_sandboxed_scoring_program_shows(folder, sandbox):
    solves = []
    for index in folder.indices():
        for tier in folder.tiers_of(index):
            for model in sorted(folder.models(tier, index)):
                try:
                    solves.append(find_solve(folder.files(tier, index, model).read()[0]))
                except (ValueError, InvalidTemplate):
                    continue
    replayed = [(solve, texts) for solve in solves if (texts := replayed_texts(solve)) is not None]
    assert len(solves) > 4000 and len(replayed) >= 0.9 * len(solves)  # the sandboxed program is the exception
    programs = [original_trace_program(solve) for solve, _ in replayed]
    runs = sandbox.trace_batch(programs[0], programs[1:])
    for (solve, texts), run in zip(replayed, runs):
        names = scored_names(solve)
        assert run.outcome == "ok", ast.unparse(solve)
        shown = {step.name: step.value.to_python() for step in run.trace}
        assert texts == {name: shown[f"__flawforge_shown_{number}"] for number, name in enumerate(names)}, \
            ast.unparse(solve)


def test_verdicts_name_what_is_wrong(folder, problems, sandbox):
    assert validate(folder, problems, sandbox, "tier1", 1001, GEMINI).valid
    # solve() raises: the original's fail_not_executable
    broken = validate(folder, problems, sandbox, "tier1", 116, GEMINI)
    assert (broken.reason, broken.answer_check_status) == ("not_executable", "fail_not_executable")
    assert "NameError" in broken.detail
    wrong = validate(folder, problems, sandbox, "tier1", 356, GEMINI)
    assert (wrong.reason, wrong.detail) == ("answer_mismatch", "solve() returned 64, GSM8K's answer is 66")
    # 2.9999999999999996 for 3: the original failed it, a float tolerance accepts it
    rounding = validate(folder, problems, sandbox, "tier2", 1435, GEMINI)
    assert rounding.answer_check_status == "fail_wrong_answer" and rounding.valid
    # the original's trace had no `math` in scope, so it gave no semantic score; the template itself is fine
    no_math = validate(folder, problems, sandbox, "tier4", 2250, GEMINI)
    assert no_math.valid and no_math.semantic_score is None and no_math.structural_score == 1.0


def test_bad_templates_are_verdicts_not_crashes(problems, sandbox):
    def check(code, steps=None):
        steps = steps or [{"line_number": "L1", "output_variable": "a", "solution_line_template": "{a}"}]
        return validate_template(problem_index=0, template_model="m", gsm8k_answer=problems[0].answer, code=code,
                                 logical_steps=steps, sandbox=sandbox)

    assert check("def solve(:\n").reason == "invalid_template"
    assert check("x = 1\n").detail == "code defines no solve() function"
    assert check("def solve():\n    while True:\n        pass\n").reason == "not_executable"
    assert check("def solve():\n    return 'seventy-two'\n").reason == "answer_mismatch"
    inconsistent = check("def solve():\n    a = 72\n    return a\n",
                         [{"line_number": "L1", "output_variable": "b", "solution_line_template": "{a} {c}"},
                          {"line_number": "X", "output_variable": "a", "solution_line_template": 3}])
    assert inconsistent.reason == "inconsistent_steps"
    assert inconsistent.detail == ("step 1 (L1): output_variable 'b' is not assigned by solve(); "
                                   "step 1 (L1): placeholder {c} is not a variable of solve(); "
                                   "step 2 (X): line_number must look like 'L<k>'; "
                                   "step 2 (X): solution_line_template must be text")


def test_model_fallback(folder, problems, sandbox):
    # problem 116: the preferred model's template does not run, the fallback's does
    choice = choose_template(problems[116], "tier1", folder, [GEMINI, GPT], sandbox)
    assert choice.template is not None and choice.template.template_model == GPT
    assert [(r.template_model, r.reason) for r in choice.rejects] == [(GEMINI, "not_executable")]
    only_gemini = choose_template(problems[116], "tier1", folder, [GEMINI], sandbox)
    assert only_gemini.template is None and [r.reason for r in only_gemini.rejects] == ["not_executable"]
    missing = choose_template(problems[8], "tier5", folder, [GEMINI, GPT], sandbox)
    assert missing.template is None and [r.reason for r in missing.rejects] == ["missing_template"]


def test_a_template_whose_text_no_solution_writes_gives_way_to_the_next_model(folder, problems, sandbox):
    """Problem 388's preferred template writes `=${<<3*400=1200>>1200}` (braces round the annotation and its
    result), 160's `=${total}>>{total}` (no `<<`): the other model's is used. 929's writes `$.{price}` of a price
    that prints `0.25`, and its other model's braces: the problem has no template."""
    for index, tier, detail in [(388, "tier1", "L1: a brace the solution would print"),
                                (160, "tier3", "L2: an unpaired << or >>"),
                                (929, "tier4", "'$.' before a value that prints its own decimals")]:
        verdict = validate(folder, problems, sandbox, tier, index, GEMINI)
        assert (verdict.valid, verdict.reason) == (False, "malformed_text") and detail in verdict.detail, verdict
        choice = choose_template(problems[index], tier, folder, [GEMINI, GPT], sandbox)
        if index == 929:
            assert choice.template is None
            assert [(r.template_model, r.reason) for r in choice.rejects] == [(GEMINI, "malformed_text"),
                                                                               (GPT, "malformed_text")]
            continue
        assert choice.template is not None and choice.template.template_model == GPT
        assert [(r.template_model, r.reason) for r in choice.rejects] == [(GEMINI, "malformed_text")]
    # `$.{cents}` where the value prints whole is GSM8K's own way of writing 25 cents
    from flawforge.math.reconstruct import malformed_text
    assert malformed_text("It costs $.{cents} each", {"cents": 25}) is None
    assert malformed_text("It costs $.{share*100} each", {"share": Fraction(1, 4)}) is None
    # anything else after `$.` prints what GSM8K never writes: $.0.25, $.1/4, $.25.00, $.5 for five cents
    for field, value in [("{price}", 0.25), ("{price}", Fraction(1, 4)), ("{price:.2f}", 25), ("{price}", 5)]:
        assert malformed_text(f"It costs $.{field} each", {"price": value}) is not None, (field, value)
    # '{{' and '}}' print braces
    assert malformed_text("{{a}}+{{b}}=<<{{a}}+{{b}}={{c}}>>{{c}}") == "a brace the solution would print"


def test_templates_of_many_problems_are_validated_in_shared_batches(folder, problems, sandbox):
    # 116 falls back to its second model; 8 has no template
    chosen = [(problems[i], folder.tiers_of(i)[0]) for i in range(100, 140)]
    chosen += [(problems[116], "tier1"), (problems[8], "tier5")]
    before = sandbox.counts["batch"] + sandbox.counts["exec"]
    together = choose_templates(chosen, folder, [GEMINI, GPT], sandbox)
    assert sandbox.counts["batch"] + sandbox.counts["exec"] - before <= 2 * sandbox.workers  # two rounds
    one_by_one = [choose_template(problem, tier, folder, [GEMINI, GPT], sandbox) for problem, tier in chosen]
    for alone, shared in zip(one_by_one, together):
        assert (shared.template, shared.verdicts, shared.rejects) == (alone.template, alone.verdicts, alone.rejects)
        assert (shared.run is None) == (alone.template is None)
        if alone.template is not None:
            assert shared.run.trace == alone.run.trace and shared.run.return_value == alone.run.return_value
    assert together[-2].template.template_model == GPT and together[-1].rejects[0].reason == "missing_template"


def test_normalize_number_text_and_step_consistency():
    assert [normalize_number_text(t) for t in ("$1,200", ".5", "-.5", "3.0", "20/100", " 7 ")] == \
           ["1200", "0.5", "-0.5", "3", "20/100", "7"]
    steps = [{"line_number": "L1", "output_variable": "c", "solution_line_template": "${<<{a}+{b}={c}>>}{c}"}]
    assert step_problems(steps, {"a", "b", "c"}) == []
    assert step_problems(steps + steps, {"a", "b", "c"}) == ["step 2 (L1): line_number repeated"]
    assert step_problems([{**steps[0], "solution_line_template": "{2*a}"}], {"a", "c"}) == \
           ["step 1 (L1): placeholder {2*a} is not a variable of solve()"]
