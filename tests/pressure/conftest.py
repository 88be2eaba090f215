"""The local model, loaded once for the study's model tests (one torch thread: the cores are shared)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def study_host(tmp_path_factory):
    from flawforge.inference.host import host_for
    from flawforge.settings import Settings

    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path_factory.mktemp("blobs")),
                        inference_device="cpu", inference_backend="transformers",
                        inference_threads=int(os.environ.get("FLAWFORGE_INFERENCE_THREADS", "1")),
                        inference_cache_dir=os.environ.get("FLAWFORGE_INFERENCE_CACHE_DIR", str(REPO / "var" / "models")))
    return host_for(settings)


@pytest.fixture(scope="session")
def study_lm(study_host):
    study_host.wait()
    return study_host.research_model()
