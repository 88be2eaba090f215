"""What every service serves for operators: /docs from its own assets, /metrics of requests, jobs and sandbox;
without a token, /metrics and /readyz say nothing of jobs, pipelines, models or addresses."""
from __future__ import annotations

import json
import re
import socket
import time

from auth_support import API_TOKENS, AUTHORIZATION, TOKEN
from fastapi.testclient import TestClient

from flawforge.assembly import platform_for, service_app
from flawforge.sandbox import Sandbox
from flawforge.settings import Settings


def metric(text: str, name: str, **labels) -> float:
    """A sample's value in a Prometheus exposition (0 when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        match = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if match and ",".join(sorted(match.group(1).split(","))) == wanted:
            return float(match.group(2))
    return 0.0


def client_for(tmp_path, service: str = "metrics", **settings) -> TestClient:
    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "blobs"),
                        **{"api_tokens": API_TOKENS, **settings})
    return TestClient(service_app(service, platform_for(settings)))


def test_docs_load_every_asset_from_the_service_itself(tmp_path):
    with client_for(tmp_path) as client:
        page = client.get("/docs")
        assert page.status_code == 200
        assets = re.findall(r"""(?:src|href)=['"]([^'"]+)['"]""", page.text)
        assert assets and not [a for a in assets if "://" in a or a.startswith("//")], assets
        for asset in assets:  # no token needed: the page is public, and so is what it loads
            answer = client.get(asset)
            assert answer.status_code == 200 and len(answer.content) > 500, asset
        assert client.get("/openapi.json").json()["info"]["title"] == "flawforge metrics"
        assert client.get("/redoc").status_code in (401, 404)  # ReDoc would load from a CDN


def test_metrics_count_requests_by_route_and_status_and_jobs_by_state(tmp_path):
    with client_for(tmp_path) as client:
        before = client.get("/metrics", headers=AUTHORIZATION).text
        assert client.get("/jobs/0123abcd", headers=AUTHORIZATION).status_code == 404
        assert client.get("/jobs").status_code == 401
        job = client.post("/jobs", json={"pipeline": "smoke", "params": {"count": 3}}, headers=AUTHORIZATION).json()
        deadline = time.monotonic() + 20
        while client.get(f"/jobs/{job['job_id']}", headers=AUTHORIZATION).json()["state"] != "succeeded":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        after = client.get("/metrics", headers=AUTHORIZATION).text
        public = client.get("/metrics").text

    def grew(name: str, by: float = 1, **labels) -> bool:
        return metric(after, name, **labels) - metric(before, name, **labels) >= by

    assert grew("flawforge_http_requests_total", service="metrics", method="GET", route="/jobs/{job_id}", status="404")
    # Refused before routing: counted with its status, under one label for every such path.
    assert grew("flawforge_http_requests_total", service="metrics", method="GET", route="unmatched", status="401")
    assert grew("flawforge_http_requests_total", service="metrics", method="GET", route="/metrics", status="200")
    assert grew("flawforge_http_request_seconds_count", service="metrics", method="GET", route="/jobs/{job_id}")
    for state in ("queued", "running", "succeeded"):
        assert grew("flawforge_jobs_total", pipeline="smoke", state=state), state
    assert metric(after, "flawforge_jobs_running", pipeline="smoke") == 0
    # Without a token: requests by route and status, and the process's own; nothing of jobs or pipelines.
    assert metric(public, "flawforge_http_requests_total", service="metrics", method="GET", route="/metrics",
                  status="200") >= 1
    assert "process_cpu_seconds_total" in public or "python_gc_objects_collected_total" in public
    assert "flawforge_jobs" not in public and "smoke" not in public and "flawforge_messages" not in public


def test_readiness_names_an_address_only_to_an_operator_or_service_token(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there: the provider is unreachable
    tokens = f"{API_TOKENS},ana:tok-ana-3c1f:reviewer,svc:tok-svc-77d0:service"
    with client_for(tmp_path, "llm-gateway", api_tokens=tokens,
                    llm_providers=json.dumps({"local": {"base_url": f"http://127.0.0.1:{port}/v1", "models": ["m"]}}),
                    ) as client:
        for headers in ({}, {"Authorization": "Bearer tok-ana-3c1f"}):
            public = client.get("/readyz", headers=headers)
            assert public.status_code == 503 and public.json()["checks"]["llm_providers"] == "failed"
            assert str(port) not in public.text
            assert "flawforge_model" not in client.get("/metrics", headers=headers).text
        for token in (TOKEN, "tok-svc-77d0"):
            detailed = client.get("/readyz", headers={"Authorization": f"Bearer {token}"}).json()
            assert detailed["checks"]["llm_providers"].startswith("failed: no provider reachable (local: ")
            assert f"127.0.0.1:{port}" in detailed["checks"]["llm_providers"]
        # A token sent to a public route is checked: a wrong one is refused, not quietly the public view.
        assert client.get("/readyz", headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_metrics_count_sandbox_outcomes(tmp_path):
    with client_for(tmp_path) as client, Sandbox.from_settings(Settings()) as sandbox:
        before = client.get("/metrics", headers=AUTHORIZATION).text
        assert sandbox.execute("x = 1").outcome == "ok"
        assert sandbox.execute("1 / 0").outcome == "error"
        after = client.get("/metrics", headers=AUTHORIZATION).text
    for outcome in ("ok", "error"):
        assert (metric(after, "flawforge_sandbox_units_total", outcome=outcome)
                - metric(before, "flawforge_sandbox_units_total", outcome=outcome)) == 1
