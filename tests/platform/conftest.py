"""The service apps the walks over every route share, built once a session: the inference-server's takes
seconds to build and its API document seconds more."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from auth_support import API_TOKENS, ROLE_TOKENS
from flawforge.assembly import platform_for, service_app
from flawforge.services import SERVICE_NAMES
from flawforge.settings import Settings


@pytest.fixture(scope="session", params=SERVICE_NAMES)
def service_client(request, tmp_path_factory) -> tuple[str, TestClient]:
    """A service's name and a client of its app, its workers not started (the lifespan does not run); no model
    for the inference-server: the walks need its routes, not a loaded model."""
    name, root = request.param, tmp_path_factory.mktemp(request.param)
    tokens = ",".join([API_TOKENS, *(f"{role}:{token}:{role}" for role, token in ROLE_TOKENS.items())])
    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(root / "blobs"), service=name,
                        api_tokens=tokens, inference_model_path=str(root / "no-model"))
    return name, TestClient(service_app(name, platform_for(settings), run_worker=False))
