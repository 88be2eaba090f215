"""Real generated candidates (templates -> sandbox -> mutations) through shortlist, review and export."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from review_support import make_round

from flawforge.blobstore import LocalBlobStore
from flawforge.math.gsm8k import numbered_lines
from flawforge.math.templates import TemplateFolder, problem_template
from flawforge.proto.review import DecisionRequest
from flawforge.review.export import accepted_items, build_final_dataset
from flawforge.review.store import ReviewStore

MODEL = "google_gemini-2.5-flash"


@pytest.fixture(scope="module")
def folder(shared_data):
    return TemplateFolder(shared_data / "formalization-templates")


@pytest.fixture(scope="module")
def generated(folder, problems):
    """Both families of errors for the first three problems of each tier that have a template."""
    from flawforge.math.generate import generate_for_problem
    from flawforge.sandbox import Sandbox, SandboxLimits

    candidates = []
    with Sandbox.from_settings(limits=SandboxLimits(timeout_s=2)) as sandbox:
        for tier in ("tier1", "tier2", "tier3", "tier4"):
            for index in [i for i in folder.indices() if MODEL in folder.models(tier, i)][:3]:
                code, steps = folder.files(tier, index, MODEL).read()
                template = problem_template(problems[index], tier, MODEL, code, steps)
                candidates += generate_for_problem(template, sandbox, ["computational", "conceptual"], seed=0).candidates
    return candidates


def template_code(folder):
    return lambda c: Path(folder.files(c.tier, c.problem_index, c.template_model).code_path).read_text()


def test_shortlist_of_generated_candidates_shows_the_mutation(generated, folder, questions, tmp_path):
    conceptual = [c for c in generated if c.family == "conceptual"]
    assert len({c.error_type for c in conceptual}) >= 4
    reviews = ReviewStore(LocalBlobStore(tmp_path))
    items = make_round(reviews, conceptual, questions, size=3, template_code=template_code(folder))
    assert Counter(i.candidate.error_type for i in items) == {
        t: min(3, n) for t, n in Counter(c.error_type for c in conceptual).items()}
    by_id = {c.id: c for c in generated}
    for item in items:
        candidate = item.candidate
        assert candidate == by_id[item.item_id]
        # The highlighted line is the one the generator numbered as erroneous.
        erroneous = numbered_lines(candidate.flawed_solution)[candidate.erroneous_line_number]
        assert erroneous in candidate.flawed_solution.splitlines()[item.flawed_line_index]
        # The code diff is the mutation: changed lines only, both sides present.
        removed = [l for l in item.code_diff.splitlines() if l.startswith("-") and not l.startswith("---")]
        added = [l for l in item.code_diff.splitlines() if l.startswith("+") and not l.startswith("+++")]
        assert removed and added and len(removed) + len(added) <= 6, item.code_diff


def test_reviewed_generated_candidates_and_computational_errors_make_the_dataset(generated, folder, questions,
                                                                                tmp_path, problems):
    reviews = ReviewStore(LocalBlobStore(tmp_path))
    items = make_round(reviews, [c for c in generated if c.family == "conceptual"], questions, size=2,
                       reviewers_per_item=1, template_code=template_code(folder))
    for n, assignment in enumerate(iter(lambda: reviews.next_item("r1", "ana"), None)):
        reviews.decide("r1", assignment.item.item_id, "ana",
                       DecisionRequest(candidate_id=assignment.item.candidate.id, kind="reject" if n % 3 == 2 else "accept"))
    accepted = accepted_items(items, reviews.decisions("r1"))
    assert len(accepted) == len(items) - len(items) // 3
    computational = [c for c in generated if c.family == "computational"]
    splits = build_final_dataset(conceptual=accepted, computational=computational, problems=problems,
                                 sizes={"computational": 10}, test_fraction=0.25, seed=1)
    rows = splits["train"] + splits["test"]
    assert Counter(r["family"] for r in rows) == {"conceptual": len(accepted), "computational": 10,
                                                  "correct": len({r["problem_index"] for r in rows
                                                                  if r["family"] == "conceptual"}
                                                                 | {c.problem_index for c in computational})}
    train, test = ({r["problem_index"] for r in rows if r["split"] == side} for side in ("train", "test"))
    assert train and test and not train & test


def test_cli_shortlists_a_candidates_file(generated, shared_data, tmp_path):
    import json
    import os
    import subprocess
    import sys

    path = tmp_path / "candidates.jsonl"
    path.write_text("".join(c.model_dump_json() + "\n" for c in generated))
    env = {**os.environ, "FLAWFORGE_BLOB_BACKEND": "local", "FLAWFORGE_BLOB_DIR": str(tmp_path / "blobs")}
    done = subprocess.run([sys.executable, "-m", "flawforge.cli.entry", "review", "shortlist", "--round", "gen",
                           "--candidates", str(path), "--gsm8k", str(shared_data / "gsm8k" / "train.jsonl"),
                           "--templates", str(shared_data / "formalization-templates"), "--size-per-error-type", "2",
                           "--reviewers-per-item", "3"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["candidates"] == len(generated) and summary["reviewers_per_item"] == 3
    items = ReviewStore(LocalBlobStore(tmp_path / "blobs")).items("gen")
    assert len(items) == summary["items"] and all(item.code_diff and item.candidate.family == "conceptual"
                                                  for item in items)
