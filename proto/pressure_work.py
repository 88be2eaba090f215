"""The semantic-pressure study's work items: the job (in one inference-server) cuts the run into batches of
prompts and hands each to whichever inference-server takes it from the queue, so several servers run one study."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from flawforge.proto.base import BlobRef, Message, Model, WorkUnit


class PassParams(Model):
    """The study's parameters that its model passes and its patching follow: those of the job's parameters
    (PressureStudyParams, which bounds them) that a server needs to run a work item."""

    samples: int
    temperature: float
    top_p: float
    seed: int
    greedy_tokens: int
    sample_tokens: int
    batch_prompts: int
    decompose_first: int
    decompose_last: int


class StudyWork(Message):
    """Prompts of one study run for one inference-server: the model passes of a batch (greedy completions, the
    traced pass at the decision step and the samples), or the activation patching of some prompts. The server
    stores each result in the run's state, where a later run of the same inputs finds it, then stores a
    StudyWorkResult at the item key."""

    kind = "pressure.study_work"
    job_id: str
    item: str = Field(description="Its name among the job's work items (named by the job's attempt).")
    stage: Literal["passes", "patching"]
    run_key: str = Field(description="Where the run keeps its state in the blob store (pressure/runs/<hash>).")
    model: str = Field(description="The model the run is of: a server that serves another refuses the item.")
    batch: int | None = Field(None, ge=0, description="passes: the batch's number in the run (its result is "
                                                       "batches/<number>.json there).")
    prompts: BlobRef = Field(description="JSON lines: the PromptRecords of the item, in the run's order.")
    params: PassParams


class StudyWorkResult(Model):
    """What a StudyWork item stores at its item key once its results are in the run's state. The results stay
    there, not here: a later run of the same inputs finds them whichever job computed them, so the job reads
    every result from the run's state."""

    prompt_ids: list[str] = Field(description="The prompts whose results (the batch's passes, or each prompt's "
                                              "patching) the run's state now holds, in the item's order.")


STUDY_UNIT = WorkUnit(queue="pressure.study", message=StudyWork, result=StudyWorkResult)
