"""The inference-server service."""
from flawforge.runtime.service import ServiceSpec

SERVICE = ServiceSpec(
    name="inference-server",
    port=8005,
    description="Local model server: OpenAI-compatible API and research endpoints.",
)
