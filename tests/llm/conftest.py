"""The real inference-server (SmolLM2-135M-Instruct on CPU) over HTTP on a free local port."""
from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

# The key the gateway's provider sends; the inference-server accepts it as a bearer token.
LLM_KEY = "sk-test-SECRETSECRETSECRET1234"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def inference_server(tmp_path_factory) -> dict:
    """Base URL (ending in /v1) and the model id of a running inference-server."""
    import uvicorn

    from flawforge.assembly import platform_for, service_app
    from flawforge.settings import Settings

    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path_factory.mktemp("inference")),
                        service="inference-server", api_tokens=f"gateway:{LLM_KEY}")
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(service_app("inference-server", platform_for(settings)), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="inference-server", daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while True:
        try:
            response = httpx.get(f"{base_url}/models", headers={"Authorization": f"Bearer {LLM_KEY}"}, timeout=5)
            if response.status_code == 200 and response.json().get("data"):
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            pytest.fail(f"the inference-server did not start on port {port}", pytrace=False)
        time.sleep(0.2)
    model = response.json()["data"][0]["id"]
    yield {"base_url": base_url, "model": model}
    server.should_exit = True
    thread.join(60)


@pytest.fixture
def providers_json(inference_server, monkeypatch) -> str:
    """The inference-server as provider 'local', with an API key that must never reach the log."""
    monkeypatch.setenv("FLAWFORGE_TEST_LLM_KEY", LLM_KEY)
    return json.dumps({"local": {"base_url": inference_server["base_url"], "api_key_env": "FLAWFORGE_TEST_LLM_KEY"}})
