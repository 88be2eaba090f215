"""The metrics service: aggregates results and hosts the smoke pipeline's worker."""
from flawforge.pipelines.smoke import DIGEST_CONSUMER
from flawforge.runtime.service import ServiceSpec

SERVICE = ServiceSpec(
    name="metrics",
    port=8006,
    description="Aggregates results, catalogs and reports.",
    consumers=(DIGEST_CONSUMER,),
)
