"""Every route of every service needs a bearer token, but health, readiness, metrics, the API docs and data-free pages;
a reviewer's token reaches only the review routes, a service's token every route but those.

The walk goes over each service's OpenAPI document and its route table, so a route added later is covered
by the same test without anyone listing it.
"""
from __future__ import annotations

import re

import pytest
from fastapi import APIRouter, WebSocket
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from auth_support import API_TOKENS, AUTHORIZATION, ROLE_TOKENS
from flawforge.errors import ConfigError
from flawforge.assembly import platform_for, service_app
from flawforge.runtime.auth import ANONYMOUS, Caller, parse_api_tokens
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


def test_every_route_without_a_valid_token_is_401(service_client):
    _, client = service_client
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


def test_a_reviewer_token_reaches_only_review_routes_and_a_service_token_none_of_them(service_client):
    name, client = service_client
    refused = {"reviewer": 0, "service": 0}
    for path, methods in client.get("/openapi.json").json()["paths"].items():
        if path in PUBLIC:
            continue
        review = path.startswith("/review/")
        for method in methods:
            for role, token in ROLE_TOKENS.items():
                if (role == "reviewer") != review:  # reviewers: every route but review's; services: review's
                    response = client.request(method, concrete(path), headers={"Authorization": f"Bearer {token}"})
                    assert response.status_code == 403, (role, method, path, response.text)
                    body = response.json()
                    message = body["error"]["message"] if "error" in body else body["detail"]
                    assert message.startswith(f"a {role} token may not call {method.upper()} "), message
                    refused[role] += 1
    assert refused["reviewer"] >= 5  # at least the jobs API
    assert refused["service"] >= (8 if name == "metrics" else 0)  # every review route


def test_token_entries_without_a_role_are_operators_and_unknown_roles_refused():
    assert parse_api_tokens("a:t1, b:t2:reviewer ,c:t3:service") == {
        "t1": Caller("a", "operator"), "t2": Caller("b", "reviewer"), "t3": Caller("c", "service")}
    for spec, problem in (("a:t1:admin", "entry 'a' has the unknown role 'admin' (roles: operator, service, "
                                         "reviewer)"),
                          ("a:t1:reviewer:x", "entry 'a' is not 'name:token' or 'name:token:role'"),
                          ("ok:t0,secret-token-only", "entry 2 is not 'name:token' or 'name:token:role'")):
        with pytest.raises(ConfigError) as refused:
            parse_api_tokens(spec)
        assert str(refused.value) == f"FLAWFORGE_API_TOKENS {problem}"


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
