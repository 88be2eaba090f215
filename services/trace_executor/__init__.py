"""The trace-executor service."""
from flawforge.runtime.service import ServiceSpec

SERVICE = ServiceSpec(
    name="trace-executor",
    port=8003,
    description="Runs untrusted Python in a sandbox and returns typed traces and test outcomes.",
)
