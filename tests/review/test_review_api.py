"""The review API of the metrics service, served by uvicorn and called over HTTP."""
from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from review_support import TOKENS, ServedMetrics, make_round

from flawforge.blobstore import LocalBlobStore
from flawforge.review.store import ReviewStore


@pytest.fixture
def blob_dir(tmp_path):
    return tmp_path / "blobs"


@pytest.fixture
def items(blob_dir, candidates, questions):
    return make_round(ReviewStore(LocalBlobStore(blob_dir)), candidates, questions, size=2, reviewers_per_item=2)


@pytest.fixture
def served(blob_dir, items):
    with ServedMetrics(blob_dir) as served:
        yield served


def body(item, kind, **extra):
    return {"candidate_id": item["candidate"]["id"], "kind": kind, **extra}


def test_every_review_endpoint_needs_a_known_bearer_token(served):
    anonymous = served.client(None)
    for method, path in [("GET", "/whoami"), ("GET", "/rounds"), ("POST", "/rounds/r1/next"),
                         ("GET", "/rounds/r1/decisions"), ("GET", "/rounds/r1/agreement"),
                         ("POST", "/rounds/r1/items/x/decisions"), ("POST", "/rounds/r1/undo")]:
        response = anonymous.request(method, path, json={} if method == "POST" else None)
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer", path
        assert response.json()["detail"] == "missing bearer token"
    for header in ("Bearer tok-nobody", f"Basic {TOKENS['ana']}", f"Bearer {TOKENS['ana']}x"):
        response = anonymous.get("/whoami", headers={"Authorization": header})
        assert response.status_code == 401, header
    assert {served.client(name).get("/whoami").json()["reviewer"] for name in TOKENS} == set(TOKENS)


def test_the_page_and_its_files_are_served_without_a_token(served):
    page = served.client(None).get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'src="static/review.js"' in page.text and "<kbd>a</kbd> Accept" in page.text
    assert served.client(None).get("/static/review.js").headers["content-type"].startswith("text/javascript")
    assert served.client(None).get("/static/other.js").status_code == 404


def test_a_reviewer_cannot_act_as_another(served):
    ana, ben = served.client("ana"), served.client("ben")
    item = ana.post("/rounds/r1/next").json()["item"]
    response = ana.post(f"/rounds/r1/items/{item['item_id']}/decisions", json=body(item, "reject", reviewer="ben"))
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "reviewer"]
    decision = ana.post(f"/rounds/r1/items/{item['item_id']}/decisions", json=body(item, "reject")).json()
    assert decision["reviewer"] == "ana"
    assert ben.get("/rounds/r1/decisions", params={"reviewer_name": "ben"}).json() == []
    # ben's own decision on the same item is his, and does not touch ana's.
    ben_decision = ben.post(f"/rounds/r1/items/{item['item_id']}/decisions", json=body(item, "accept")).json()
    assert ben_decision["reviewer"] == "ben" and ben_decision["slot"] != decision["slot"]
    assert [d["kind"] for d in ana.get("/rounds/r1/decisions", params={"reviewer_name": "ana"}).json()] == ["reject"]


def test_accept_reject_skip_edit_and_the_rules_over_http(served, items):
    ana = served.client("ana")
    first = ana.post("/rounds/r1/next").json()
    item = first["item"]
    assert item["item_id"] == items[0].item_id and first["progress"]["reviewer_available"] == len(items) - 1
    url = f"/rounds/r1/items/{item['item_id']}/decisions"
    assert ana.post(url, json=body(item, "accept")).status_code == 201
    again = ana.post(url, json=body(item, "reject"))
    assert again.status_code == 409 and "already decided" in again.json()["detail"]
    other = ana.post("/rounds/r1/next").json()["item"]
    assert other["item_id"] != item["item_id"]
    other_url = f"/rounds/r1/items/{other['item_id']}/decisions"
    wrong = ana.post(other_url, json={"candidate_id": item["candidate"]["id"], "kind": "accept"})
    assert wrong.status_code == 409 and "reload the item" in wrong.json()["detail"]
    assert ana.post(other_url, json=body(other, "edit")).status_code == 422
    assert ana.post(other_url, json=body(other, "maybe")).json()["detail"][0]["loc"] == ["body", "kind"]
    edited = other["candidate"]["flawed_solution"].replace("\n", "\n\n", 1)
    assert "identical" not in ana.post(other_url, json=body(other, "edit", edited_solution=edited + "x")).text
    assert ana.get("/rounds/nope/progress").status_code == 404
    assert ana.get("/rounds/r1/items/legacy-none").status_code == 404
    kinds = [d["kind"] for d in ana.get("/rounds/r1/decisions").json()]
    assert kinds == ["accept", "edit"]
    while (response := ana.post("/rounds/r1/next")).status_code == 200:
        nxt = response.json()["item"]
        ana.post(f"/rounds/r1/items/{nxt['item_id']}/decisions", json=body(nxt, "skip"))
    assert response.status_code == 204
    progress = ana.get("/rounds/r1/progress").json()
    assert progress["reviewer_decided"] == len(items) and progress["reviewer_available"] == 0
    assert progress["reviews_done"] == 2 and progress["reviews_needed"] == 2 * len(items)


def test_a_reviewer_undoes_their_own_last_decision_over_http(served, items):
    ana, ben, svc = served.client("ana"), served.client("ben"), served.client("svc")
    item = ana.post("/rounds/r1/next").json()["item"]
    ana.post(f"/rounds/r1/items/{item['item_id']}/decisions", json=body(item, "reject")).raise_for_status()
    assert svc.post("/rounds/r1/undo").status_code == 403
    nothing = ben.post("/rounds/r1/undo")  # ben's undo never touches ana's decision
    assert nothing.status_code == 404 and "'ben' has no decision to undo" in nothing.json()["detail"]
    back = ana.post("/rounds/r1/undo")
    assert back.status_code == 200 and back.json()["item"]["item_id"] == item["item_id"]
    assert ana.get("/rounds/r1/decisions").json() == []
    again = ana.post("/rounds/r1/undo")
    assert again.status_code == 409 and "undone already" in again.json()["detail"]
    ana.post(f"/rounds/r1/items/{item['item_id']}/decisions", json=body(item, "accept")).raise_for_status()
    assert [(d["item_id"], d["kind"]) for d in ana.get("/rounds/r1/decisions").json()] == [(item["item_id"], "accept")]


def test_agreement_and_accept_rates_over_http(served, items):
    ana, ben = served.client("ana"), served.client("ben")
    # ana accepts the first half; ben agrees except on one item: p_o 0.9, p_e 0.5, Cohen's kappa 0.8;
    # Fleiss pools both raters' shares (9 of 20 accepts): p_e 0.45^2 + 0.55^2 = 0.505.
    for client, accepts in ((ana, len(items) // 2), (ben, len(items) // 2 - 1)):
        while (response := client.post("/rounds/r1/next")).status_code == 200:
            item = response.json()["item"]
            client.post(f"/rounds/r1/items/{item['item_id']}/decisions",
                        json=body(item, "accept" if item["order"] < accepts else "reject")).raise_for_status()
    report = served.client("ops").get("/rounds/r1/agreement").json()
    assert report["items_multi_rated"] == len(items) == 10
    (pair,) = report["pairs"]
    assert (pair["reviewer_a"], pair["reviewer_b"], pair["items"]) == ("ana", "ben", 10)
    assert pair["observed_agreement"] == pytest.approx(0.9) and pair["cohen_kappa"] == pytest.approx(0.8)
    assert report["overall"]["fleiss_kappa"] == pytest.approx(0.798, abs=1e-3)  # (0.9 - 0.505) / (1 - 0.505)
    assert {r["reviewer"]: r["accept_rate"] for r in report["reviewers"]} == {"ana": 0.5, "ben": 0.4}
    assert {t["error_type"]: t["items"] for t in report["by_error_type"]} == Counter(
        i.candidate.error_type for i in items)


def test_concurrent_reviewers_racing_over_http(served, items):
    reviewers = ["ana", "ben", "cho", "dev", "ana", "ben"]
    barrier = threading.Barrier(len(reviewers))

    def work(reviewer):
        client = served.client(reviewer)
        barrier.wait()
        statuses = Counter()
        while (response := client.post("/rounds/r1/next")).status_code == 200:
            item = response.json()["item"]
            statuses[client.post(f"/rounds/r1/items/{item['item_id']}/decisions",
                                 json=body(item, "accept")).status_code] += 1
        return statuses

    with ThreadPoolExecutor(len(reviewers)) as pool:
        statuses = sum(pool.map(work, reviewers), Counter())
    decisions = served.client("ops").get("/rounds/r1/decisions").json()
    assert statuses[201] == len(decisions) == 2 * len(items) and set(statuses) <= {201, 409}
    assert Counter(d["item_id"] for d in decisions) == {item.item_id: 2 for item in items}
    assert max(Counter((d["item_id"], d["reviewer"]) for d in decisions).values()) == 1
    # Every item has its two reviewers now: a third is refused, whoever asks.
    item = items[0]
    outsider = next(name for name in TOKENS if name not in {d["reviewer"] for d in decisions
                                                            if d["item_id"] == item.item_id})
    full = served.client(outsider).post(f"/rounds/r1/items/{item.item_id}/decisions",
                                        json={"candidate_id": item.candidate.id, "kind": "accept"})
    assert full.status_code == 409 and "no open review slot" in full.json()["detail"]


def test_a_restart_in_the_middle_loses_nothing(blob_dir, items):
    with ServedMetrics(blob_dir) as first:
        ana = first.client("ana")
        for kind in ("accept", "reject"):
            item = ana.post("/rounds/r1/next").json()["item"]
            ana.post(f"/rounds/r1/items/{item['item_id']}/decisions", json=body(item, kind)).raise_for_status()
        held = ana.post("/rounds/r1/next").json()
        before = ana.get("/rounds/r1/decisions").json()
        progress = ana.get("/rounds/r1/progress").json()
    with ServedMetrics(blob_dir) as second:
        ana = second.client("ana")
        assert ana.get("/rounds/r1/decisions").json() == before and len(before) == 2
        assert ana.get("/rounds/r1/progress").json() == progress
        resumed = ana.post("/rounds/r1/next").json()
        assert resumed["claim"] == held["claim"]
        item = resumed["item"]
        assert ana.post(f"/rounds/r1/items/{item['item_id']}/decisions", json=body(item, "accept")).status_code == 201
        assert len(ana.get("/rounds/r1/decisions").json()) == 3


def test_reviewers_only_review_services_never_decide_operators_read_the_agreement(served, items):
    ana, svc, ops = served.client("ana"), served.client("svc"), served.client("ops")
    jobs = httpx.post(f"{served.url}/jobs", headers=ana.headers, json={"pipeline": "smoke", "params": {"count": 1}})
    assert jobs.status_code == 403 and jobs.json() == {
        "detail": "a reviewer token may not call POST /jobs (it is for operator and service tokens)", "code": "forbidden"}
    assert httpx.get(f"{served.url}/jobs", headers=ana.headers).status_code == 403
    item = ana.post("/rounds/r1/next").json()["item"]
    refused = svc.post(f"/rounds/r1/items/{item['item_id']}/decisions", json=body(item, "accept"))
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden"
    assert svc.post("/rounds/r1/next").status_code == 403 and svc.get("/rounds/r1/decisions").status_code == 403
    assert ana.get("/rounds/r1/agreement").status_code == 403
    assert ops.get("/rounds/r1/agreement").json()["round"] == "r1"
    assert httpx.get(f"{served.url}/jobs", headers=svc.headers).status_code == 200
    assert ops.get("/rounds/r1/decisions").json() == []  # nothing was decided by the refused requests


def test_a_reviewer_reads_others_decisions_only_on_items_they_decided(served, items):
    ana, ben, ops = served.client("ana"), served.client("ben"), served.client("ops")
    first = ana.post("/rounds/r1/next").json()["item"]
    ana.post(f"/rounds/r1/items/{first['item_id']}/decisions",
             json=body(first, "reject", comment="the flaw is in line 2")).raise_for_status()
    assert [d["reviewer"] for d in ana.get("/rounds/r1/decisions").json()] == ["ana"]
    # ben has not decided that item: ana's verdict and comment are not his to read, by any filter.
    assert ben.get("/rounds/r1/decisions").json() == []
    assert ben.get("/rounds/r1/decisions", params={"reviewer_name": "ana"}).json() == []
    assert "the flaw is in line 2" in ops.get("/rounds/r1/decisions").text
    ben.post(f"/rounds/r1/items/{first['item_id']}/decisions", json=body(first, "accept")).raise_for_status()
    seen = ben.get("/rounds/r1/decisions").json()
    assert sorted((d["reviewer"], d["kind"]) for d in seen) == [("ana", "reject"), ("ben", "accept")]
    assert [d["comment"] for d in ben.get("/rounds/r1/decisions", params={"reviewer_name": "ana"}).json()] == [
        "the flaw is in line 2"]
