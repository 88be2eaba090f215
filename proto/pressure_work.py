"""The semantic-pressure study's work items: the job (in one inference-server) cuts the run into batches of
prompts and hands each to whichever inference-server takes it from the queue, so several servers run one study."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from flawforge.proto.base import BlobRef, Message

STUDY_QUEUE = "pressure.study"  # StudyWork


class StudyWork(Message):
    """Prompts of one study run for one inference-server: the model passes of a batch (greedy completions, the
    traced pass at the decision step and the samples), or the activation patching of some prompts. The server
    stores each result in the run's state, where a later run of the same inputs finds it, then marks the item
    done at its item key."""

    kind = "pressure.study_work"
    job_id: str
    item: str = Field(description="Its name among the job's work items (named by the job's attempt).")
    stage: Literal["passes", "patching"]
    run_key: str = Field(description="Where the run keeps its state in the blob store (pressure/runs/<hash>).")
    model: str = Field(description="The model the run is of: a server that serves another refuses the item.")
    batch: int | None = Field(None, ge=0, description="passes: the batch's number in the run (its result is "
                                                       "batches/<number>.json there).")
    prompts: BlobRef = Field(description="JSON lines: the PromptRecords of the item, in the run's order.")
    params: dict[str, Any] = Field(description="The study's parameters (PressureStudyParams), as the job has them.")
