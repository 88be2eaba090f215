"""The inference-server service."""
from flawforge.inference.host import host_for
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import ServiceSpec
from flawforge.services.inference_server.worker import BATCH_CONSUMER, STUDY_ACTOR


def model_loaded(platform: Platform) -> None:
    """Ready once the served model is loaded; the message says what it still waits for."""
    host_for(platform.settings).start().ready()


SERVICE = ServiceSpec(
    name="inference-server",
    port=8005,
    description="Local model server: OpenAI-compatible API and research endpoints.",
    routers=tuple(f"flawforge.services.inference_server.api:{name}"
                  for name in ("openai_router", "batch_router", "research_router")),
    consumers=(BATCH_CONSUMER,),
    actors=(STUDY_ACTOR,),
    readiness_checks=(model_loaded,),
    extras=("inference",),
    error_formats=(("/v1", "flawforge.inference.errors:openai_error_body"),),
)
