"""Helpers of the review tests: reviewer tokens, a round from candidates, a served metrics service."""
from __future__ import annotations

import socket
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

from flawforge.proto.review import RoundManifest
from flawforge.review.shortlist import review_items, select
from flawforge.review.store import ReviewStore

TOKENS = {"ana": "tok-ana-7f3c", "ben": "tok-ben-91d2", "cho": "tok-cho-44ab", "dev": "tok-dev-0e65"}  # reviewers
# The operator who reads the agreement report, and the services' token, which cannot review.
OTHER_TOKENS = {"ops": ("tok-ops-2b8e", "operator"), "svc": ("tok-svc-5d17", "service")}
API_TOKENS = ",".join([*(f"{name}:{token}:reviewer" for name, token in TOKENS.items()),
                       *(f"{name}:{token}:{role}" for name, (token, role) in OTHER_TOKENS.items())])


def make_round(reviews: ReviewStore, candidates, questions, *, name="r1", size=2, seed=7, reviewers_per_item=2,
               template_code=lambda candidate: None):
    items = review_items(select(candidates, size, seed), questions, template_code)
    manifest = RoundManifest(round=name, created_at=datetime.now(timezone.utc), seed=seed, size_per_error_type=size,
                             family="conceptual", reviewers_per_item=reviewers_per_item, source="test",
                             item_ids=[item.item_id for item in items])
    reviews.create_round(manifest, items)
    return items


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServedMetrics:
    """The metrics service (review API and page) served by uvicorn on a free local port."""

    def __init__(self, blob_dir: Path, **settings):
        import uvicorn

        from flawforge.assembly import platform_for, service_app
        from flawforge.settings import Settings

        self.settings = Settings(bus="memory", blob_backend="local", blob_dir=str(blob_dir), service="metrics",
                                 api_tokens=API_TOKENS, run_worker=False, **settings)
        self.platform = platform_for(self.settings)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(service_app("metrics", self.platform),
                                                    host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="metrics-review", daemon=True)

    def __enter__(self) -> "ServedMetrics":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"the metrics service did not start on port {self.port}")
            time.sleep(0.05)
        return self

    def client(self, reviewer: str | None) -> httpx.Client:
        """A client with the token of `reviewer` (or of "ops" or "svc"); None: without a token."""
        token = TOKENS[reviewer] if reviewer in TOKENS else OTHER_TOKENS[reviewer][0] if reviewer else None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url + "/review", headers=headers, timeout=30)

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.platform.close()
