"""The registry of pipelines a job can run."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from pydantic import BaseModel

from flawforge.proto.jobs import job_queue

if TYPE_CHECKING:
    from flawforge.jobs.context import JobContext

# Modules that register pipelines; imported lazily so light services stay light.
PIPELINE_MODULES = ("flawforge.pipelines.smoke", "flawforge.pipelines.templates", "flawforge.pipelines.math_errors",
                    "flawforge.pipelines.debug_conversations", "flawforge.pipelines.pressure_dataset",
                    "flawforge.pipelines.pressure_study")


@dataclass(frozen=True)
class Pipeline:
    name: str
    description: str
    params: type[BaseModel]
    owner: str  # the service whose worker runs the job
    run: Callable[["JobContext", BaseModel], None]
    # Keeps state in the blob store that a later run reads (finished work, the model-reply cache, claimed
    # catalog entries): embedded runs keep that store in OUT/.blobs instead of a scratch folder.
    resumable: bool = False

    @property
    def queue(self) -> str:
        return job_queue(self.name)


_PIPELINES: dict[str, Pipeline] = {}


def register(pipeline: Pipeline) -> Pipeline:
    if pipeline.name in _PIPELINES:
        raise ValueError(f"pipeline {pipeline.name!r} registered twice")
    _PIPELINES[pipeline.name] = pipeline
    return pipeline


def pipelines() -> dict[str, Pipeline]:
    for module in PIPELINE_MODULES:
        importlib.import_module(module)
    return dict(_PIPELINES)
