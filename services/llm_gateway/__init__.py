"""The llm-gateway service."""
from flawforge.runtime.service import ServiceSpec

SERVICE = ServiceSpec(
    name="llm-gateway",
    port=8004,
    description="One door for every model call: providers, batches, structured output, cache.",
)
