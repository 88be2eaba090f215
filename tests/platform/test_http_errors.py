"""Errors become HTTP answers one way: the status and code of their class, a short message, an excerpt of
the input at most; request bodies over the limit are refused before they are read whole (real uvicorn)."""
from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from fastapi.testclient import TestClient

from auth_support import API_TOKENS, AUTHORIZATION, TOKEN
from flawforge.assembly import platform_for, service_app
from flawforge.settings import Settings

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


class Served:
    """The metrics service under uvicorn on a free port."""

    def __init__(self, settings: Settings):
        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
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
