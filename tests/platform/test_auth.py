"""Every route of every service needs a bearer token, but health, readiness, metrics, the API docs and data-free pages.

The walk goes over each service's OpenAPI document and its route table, so a route added later is covered
by the same test without anyone listing it.
"""
from __future__ import annotations

import re

import pytest
from fastapi import APIRouter, WebSocket
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from auth_support import API_TOKENS, AUTHORIZATION
from flawforge.errors import ConfigError
from flawforge.assembly import platform_for, service_app
from flawforge.runtime.auth import ANONYMOUS
from flawforge.services import SERVICE_NAMES
from flawforge.settings import Settings

PUBLIC = {"/healthz", "/readyz", "/metrics"}
# The API docs and the Swagger UI assets they load, served by the service itself (no ReDoc: it has no local bundle).
DOCS = {"/docs", "/openapi.json", "/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css"}


def app_of(name: str, tmp_path, **settings):
    """The service's app, its workers not started (the lifespan does not run)."""
    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "blobs"), service=name,
                        **{"api_tokens": API_TOKENS, **settings})
    return service_app(name, platform_for(settings), run_worker=False)


def concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x", path)


@pytest.mark.parametrize("name", SERVICE_NAMES)
def test_every_route_without_a_valid_token_is_401(name, tmp_path):
    # No model for the inference-server: the walk needs its routes, not a loaded model.
    app = app_of(name, tmp_path, **({"inference_model_path": str(tmp_path / "no-model")}
                                    if name == "inference-server" else {}))
    client = TestClient(app)
    document = client.get("/openapi.json").json()
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    walked = 0
    for path, methods in document["paths"].items():
        for method in methods:
            if path in PUBLIC:
                continue
            for headers in ({}, {"Authorization": "Bearer not-a-token"}, {"Authorization": "Basic dGVzdHM6dA=="}):
                # A malformed body too: the token is checked before anything reads the request.
                response = client.request(method, concrete(path), headers={**headers, "Content-Type": "application/json"},
                                          content=b'{"not json')
                assert response.status_code == 401, (method, path, headers, response.text)
                assert response.headers["www-authenticate"] == "Bearer"
                body = response.json()  # the service's error format: its own, or OpenAI's under /v1
                message = body["error"]["message"] if "error" in body else body["detail"]
                assert message in ("missing bearer token", "unknown bearer token")
            walked += 1
    assert walked >= 5  # at least the jobs API
    assert client.get("/no/such/route").status_code == 401  # nothing to learn about what exists
    for path in PUBLIC - {"/readyz"}:  # readiness (answered without a token below) starts sandboxes: not per service
        assert client.get(path).status_code == 200
    for path in DOCS:
        assert client.get(path).status_code == 200

def test_a_valid_token_passes_and_names_the_caller(tmp_path):
    with TestClient(app_of("metrics", tmp_path, api_tokens=f"{API_TOKENS},ana:tok-ana-1"),
                    headers=AUTHORIZATION) as client:
        assert client.get("/jobs").status_code == 200
        assert client.get("/review/whoami").json() == {"reviewer": "tests"}
        assert client.get("/review/whoami", headers={"Authorization": "Bearer tok-ana-1"}).json() == {"reviewer": "ana"}
        assert client.get("/review/", headers={"Authorization": ""}).status_code == 200  # the page holds no data
        assert client.get("/docs", headers={"Authorization": ""}).status_code == 200
        assert client.get("/readyz", headers={"Authorization": ""}).status_code == 200


def test_a_service_without_tokens_refuses_to_start_unless_auth_is_disabled(tmp_path):
    with pytest.raises(ConfigError, match="FLAWFORGE_API_TOKENS is empty"):
        app_of("trace-executor", tmp_path, api_tokens="")
    with TestClient(app_of("metrics", tmp_path, api_tokens="", auth="disabled")) as client:
        assert client.get("/jobs").status_code == 200
        assert client.get("/review/whoami").json() == {"reviewer": ANONYMOUS}
        # A token sent is still checked: a wrong one is not quietly anonymous.
        assert client.get("/jobs", headers={"Authorization": "Bearer wrong"}).status_code == 401



def test_a_websocket_route_a_service_adds_is_refused_without_a_token(tmp_path):
    app = app_of("metrics", tmp_path)
    router = APIRouter()

    @router.websocket("/echo")
    async def echo(socket: WebSocket) -> None:
        await socket.accept()
        await socket.send_text("hello")
        await socket.close()

    app.include_router(router)  # added as a service's router would be: no auth of its own
    client = TestClient(app)
    with pytest.raises(WebSocketDisconnect) as refused:
        with client.websocket_connect("/echo"):
            pass
    assert refused.value.code == 1008
    with client.websocket_connect("/echo", headers=AUTHORIZATION) as socket:
        assert socket.receive_text() == "hello"
