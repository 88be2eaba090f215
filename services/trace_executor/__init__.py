"""The trace-executor service: the sandbox over HTTP (/sandbox/...) and the bus (queue sandbox.execute)."""
from flawforge.runtime.service import ServiceSpec
from flawforge.services.trace_executor.sandbox import sandbox_isolation
from flawforge.services.trace_executor.worker import SANDBOX_CONSUMER

SERVICE = ServiceSpec(
    name="trace-executor",
    port=8003,
    description="Runs untrusted Python in a sandbox and returns typed traces and test outcomes.",
    routers=("flawforge.services.trace_executor.api:sandbox_router",),
    consumers=(SANDBOX_CONSUMER,),
    readiness_checks=(sandbox_isolation,),
)
