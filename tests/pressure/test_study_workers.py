"""The study as work items on the real broker: two inference-server workers share one run, and its tables are
those of a run on one worker; a run started again hands out only what is missing."""
from __future__ import annotations

import json
import threading
import uuid

import pytest

from flawforge.assembly import platform_for
from flawforge.jobs.pipeline import pipelines
from flawforge.jobs.runner import run_job
from flawforge.jobs.store import JobStore
from flawforge.proto.jobs import JobState
from flawforge.proto.pressure_work import STUDY_UNIT
from flawforge.runtime.embedded import EmbeddedStack
from flawforge.runtime.service import Consumer
from flawforge.services.inference_server.worker import make_study_handler

# Three study runs of four prompts (eight batches, two patched prompts): a few minutes on a loaded machine.
pytestmark = [pytest.mark.rabbitmq, pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(1800)]

PROMPTS = [("What is the capital of France?", "Paris", 0.3), ("What color is the sky on a clear day?", "blue", 0.2),
           ("What do bees make?", "honey", 0.1), ("What is frozen water called?", "ice", 0.05)]
PARAMS = dict(samples=2, greedy_tokens=3, sample_tokens=2, batch_prompts=1, decompose_first=-3, patch_subset=1,
              bootstrap_resamples=10)


@pytest.fixture
def prompts_file(tmp_path):
    from flawforge.proto.pressure import PromptRecord, p0_bin_of

    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(PromptRecord(prompt_id=f"p{i}", category="facts", question_text=q, target_word=x, v_score=0,
                                         p0=p0, p1=0.0, p0_bin=p0_bin_of(p0), s_score=0).model_dump_json() + "\n"
                            for i, (q, x, p0) in enumerate(PROMPTS)))
    return str(path)


def settings_for(study_host, amqp_url: str, blobs, prefix: str):
    # The model settings of the session's host: every worker here serves that one loaded model.
    return study_host.settings.model_copy(update={
        "bus": "rabbitmq", "amqp_url": amqp_url, "queue_prefix": prefix, "prefetch": 1, "blob_dir": str(blobs)})


def counted(worked: list[str], name: str) -> Consumer:
    """The inference-server's study consumer, noting which worker took each item."""
    def make_handler(platform):
        handle = make_study_handler(platform)

        def counting(message):
            handle(message)
            worked.append(name)
        return counting

    return Consumer(queue=STUDY_UNIT.queue, make_handler=make_handler)


def study(settings, workers: int, prompts: str, **changes) -> tuple[dict, list[str], str]:
    """One study job run against `workers` workers, each on its own broker connection: its tables, which worker
    took each item, and the job's state."""
    worked: list[str] = []
    job_platform = platform_for(settings)
    stacks = [EmbeddedStack(platform_for(settings), [counted(worked, f"w{n}")]) for n in range(workers)]
    for stack in stacks:
        stack.__enter__()
    try:
        jobs = JobStore(job_platform.store)
        job_id = jobs.create("pressure-study", {"prompts": prompts, **PARAMS, **changes}).job_id
        runner = threading.Thread(target=run_job, args=(job_platform, pipelines()["pressure-study"], job_id))
        runner.start()
        runner.join(1500)
        status = jobs.get(job_id)
        tables = json.loads(jobs.artifact(job_id, "tables.json")) if status.state == JobState.succeeded else {}
        return tables, worked, status.state
    finally:
        for stack in stacks:
            stack.__exit__(None, None, None)
        job_platform.bus.delete(STUDY_UNIT.queue)
        job_platform.close()


def test_two_workers_give_the_tables_of_one_and_a_stopped_run_hands_out_only_what_is_missing(
        study_host, study_lm, amqp_url, tmp_path, prompts_file):
    prefix = f"t{uuid.uuid4().hex[:8]}."
    # One worker, stopped after two of the four batches (a killed run), then run again on the same store: the
    # second run hands out only the two other batches, then the patched prompt.
    alone = settings_for(study_host, amqp_url, tmp_path / "one", prefix)
    _, worked, state = study(alone, 1, prompts_file, stop_after_batches=2)
    assert state == JobState.failed and worked == ["w0", "w0"]
    one, worked, state = study(alone, 1, prompts_file)
    assert state == JobState.succeeded and worked == ["w0"] * 3

    # Two workers on a fresh store: each takes items, and every number but the timings is the same.
    two, worked, state = study(settings_for(study_host, amqp_url, tmp_path / "two", prefix), 2, prompts_file)
    assert state == JobState.succeeded and len(worked) == 4 + 1 and set(worked) == {"w0", "w1"}
    timing_one, timing_two = one.pop("run_time"), two.pop("run_time")
    assert one == two
    assert (timing_one["invocations"], timing_two["invocations"]) == (2, 1)
