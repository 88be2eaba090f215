"""The served model, loaded once per session, and inference-server apps on fresh blob stores."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def inference_settings(tmp_path_factory):
    from auth_support import API_TOKENS
    from flawforge.settings import Settings

    return Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path_factory.mktemp("blobs")),
                    service="inference-server", api_tokens=API_TOKENS, inference_device="cpu", inference_backend="transformers",
                    # One thread by default: on two shared cores torch's spinning threads slow each other tenfold.
                    inference_threads=int(os.environ.get("FLAWFORGE_INFERENCE_THREADS", "1")),
                    inference_cache_dir=os.environ.get("FLAWFORGE_INFERENCE_CACHE_DIR", str(REPO / "var" / "models")))


@pytest.fixture(scope="session")
def backend(inference_settings):
    """The transformers backend on SmolLM2-135M-Instruct, shared by every app of the session."""
    from flawforge.inference.host import host_for

    return host_for(inference_settings).wait()


@pytest.fixture(scope="session")
def lm(backend):
    return backend.lm


@pytest.fixture
def make_client(inference_settings, backend, tmp_path):
    """Builds a TestClient of the inference-server on a blob folder (default: this test's own)."""
    from fastapi.testclient import TestClient

    from auth_support import AUTHORIZATION
    from flawforge.assembly import platform_for, service_app

    clients = []

    def make(*, run_worker: bool = True, blob_dir: Path = tmp_path, **overrides) -> TestClient:
        settings = inference_settings.model_copy(update={"blob_dir": str(blob_dir), **overrides})
        platform = platform_for(settings)
        client = TestClient(service_app("inference-server", platform, run_worker=run_worker),
                            headers=AUTHORIZATION)
        client.__enter__()  # runs the lifespan: the batch worker starts
        client.platform = platform
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)
        client.platform.close()
