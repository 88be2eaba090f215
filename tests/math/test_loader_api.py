"""The template-loader's HTTP API on a real app and the real sandbox."""
from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from auth_support import API_TOKENS, AUTHORIZATION
from flawforge.math.gsm8k import read_gsm8k


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    from flawforge.assembly import platform_for, service_app
    from flawforge.settings import Settings

    settings = Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path_factory.mktemp("blobs")),
                        api_tokens=API_TOKENS)
    with TestClient(service_app("template-loader", platform_for(settings),
                               run_worker=False), headers=AUTHORIZATION) as test_client:
        yield test_client


def test_validate_a_corpus_template(client, shared_data):
    folder = shared_data / "formalization-templates" / "tier1" / "4"
    body = {"problem_index": 4, "template_model": "google_gemini-2.5-flash",
            "gsm8k_answer": read_gsm8k(shared_data / "gsm8k" / "train.jsonl")[4].answer,
            "code": (folder / "google_gemini-2.5-flash.py").read_text(),
            "logical_steps": json.loads((folder / "google_gemini-2.5-flash.json").read_text())}
    response = client.post("/templates/validate", json=body)
    assert response.status_code == 200
    verdict = response.json()
    assert verdict["valid"] and verdict["tier"] == "tier1" and verdict["answer_check_status"] == "pass"
    assert (verdict["structural_score"], verdict["semantic_score"]) == (1.0, 1.0)

    wrong = client.post("/templates/validate", json={**body, "gsm8k_answer": body["gsm8k_answer"] + "0"}).json()
    assert (wrong["valid"], wrong["reason"]) == (False, "answer_mismatch")


def test_bad_requests_name_the_field(client):
    response = client.post("/templates/validate", json={"gsm8k_answer": "no answer", "code": "", "logical_steps": []})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "gsm8k_answer"]
    response = client.post("/templates/validate", json={"gsm8k_answer": "#### 3", "code": "x"})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "logical_steps"]
    too_long = client.post("/templates/validate", json={"gsm8k_answer": "#### 3", "code": "x = 1\n" * 200_000,
                                                        "logical_steps": []})
    assert too_long.status_code == 422 and too_long.json()["detail"][0]["loc"] == ["body", "code"]
    assert "FLAWFORGE_SANDBOX_MAX_SOURCE_BYTES" in too_long.json()["detail"][0]["msg"]
