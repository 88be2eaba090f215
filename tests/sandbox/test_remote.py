"""On a stack only the trace-executor runs untrusted code: the sandbox the factory makes elsewhere calls it.

A real trace-executor app is served by uvicorn on a free local port; the template-loader's
validation and the mutator's mutant runs go to it, with the service token.
"""
from __future__ import annotations

import io
import json
import tarfile
import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest

from auth_support import API_TOKENS, TOKEN
from flawforge.assembly import platform_for, service_app
from flawforge.errors import InvalidInput
from flawforge.math.gsm8k import read_gsm8k
from flawforge.math.templates import TemplateFolder, problem_template
from flawforge.proto.math import BatchProblem, ProblemBatch, ValidatedTemplate
from flawforge.proto.sandbox import SandboxLimits
from flawforge.sandbox import Sandbox, SandboxUnavailable
from flawforge.sandbox.remote import RemoteSandbox
from flawforge.services.trace_executor.sandbox import sandbox_for
from flawforge.settings import Settings
from tests.review.review_support import free_port
from tests.sandbox import canary

ATTACKS = Path(__file__).parent / "attacks"
TEMPLATE = "from fractions import Fraction\n\ndef solve():\n    half = Fraction(1, 2)\n    answer = half * 3\n    return answer\n"


class ServedTraceExecutor:
    """The trace-executor's app served by uvicorn, as on a stack."""

    def __init__(self, blob_dir, **settings):
        import uvicorn


        self.settings = Settings(bus="memory", blob_backend="local", blob_dir=str(blob_dir), service="trace-executor",
                                 api_tokens=API_TOKENS, run_worker=False, sandbox_workers=2, **settings)
        self.platform = platform_for(self.settings)
        self.url = f"http://127.0.0.1:{free_port()}"
        self.server = uvicorn.Server(uvicorn.Config(service_app("trace-executor", self.platform),
                                                    host="127.0.0.1", port=int(self.url.rsplit(":", 1)[1]),
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="trace-executor", daemon=True)

    def __enter__(self) -> "ServedTraceExecutor":
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"the trace-executor did not start at {self.url}")
            time.sleep(0.05)
        return self

    @property
    def sandbox(self) -> Sandbox:
        """The service's own, in-process sandbox."""
        return sandbox_for(self.settings)

    def client_settings(self, tmp_path, **settings) -> Settings:
        return Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path / "client-blobs"),
                        sandbox_url=self.url, token=TOKEN, **settings)

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.platform.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with ServedTraceExecutor(tmp_path_factory.mktemp("trace-executor")) as served:
        yield served


def test_the_factory_makes_a_remote_sandbox_that_gives_what_the_service_would(served, tmp_path):
    with Sandbox.from_settings(served.client_settings(tmp_path)) as remote:
        assert isinstance(remote, RemoteSandbox)
        before = served.sandbox.counts.copy()
        traced = remote.trace_call(TEMPLATE)
        assert traced.outcome == "ok" and traced.final_values() == {"half": Fraction(1, 2), "answer": Fraction(3, 2)}
        batch = remote.trace_batch(TEMPLATE, [TEMPLATE.replace("* 3", "* 5"), "def solve(:"])
        assert [r.outcome for r in batch] == ["ok", "ok", "syntax_error"]
        assert batch[1].return_value.to_python() == Fraction(5, 2)
        tests = remote.run_tests("def double(x):\n    return 2 * x\n", "from mathy import double\n\n"
                                 "def test_ok():\n    assert double(2) == 4\n", "mathy")
        assert tests.all_passed
        forbidden = remote.execute((ATTACKS / "seccomp_keyctl.py").read_text(), "solve")
        assert forbidden.outcome == "forbidden"
        assert served.sandbox.counts["exec"] - before["exec"] >= 2 and served.sandbox.counts["batch"] > before["batch"]
        canary.check(remote)
        with pytest.raises(InvalidInput, match="FLAWFORGE_SANDBOX_MAX_TIMEOUT_S"):
            remote.execute("x = 1", limits=SandboxLimits(timeout_s=31))


def project_archive(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"project-1.0/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_projects_suite_runs_in_the_trace_executor(served, tmp_path):
    archive = project_archive({"mod.py": "def double(x):\n    return 2 * x\n",
                               "test_mod.py": "from mod import double\n\ndef test_ok():\n    assert double(2) == 4\n\n"
                                              "def test_bad():\n    assert double(2) == 5\n"})
    suites = sandbox_for(served.settings, suites=True)  # pytest preloaded, strings hashed with a fixed seed
    with Sandbox.from_settings(served.client_settings(tmp_path)) as remote:
        before = suites.counts["suite"]
        run = remote.run_suite(archive, args=["test_mod.py"])
        fixed = remote.run_suite(archive, {"mod.py": "def double(x):\n    return x + x\n"}, args=["test_mod.py"],
                                 coverage_files=["mod.py"])
    assert {t.name: t.outcome for t in run.tests} == {"test_mod.py::test_ok": "passed", "test_mod.py::test_bad": "failed"}
    assert fixed.passed == 1 and fixed.failed == 1 and suites.counts["suite"] == before + 2
    assert fixed.coverage["test_mod.py::test_ok"] == ["mod.py::double"]


def test_a_client_that_goes_away_frees_its_slots(served):
    """Two suites whose test sleeps (within every maximum: 30 s) take both suite slots; their clients give up
    after 3 s and close the connection. The service kills their units: another caller's one-test suite then runs
    at once, not after the sleepers' 30 s."""
    import base64

    import httpx

    from auth_support import AUTHORIZATION

    sleeping = project_archive({"mod.py": "import time\n\ndef nap():\n    time.sleep(60)\n",
                                "test_mod.py": "from mod import nap\n\ndef test_nap():\n    nap()\n"})
    body = {"archive": base64.b64encode(sleeping).decode(), "args": ["test_mod.py"], "limits": {"timeout_s": 30}}

    def give_up() -> None:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{served.url}/sandbox/suite", json=body, headers=AUTHORIZATION, timeout=3)

    greedy = [threading.Thread(target=give_up) for _ in range(2)]
    for thread in greedy:
        thread.start()
    for thread in greedy:
        thread.join()
    quick = project_archive({"test_one.py": "def test_one():\n    assert True\n"})
    started = time.monotonic()
    answer = httpx.post(f"{served.url}/sandbox/suite", headers=AUTHORIZATION, timeout=60, json={
        "archive": base64.b64encode(quick).decode(), "args": ["test_one.py"]})
    assert answer.status_code == 200 and answer.json()["passed"] == 1, answer.text
    assert time.monotonic() - started < 10


def test_a_remote_sandbox_that_cannot_be_used_is_unavailable(served, tmp_path):
    with pytest.raises(SandboxUnavailable, match="answered 401"):
        Sandbox.from_settings(served.client_settings(tmp_path).model_copy(update={"token": "wrong"}))
    with pytest.raises(SandboxUnavailable, match="did not answer"):
        Sandbox.from_settings(served.client_settings(tmp_path).model_copy(
            update={"sandbox_url": f"http://127.0.0.1:{free_port()}"}))
    with ServedTraceExecutor(tmp_path / "without-audit", sandbox_audit=False,
                             sandbox_required_layers="process") as weaker:
        with pytest.raises(SandboxUnavailable, match="lacks required isolation layer.*audit"):
            Sandbox.from_settings(weaker.client_settings(tmp_path))


def test_template_validation_runs_in_the_trace_executor(served, tmp_path, shared_data):
    from fastapi.testclient import TestClient

    folder = shared_data / "formalization-templates" / "tier1" / "4"
    body = {"problem_index": 4, "template_model": "google_gemini-2.5-flash",
            "gsm8k_answer": read_gsm8k(shared_data / "gsm8k" / "train.jsonl")[4].answer,
            "code": (folder / "google_gemini-2.5-flash.py").read_text(),
            "logical_steps": json.loads((folder / "google_gemini-2.5-flash.json").read_text())}
    settings = served.client_settings(tmp_path, api_tokens=API_TOKENS)
    before = served.sandbox.counts["batch"] + served.sandbox.counts["exec"]
    with TestClient(service_app("template-loader", platform_for(settings),
                               run_worker=False)) as loader:
        verdict = loader.post("/templates/validate", json=body, headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert verdict["valid"] and verdict["answer_check_status"] == "pass"
    assert served.sandbox.counts["batch"] + served.sandbox.counts["exec"] > before


def test_mutants_run_in_the_trace_executor(served, tmp_path, shared_data):
    """Problem 177's template is not straight-line code: its mutants run in a sandbox, here the service's."""
    from flawforge.services.mutator import worker

    settings = served.client_settings(tmp_path)
    platform = platform_for(settings)
    folder = TemplateFolder(shared_data / "formalization-templates")
    problem = read_gsm8k(shared_data / "gsm8k" / "train.jsonl")[177]
    tier = folder.tiers_of(177)[0]
    model = folder.in_preference_order(tier, 177, ["google_gemini-2.5-flash"])[0].model
    template = problem_template(problem, tier, model, *folder.files(tier, 177, model).read())
    ref = platform.store.put_content("math/templates", ValidatedTemplate(template=template).model_dump_json().encode()
                                     + b"\n", ".jsonl")
    message = ProblemBatch(job_id="job-remote", item="problems-177-177", templates=ref, families=["computational"],
                           problems=[BatchProblem(problem_index=177, tier=tier, template_model=model, seed=177)])
    before = served.sandbox.counts.copy()
    worker.sandbox.cache_clear()
    try:
        worker.generate_batch(settings.model_dump_json(), message.model_dump_json())
        assert isinstance(worker.sandbox(settings.model_dump_json()), RemoteSandbox)
    finally:
        if worker.sandbox.cache_info().currsize:
            worker.sandbox(settings.model_dump_json()).close()
        worker.sandbox.cache_clear()
        platform.close()
    assert served.sandbox.counts["exec"] > before["exec"] and served.sandbox.counts["batch"] > before["batch"]
