"""Fixtures shared by the math tests: the real GSM8K rows, the real templates, one sandbox."""
from __future__ import annotations

import pytest

from flawforge.math.gsm8k import read_gsm8k
from flawforge.math.templates import TemplateFolder
from flawforge.sandbox import Sandbox
from tests.math.mutation_corpus import LIMITS


@pytest.fixture(scope="session")
def problems(shared_data):
    return read_gsm8k(shared_data / "gsm8k" / "train.jsonl")


@pytest.fixture(scope="session")
def folder(shared_data):
    return TemplateFolder(shared_data / "formalization-templates")


@pytest.fixture(scope="session")
def sandbox():
    with Sandbox.from_settings(limits=LIMITS, workers=2) as sb:
        yield sb
