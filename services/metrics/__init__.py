"""The metrics service: aggregates results and hosts the smoke pipeline's worker and human review."""
from flawforge.runtime.service import ServiceSpec
from flawforge.services.metrics.digest import DIGEST_ACTOR

SERVICE = ServiceSpec(
    name="metrics",
    port=8006,
    description="Aggregates results, catalogs and reports.",
    routers=("flawforge.services.metrics.review_api:review_router",
             "flawforge.services.metrics.review_api:review_report_router"),
    pages=("flawforge.services.metrics.review_api:review_page_router",),
    actors=(DIGEST_ACTOR,),
)
