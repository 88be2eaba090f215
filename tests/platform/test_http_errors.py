"""Errors become HTTP answers one way: the status and code of their class, a short message, an excerpt of
the input at most; request bodies over the limit are refused before they are read whole (real uvicorn); JSON
that no answer can carry, or too many keys to validate cheaply, is a 422 before any route sees it."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from auth_support import API_TOKENS, AUTHORIZATION, TOKEN
from flawforge.assembly import platform_for, service_app
from flawforge.settings import Settings
from polling import wait_until_answers

LIMIT = 256 << 10


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "blobs"), api_tokens=API_TOKENS,
                    max_request_bytes=LIMIT, run_worker=False)


@pytest.fixture
def client(settings):
    with TestClient(service_app("metrics", platform_for(settings)),
                    headers=AUTHORIZATION) as client:
        yield client


def test_domain_errors_answer_with_their_status_and_code(client):
    missing = client.get("/jobs/deadbeef")
    assert (missing.status_code, missing.json()) == (404, {"detail": "no job 'deadbeef'", "code": "job_not_found"})
    review = client.get("/review/rounds/r9")
    assert review.status_code == 404 and review.json()["code"] == "review_not_found"


def test_a_validation_error_quotes_only_an_excerpt_of_the_input(client):
    huge = "x" * (100 << 10)
    for body in ({"pipeline": huge}, {"pipeline": "smoke", "params": {"count": huge}},
                 {"pipeline": "smoke", "params": {"count": [huge] * 2}}, [huge]):
        response = client.post("/jobs", json=body)
        assert response.status_code == 422, response.text[:300]
        assert len(response.content) < 2_000, len(response.content)
        finding = response.json()["detail"][0]
        assert finding["loc"][0] == "body" and finding["msg"]
    assert client.post("/jobs", json={"pipeline": huge}).json()["detail"][0]["input"].endswith("(102,400 characters)")


def test_a_small_invalid_input_is_quoted_whole(client):
    finding = client.post("/jobs", json={"pipeline": "smoke", "params": {"count": "many"}}).json()["detail"][0]
    assert finding["loc"] == ["body", "params", "count"] and finding["input"] == "many"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """The metrics service under uvicorn on a free port."""

    def __init__(self, settings: Settings):
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(service_app("metrics", platform_for(settings)),
                                                    host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "Served":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def request(self, head: str) -> socket.socket:
        conn = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        conn.sendall(head.encode())
        return conn


def read_status(conn: socket.socket) -> tuple[int, bytes]:
    """The status and body of the answer (its Content-Length)."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = conn.recv(65536)
        assert chunk, f"connection closed after {answer!r}"
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    length = next(int(line.split(":")[1]) for line in lines if line.lower().startswith("content-length:"))
    while len(body) < length:
        chunk = conn.recv(65536)
        assert chunk, "connection closed mid-answer"
        body += chunk
    return int(lines[0].split()[1]), body


def test_a_body_over_the_limit_is_refused_before_it_is_read(settings):
    with Served(settings) as served:
        # Announced: refused at once, though not one byte of the 100 MB follows.
        conn = served.request(f"POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                              f"Content-Type: application/json\r\nContent-Length: {100 << 20}\r\n\r\n")
        status, body = read_status(conn)
        conn.close()
        assert status == 413
        assert b"request body over 262,144 bytes" in body and b"body_too_large" in body

        # Streamed without a length: refused once the bytes passed the limit, before the client sends the rest.
        conn = served.request(f"POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                              "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * (64 << 10)
        for _ in range(LIMIT // len(chunk) + 2):
            conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        status, body = read_status(conn)  # the rest of the body is never sent: a server waiting for it times out
        conn.close()
        assert status == 413 and b"body_too_large" in body

        # Without a token nothing is read at all: 401 whatever the length says.
        conn = served.request(f"POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Length: {100 << 20}\r\n\r\n")
        assert read_status(conn)[0] == 401
        conn.close()

        # Under the limit, the request goes through.
        payload = json.dumps({"pipeline": "smoke", "params": {"count": 1}})
        conn = served.request(f"POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                              f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n{payload}")
        assert read_status(conn)[0] == 201
        conn.close()


def test_an_unknown_path_or_method_answers_in_its_prefix_format(client):
    from fastapi import FastAPI

    from flawforge.inference.errors import openai_error
    from flawforge.runtime.http_errors import ErrorAnswers

    missing = client.get("/no/such/route")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Invalid URL (GET /no/such/route)",
                                                           "code": "not_found"})
    app = FastAPI()
    app.post("/v1/chat/completions")(lambda: {})
    ErrorAnswers([("/v1", lambda a: openai_error(a.status, a.message, a.param, a.code))]).install(app)
    with TestClient(app) as openai_client:
        unknown = openai_client.post("/v1/nosuch", json={})
        assert unknown.status_code == 404
        assert unknown.json() == {"error": {"message": "Invalid URL (POST /v1/nosuch)", "type": "invalid_request_error",
                                            "param": None, "code": "not_found"}}
        wrong_method = openai_client.get("/v1/chat/completions")
        assert wrong_method.status_code == 405 and wrong_method.json()["error"]["code"] == "method_not_allowed"
        assert wrong_method.headers["allow"] == "POST"


# What Python's json reads but no answer can carry: non-finite numbers, and lone surrogates (escaped or as
# their UTF-8 bytes). Each was a 500.
HOSTILE = {"1e999": (b'{"x": 1e999}', "the number 1e999 is too large for a float"),
           "NaN": (b'{"x": [1, NaN]}', "NaN is not a number JSON allows"),
           "-Infinity": (b'{"x": -Infinity}', "-Infinity is not a number JSON allows"),
           "escaped surrogate": (b'{"x": "ok \\udc80"}', "a string holds a lone surrogate (U+DC80 at character 3)"),
           "surrogate bytes": (b'{"\xed\xa0\x80": 1}', "a string holds a lone surrogate (U+D800 at character 0)")}


def test_non_finite_numbers_and_lone_surrogates_are_422_on_every_json_route(service_client):
    _, client = service_client
    routes = [(path, method) for path, methods in client.get("/openapi.json").json()["paths"].items()
              for method, operation in methods.items()
              if "application/json" in operation.get("requestBody", {}).get("content", {})]
    assert ("/jobs", "post") in routes
    for path, method in routes:
        for body, problem in HOSTILE.values():
            response = client.request(method, re.sub(r"\{[^}]+\}", "x", path), content=body,
                                      headers={**AUTHORIZATION, "Content-Type": "application/json"})
            assert response.status_code == 422, (path, body, response.text)
            answer = response.json()  # the route's error format: its own, or OpenAI's under /v1
            assert (answer["error"]["message"] if "error" in answer else answer["detail"]).startswith(
                f"JSON body: {problem}"), (path, answer)
    # 12 MiB of them, as sent to the jobs API: the same one-line answer.
    flood = b'{"pipeline": "' + b"\\ud800" * (2 << 20) + b'"}'
    response = client.post("/jobs", content=flood, headers={**AUTHORIZATION, "Content-Type": "application/json"})
    assert response.status_code == 422 and len(response.content) < 300


def test_a_body_of_many_keys_or_deep_nesting_is_refused_before_validation(tmp_path):
    """500,000 unknown job parameters cost about 700 MiB for one 422 when validated; refused by their count,
    the service grows by what reading the body takes (measured: about 90 MiB)."""
    port = free_port()
    env = {**os.environ, "FLAWFORGE_BUS": "memory", "FLAWFORGE_BLOB_DIR": str(tmp_path / "blobs"),
           "FLAWFORGE_API_TOKENS": API_TOKENS}
    server = subprocess.Popen([sys.executable, "-m", "flawforge.cli.entry", "serve", "metrics", "--port", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_answers(f"{url}/healthz", server, timeout=60)

        def peak_rss_mib() -> float:
            status = Path(f"/proc/{server.pid}/status").read_text()
            return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024

        with httpx.Client(base_url=url, headers=AUTHORIZATION, timeout=120) as client:
            # One ordinary refusal first: what validating a small body takes is in the baseline.
            assert client.post("/jobs", json={"pipeline": "smoke", "params": {"count": "x"}}).status_code == 422
            before = peak_rss_mib()
            params = b",".join(b'"k%d": 0' % i for i in range(500_000))
            many = client.post("/jobs", content=b'{"pipeline": "smoke", "params": {' + params + b"}}",
                               headers={"Content-Type": "application/json"})
            grown = peak_rss_mib() - before
            assert many.status_code == 422, many.text[:300]
            assert many.json() == {"detail": "JSON body: an object has 500,000 keys (at most 1,000)",
                                   "code": "invalid_json"}
            assert grown < 200, f"the service grew by {grown:.0f} MiB"
            spread = client.post("/jobs", json={"pipeline": "smoke", "params": {
                "items": [{f"k{i}": 0 for i in range(500)} for _ in range(250)]}})
            assert spread.json()["detail"] == "JSON body: over 100,000 keys in all"
            deep = client.post("/jobs", content=b'{"pipeline": "smoke", "params": {"x": ' + b"[" * 100_000
                               + b"]" * 100_000 + b"}}", headers={"Content-Type": "application/json"})
            assert deep.status_code == 422 and deep.json()["detail"] == "JSON body: nested deeper than 64 levels"
            assert client.post("/jobs", json={"pipeline": "smoke", "params": {"count": 1}}).status_code == 201
    finally:
        server.terminate()
        server.wait(30)
