"""The registry of pipelines a job can run."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from pydantic import BaseModel

from flawforge.proto.jobs import job_queue

if TYPE_CHECKING:
    from flawforge.jobs.context import JobContext

# Each pipeline's module, which registers it; imported lazily so light services, and a run of one pipeline, stay
# light (a run of math-errors imports neither the model gateway nor the pressure study).
PIPELINE_MODULES = {"smoke": "flawforge.pipelines.smoke", "templates": "flawforge.pipelines.templates",
                    "math-errors": "flawforge.pipelines.math_errors",
                    "debug-conversations": "flawforge.pipelines.debug_conversations",
                    "pressure-dataset": "flawforge.pipelines.pressure_dataset",
                    "pressure-study": "flawforge.pipelines.pressure_study"}


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
    # The services an embedded run starts beside the owner (None: every embedded service).
    services: tuple[str, ...] | None = None

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
    for module in PIPELINE_MODULES.values():
        importlib.import_module(module)
    return dict(_PIPELINES)


def pipeline_named(name: str) -> Pipeline:
    """One pipeline, importing its own module only; KeyError names the known ones."""
    if name not in PIPELINE_MODULES:
        raise KeyError(f"unknown pipeline {name!r}; known: {', '.join(PIPELINE_MODULES)}")
    importlib.import_module(PIPELINE_MODULES[name])
    return _PIPELINES[name]
