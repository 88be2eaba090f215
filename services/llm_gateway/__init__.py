"""The llm-gateway service."""
from flawforge.llm.config import load_providers
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import ServiceSpec
from flawforge.services.llm_gateway.workers import BATCH_CONSUMER, CHAT_CONSUMER


def llm_providers(platform: Platform) -> None:
    """The providers setting names usable providers."""
    load_providers(platform.settings.llm_providers)


SERVICE = ServiceSpec(
    name="llm-gateway",
    port=8004,
    description="One door for every model call: providers, batches, structured output, cache.",
    routers=("flawforge.services.llm_gateway.api:llm_router",),
    consumers=(CHAT_CONSUMER, BATCH_CONSUMER),
    readiness_checks=(llm_providers,),
)
