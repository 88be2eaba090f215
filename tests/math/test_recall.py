"""Recall against the real human review of the original conceptual-error candidates.

The human sample was drawn at random from the original generator's output, so the seed's caps
(at most 5 errors per problem) can only match a part of it; the uncapped pool of plausible
errors shows what the mutations can produce at all. Before the realism rules the pool held
363/395 accepted errors; of the 32 outside it then, 12 name another line than the one their
mutation changed, 2 use numbers the reviewer typed in, and 3 have prose that contradicts the
flawed computation ("14(0.5)=28" for 14/0.5, "12/60 = 1/5" after 12*60, "4-2=6 hours"),
which the generator does not write. The realism rules added since refuse 25 more, and the
self-division rule one fewer (docs/math-text.md reads each), most of them sums for products or
differences for quotients between quantities of different units (14 accepted, 5 rejected) and
answers ten times off outside the story's numbers (10 accepted, 9 rejected): the pool holds
339/395 accepted (85.8%) and 53/79 rejected (67.1%).

At the default caps the type mix keeps about two operator swaps, incorrect operands and
misrepresented inputs a problem, and every incomplete calculation and reported intermediate:
that is what brings the mix within 0.15 of the human one (flawforge.math.type_mix), and
what costs the accepted errors of those three types, which the reviewers saw as a random draw
from many per problem. Measured by `flawforge recall --cross-validate` on the shared data (the
ranker refitted per fold, folds grouped by problem): 264/395 accepted (66.8%), 25/79 rejected
(31.6%), ROC AUC 0.792; with the shipped ranker on every template of the corpus, 269/395 and 24/79.
"""
from __future__ import annotations

import json
from collections import Counter

import pytest

from flawforge.math.ranking import shipped_ranker
from flawforge.math.recall import (HumanReviewError, cross_validated_recall, kept_at, parse_accepted, parse_rejected,
                                   read_human_review, recall)
from flawforge.math.type_mix import shipped_type_mix
from flawforge.math.selection import DEFAULT_CAPS, NO_CAPS, SEED_CAPS, Choice, select
from flawforge.proto.math import Caps, FamilyCaps
from flawforge.sandbox import Sandbox

from tests.math.mutation_corpus import LIMITS, all_templates, corpus_outputs, generate_all, key_of

POOL_ACCEPTED = 330    # of 395 (378 before the proofreader refused untrue texts, 363 before the realism rules; 339 measured)
CAPPED_ACCEPTED = 260  # of 395, at the default caps (269 measured)
CAPPED_REJECTED = 31   # of 79 (40%; 24 measured)
RANKER_AUC = 0.76      # grouped cross-validation on the pool's reproduced decisions (0.792 measured)


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
def test_pool_recall_and_the_cross_validated_recall_of_the_default_caps(decisions, shared_data, tmp_path):
    reviewed = {(d.tier, d.problem_index, d.template_model) for d in decisions}
    templates = tuple(t for t in all_templates(shared_data) if key_of(t) in reviewed)
    assert len(templates) == len(reviewed)
    with Sandbox.from_settings(limits=LIMITS, workers=4) as sandbox:
        outputs = generate_all(sandbox, templates, families=["conceptual"], caps=NO_CAPS)
    pool = [c for output in outputs.values() for c in output.candidates]
    report = recall(decisions, pool)
    print(report.summary())
    assert report.accepted_produced >= POOL_ACCEPTED
    (tmp_path / "candidates.jsonl").write_text("".join(c.model_dump_json() + "\n" for c in pool))
    ran = run_cli("recall", "--candidates", str(tmp_path / "candidates.jsonl"), "--human-review",
                  str(shared_data / "human-review"), "--cross-validate")
    assert ran.exit_code == 0, ran.output
    measured = json.loads(ran.output)
    print(measured["ranker"], measured["cross_validated"])
    assert measured["ranker"]["cross_validated_auc"] >= RANKER_AUC
    cross_validated = measured["cross_validated"]
    assert cross_validated["auc"] >= RANKER_AUC
    assert cross_validated["rejected_recall"] <= 0.40
    assert cross_validated["accepted_recall"] >= 0.65


def run_cli(*args: str):
    from typer.testing import CliRunner

    from flawforge.cli.main import app

    return CliRunner().invoke(app, list(args))


def test_recall_command_reports_what_the_library_computes_and_caps_none_keeps_the_pool(decisions, shared_data,
                                                                                         tmp_path):
    from flawforge.math.export import parse_candidates

    gsm8k, templates = str(shared_data / "gsm8k" / "train.jsonl"), str(shared_data / "formalization-templates")
    reports, counts = {}, {}
    for caps in ("none", "seed"):
        out = tmp_path / caps
        ran = run_cli("run", "math-errors", "--gsm8k", gsm8k, "--templates", templates, "--indices", "0-99",
                      "--families", "conceptual", "--caps", caps, "--out", str(out))
        assert ran.exit_code == 0, ran.output
        summary = json.loads((out / "summary.json").read_text())
        assert summary["caps"]["conceptual"] == ({"per_type": None, "per_line": None, "total": None} if caps == "none"
                                                 else {"per_type": 2, "per_line": 2, "total": 5})
        reported = run_cli("recall", "--candidates", str(out / "candidates.jsonl"), "--human-review",
                           str(shared_data / "human-review"), "--indices", "0-99", "--missed")
        assert reported.exit_code == 0, reported.output
        reports[caps] = json.loads(reported.output)
        candidates = parse_candidates((out / "candidates.jsonl").read_text())
        counts[caps] = len(candidates)
        expected = recall([d for d in decisions if d.problem_index < 100], candidates)
        assert (reports[caps]["accepted"], reports[caps]["accepted_reproduced"], reports[caps]["rejected"],
                reports[caps]["rejected_reproduced"]) == (expected.accepted, expected.accepted_produced,
                                                          expected.rejected, expected.rejected_produced)
        assert len(reports[caps]["missed"]) == expected.accepted - expected.accepted_produced
        assert reports[caps]["ranker"]["decisions_scored"] <= expected.accepted_produced + expected.rejected_produced
    uncapped, capped = reports["none"], reports["seed"]
    assert counts["none"] > counts["seed"]
    assert uncapped["accepted"] == capped["accepted"] > 10
    assert uncapped["accepted_reproduced"] > capped["accepted_reproduced"]


def test_the_recall_command_replays_the_selection_a_capped_run_makes(decisions, shared_data, tmp_path):
    from flawforge.math.export import parse_candidates

    gsm8k, templates = str(shared_data / "gsm8k" / "train.jsonl"), str(shared_data / "formalization-templates")
    runs = {}
    for caps in ("none", "seed", None):
        out = tmp_path / str(caps)
        ran = run_cli("run", "math-errors", "--gsm8k", gsm8k, "--templates", templates, "--indices", "0-149",
                      "--families", "conceptual", *(("--caps", caps) if caps else ()), "--out", str(out))
        assert ran.exit_code == 0, ran.output
        runs[caps] = parse_candidates((out / "candidates.jsonl").read_text())
    # the uncapped run's candidates, selected again per problem, are what a run at those caps keeps
    for caps, replayed in ((None, Caps()), ("seed", SEED_CAPS)):
        kept = kept_at(runs["none"], replayed, shipped_ranker(), shipped_type_mix())
        assert sorted(c.id for c in kept) == sorted(c.id for c in runs[caps]) and len(kept) > 300
    reported = run_cli("recall", "--candidates", str(tmp_path / "none" / "candidates.jsonl"), "--human-review",
                       str(shared_data / "human-review"), "--indices", "0-149", "--cross-validate")
    assert reported.exit_code == 0, reported.output
    measured = json.loads(reported.output)["cross_validated"]
    expected = cross_validated_recall([d for d in decisions if d.problem_index < 150], runs["none"], Caps(),
                                      shipped_type_mix())
    assert (measured["accepted_reproduced"], measured["rejected_reproduced"], measured["kept"]) == (
        expected.report.accepted_produced, expected.report.rejected_produced, expected.kept)
    assert measured["accepted_reproduced"] > 10 and measured["kept"] < len(runs["none"])
    refused = run_cli("recall", "--candidates", str(tmp_path / "none" / "candidates.jsonl"), "--human-review",
                      str(shared_data / "human-review"), "--caps", "seed")
    assert refused.exit_code != 0 and str(refused.exception) == "--caps applies with --cross-validate"


@pytest.mark.parametrize("caps, message", [
    ("per_type", "is not [family.]limit=N"),
    ("per_types=2", "is not [family.]limit=N"),
    ("cosmic.total=2", "is not [family.]limit=N"),
    ("none,seed", "'seed' is not [family.]limit=N"),
    ("per_line=two", "per_line must be a whole number"),
    ("per_type=²", "per_type must be a whole number"),
    ("conceptual=5", "a family's limits are named, e.g. 'conceptual.total=5'"),
    ("conceptual.per_type=0", "invalid caps.conceptual.per_type: Input should be greater than or equal to 1"),
])
def test_bad_caps_are_named(shared_data, tmp_path, caps, message):
    ran = run_cli("run", "math-errors", "--gsm8k", str(shared_data / "gsm8k" / "train.jsonl"), "--templates",
                  str(shared_data / "formalization-templates"), "--indices", "0", "--caps", caps,
                  "--out", str(tmp_path))
    assert ran.exit_code != 0 and message in str(ran.exception)


def test_caps_name_a_family_or_both_over_the_defaults_or_a_preset():
    from flawforge.cli.math_errors import caps_of

    assert Caps.model_validate(caps_of("seed")) == SEED_CAPS and Caps.model_validate(caps_of("none")) == NO_CAPS
    both = Caps.model_validate(caps_of("per_type=3"))
    assert both.computational.per_type == both.conceptual.per_type == 3
    assert both.conceptual.total == DEFAULT_CAPS.conceptual.total == 24
    one = Caps.model_validate(caps_of("seed,conceptual.total=none"))
    assert one.conceptual == FamilyCaps(per_type=2, per_line=2, total=None)
    assert one.computational == SEED_CAPS.computational == DEFAULT_CAPS.computational


def test_the_flat_caps_of_earlier_versions_are_refused_by_name():
    for flat in ({"per_type": 2}, {"conceptual": 5}, {"conceptual": None}):
        with pytest.raises(ValueError, match="caps are given per error family"):
            Caps.model_validate(flat)


def choices(family: str, error_type: str, count: int) -> list[Choice]:
    return [Choice(family=family, error_type=error_type, line=f"L{i}", prior=1.0, key=f"{error_type}{i}",
                   item=f"{error_type}{i}", score=float(i)) for i in range(count)]


@pytest.mark.parametrize("caps, quotas, kept", [
    (SEED_CAPS, {"operator_swap": 1}, {"operator_swap": 1, "off_by_n": 2}),   # a quota lowers a per-type cap
    (SEED_CAPS, {"operator_swap": 7}, {"operator_swap": 2, "off_by_n": 2}),   # and never raises it
    (DEFAULT_CAPS, {"off_by_n": 1}, {"operator_swap": 8, "off_by_n": 1}),     # of either family
    (DEFAULT_CAPS, {"off_by_n": 0}, {"operator_swap": 8}),                    # a quota of 0 keeps none
    (NO_CAPS, {"operator_swap": 1}, {"operator_swap": 10, "off_by_n": 10}),   # no cap: quotas do not invent one
])
def test_quotas_lower_the_per_type_cap(caps, quotas, kept):
    chosen = select(choices("conceptual", "operator_swap", 10) + choices("computational", "off_by_n", 10), caps,
                    seed=0, quotas=quotas)
    assert Counter(item.rstrip("0123456789") for item in chosen) == kept


def test_the_conceptual_caps_leave_computational_errors_alone(shared_data):
    templates = all_templates(shared_data)[:40]
    with Sandbox.from_settings(limits=LIMITS, workers=4) as sandbox:
        wide, seed = (generate_all(sandbox, templates, caps=caps) for caps in (DEFAULT_CAPS, SEED_CAPS))

    def ids(outputs, family):
        return [[c.id for c in output.candidates if c.family == family] for output in outputs.values()]

    assert ids(wide, "computational") == ids(seed, "computational")
    kept = [(len(w), len(s)) for w, s in zip(ids(wide, "conceptual"), ids(seed, "conceptual"))]
    assert all(s <= 5 and w >= s for w, s in kept)
    assert sum(w for w, _ in kept) > 2 * sum(s for _, s in kept)


def test_recall_command_names_a_missing_candidates_file(shared_data, tmp_path):
    ran = run_cli("recall", "--candidates", str(tmp_path / "none.jsonl"), "--human-review",
                  str(shared_data / "human-review"))
    assert ran.exit_code != 0 and str(ran.exception) == f"--candidates {tmp_path / 'none.jsonl'}: no such file"
