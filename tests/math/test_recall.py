"""Recall against the real human review of the original conceptual-error candidates.

The human sample was drawn at random from the original generator's output, so a capped
selection of at most 5 errors per problem can only match a part of it; the uncapped pool of
plausible errors shows what the mutations can produce at all. Measured on the shared data:
pool 378/395 accepted (95.7%); capped 214/395 accepted (54.2%) and 26/79 rejected (32.9%)
(with the seeds the tests derive from each problem and template; other seeds break the ties
within an error type differently and give 53-57% accepted).
Of the 17 accepted errors outside the pool, 12 name another line than the one their
mutation changed, 2 use numbers the reviewer typed in, and 3 have prose that contradicts the
flawed computation ("14(0.5)=28" for 14/0.5, "12/60 = 1/5" after 12*60, "4-2=6 hours"),
which the generator does not write.
"""
from __future__ import annotations

import json

import pytest

from flawforge.math.recall import HumanReviewError, parse_accepted, parse_rejected, read_human_review, recall
from flawforge.math.selection import NO_CAPS
from flawforge.sandbox import Sandbox

from tests.math.mutation_corpus import LIMITS, all_templates, corpus_outputs, generate_all, key_of

POOL_ACCEPTED = 378    # of 395
CAPPED_ACCEPTED = 214  # of 395
CAPPED_REJECTED = 26   # of 79


def accepted_file(solution: str, error_type: str = "operator_swap", line: str = "L2") -> str:
    return json.dumps({"verdict": "Flawed", "error_details": {"error_type": error_type, "erroneous_line_number": line,
                                                              "explanation": "x"},
                       "context": {"question": "N/A", "flawed_solution": solution}})


def test_accepted_files_are_read_with_their_final_answer():
    decision = parse_accepted("google_gemini-2.5-flash_operator_swap_total_.json", "tier1", 7,
                              accepted_file("#### 1,250\nA = <<1000+250=1250>>1250"))
    assert (decision.template_model, decision.error_type, decision.erroneous_line_number,
            decision.flawed_final_answer, decision.status) == (
        "google_gemini-2.5-flash", "operator_swap", "L2", "1,250", "accepted")


@pytest.mark.parametrize("name, text", [
    ("model_unknown_type_x.json", accepted_file("#### 1")),
    ("m_operator_swap_x.json", "{not json"),
    ("m_operator_swap_x.json", accepted_file("no final answer")),
])
def test_malformed_review_files_are_named(name, text):
    with pytest.raises(HumanReviewError, match="tier1/7/"):
        parse_accepted(name, "tier1", 7, text)


def test_rejected_rows_and_missing_columns():
    rows = parse_rejected("index,tier,model,mutation_type,target_variable,correct_value,flawed_value,status\n"
                          "5,tier1,m,operator_swap,total,10,12,rejected\n6,tier1,m,operator_swap,total,1,2,accepted\n")
    assert [(r.problem_index, r.target_variable, r.flawed_value) for r in rows] == [(5, "total", "12")]
    with pytest.raises(HumanReviewError, match="lacks columns"):
        parse_rejected("index,tier\n1,tier1\n")


@pytest.fixture(scope="module")
def decisions(shared_data):
    found = read_human_review(shared_data / "human-review")
    assert sum(d.status == "accepted" for d in found) == 395 and sum(d.status == "rejected" for d in found) == 79
    return found


@pytest.mark.slow
def test_capped_recall(decisions, shared_data):
    candidates = [c for output in corpus_outputs(shared_data).values() for c in output.candidates]
    report = recall(decisions, candidates)
    print(report.summary())
    assert report.accepted_produced >= CAPPED_ACCEPTED
    assert report.rejected_produced <= CAPPED_REJECTED
    assert report.rejected_recall < report.accepted_recall


@pytest.mark.slow
def test_pool_recall(decisions, shared_data):
    reviewed = {(d.tier, d.problem_index, d.template_model) for d in decisions}
    templates = tuple(t for t in all_templates(shared_data) if key_of(t) in reviewed)
    assert len(templates) == len(reviewed)
    with Sandbox(LIMITS, workers=4) as sandbox:
        outputs = generate_all(sandbox, templates, families=["conceptual"], caps=NO_CAPS)
    report = recall(decisions, [c for output in outputs.values() for c in output.candidates])
    print(report.summary())
    assert report.accepted_produced >= POOL_ACCEPTED
