"""The metrics service: aggregates results and hosts the smoke pipeline's worker and human review."""
from flawforge.pipelines.smoke import DIGEST_CONSUMER
from flawforge.runtime.service import ServiceSpec
from flawforge.services.metrics.review_api import review_router

SERVICE = ServiceSpec(
    name="metrics",
    port=8006,
    description="Aggregates results, catalogs and reports.",
    routers=(review_router,),
    consumers=(DIGEST_CONSUMER,),
)
