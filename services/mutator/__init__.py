"""The mutator service."""
from flawforge.runtime.service import ServiceSpec

SERVICE = ServiceSpec(
    name="mutator",
    port=8002,
    description="Applies computational and conceptual mutations to templates.",
)
