"""Review test data from the original project's human review and GSM8K."""
from __future__ import annotations

import pytest

from flawforge.math.gsm8k import read_gsm8k
from flawforge.review.legacy import legacy_candidates, read_decision_rows


@pytest.fixture(scope="session")
def problems(shared_data):
    return read_gsm8k(shared_data / "gsm8k" / "train.jsonl")


@pytest.fixture(scope="session")
def decision_rows(shared_data):
    return read_decision_rows(shared_data / "human-review" / "decisions.csv")


@pytest.fixture(scope="session")
def candidates(shared_data, decision_rows, problems):
    """The original project's accepted conceptual candidates, rebuilt as Candidate objects."""
    return legacy_candidates(shared_data / "human-review" / "accepted", decision_rows, problems)


@pytest.fixture(scope="session")
def questions(problems):
    return {p.index: p.question for p in problems}
