"""The mutator service."""
from flawforge.runtime.service import ServiceSpec
from flawforge.services.mutator.debugging import LIBRARY_ACTOR
from flawforge.services.mutator.worker import PROBLEM_ACTOR, sandbox_ready

SERVICE = ServiceSpec(
    name="mutator",
    port=8002,
    description="Applies computational and conceptual mutations to templates.",
    actors=(PROBLEM_ACTOR, LIBRARY_ACTOR),
    readiness_checks=(sandbox_ready,),
)
