"""The study job and its servers meet through the study's work unit: a server's stored result must name the prompts
its item was given."""
from __future__ import annotations

import pytest

from flawforge.assembly import platform_for
from flawforge.errors import FlawforgeError
from flawforge.jobs.context import JobContext, item_key
from flawforge.jobs.store import JobStore
from flawforge.pipelines.pressure_study import PressureStudyParams, hand_out
from flawforge.proto.pressure import PromptRecord
from flawforge.proto.pressure_work import STUDY_UNIT, StudyWork, StudyWorkResult
from flawforge.runtime.service import Actor, Workers
from flawforge.settings import Settings

RECORD = PromptRecord(prompt_id="p0", category="facts", question_text="What do bees make?", target_word="honey",
                      v_score=0, p0=0.1, p1=0.0, p0_bin="0.0-0.2", s_score=0)


@pytest.fixture
def ctx(tmp_path):
    platform = platform_for(Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path)))
    yield JobContext(platform, JobStore(platform.store).create("pressure-study", {"demo": True}).job_id)
    platform.close()


def server_naming(prompt_ids: list[str]) -> Actor:
    """A server that stores, for any item, a result naming these prompts."""
    def make_handler(platform):
        def handle(message: StudyWork) -> None:
            platform.store.put(item_key(message.job_id, message.item),
                               StudyWorkResult(prompt_ids=prompt_ids).model_dump_json().encode())
        return handle

    return Actor(STUDY_UNIT, make_handler)


def test_an_item_whose_result_names_other_prompts_fails_the_job_naming_it(ctx):
    workers = Workers(ctx.platform, list(server_naming(["p1"]).consumers())).start()
    try:
        with pytest.raises(FlawforgeError, match=rf"work item \w+-batch-00000 of job {ctx.job_id} holds the results "
                                                 r"of prompts \['p1'\], not of \['p0'\]"):
            hand_out(ctx, "passes", "pressure/runs/r", "m", PressureStudyParams(demo=True).passes(),
                     [("batch-00000", [RECORD], 0)], "prompts")
    finally:
        workers.stop()
