"""The llm-gateway service."""
import os

import httpx

from flawforge.llm.config import load_providers
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import ServiceSpec
from flawforge.services.llm_gateway.workers import BATCH_CONSUMER, CHAT_CONSUMER


# A readiness probe must answer within its own timeout (k8s: 5 s), whatever the providers do.
PROVIDER_PROBE_TIMEOUT_S = 2.0


def llm_providers(platform: Platform) -> None:
    """The providers setting names usable providers, and at least one of them can be used: an OpenAI-compatible
    one answers (lists its models), a hosted one has its API key set; in replay mode the cache answers, so none
    needs to."""
    providers = load_providers(platform.settings.llm_providers)
    if platform.settings.llm_replay:
        return
    failures = []
    for name, provider in providers.items():
        key = os.environ.get(provider.api_key_env) if provider.api_key_env else None
        if not provider.openai_compatible:
            if key or not provider.api_key_env:
                return
            failures.append(f"{name}: its API key variable {provider.api_key_env} is not set")
            continue
        base_url = (provider.base_url or "https://api.openai.com/v1").rstrip("/")
        try:
            response = httpx.get(f"{base_url}/models", timeout=PROVIDER_PROBE_TIMEOUT_S,
                                 headers={"Authorization": f"Bearer {key}"} if key else {})
        except httpx.HTTPError as exc:
            failures.append(f"{name}: {type(exc).__name__} at {base_url}")
            continue
        if response.status_code == 200:
            return
        failures.append(f"{name}: HTTP {response.status_code} from {base_url}/models")
    raise ConnectionError("no provider reachable (" + "; ".join(failures) + ")")


SERVICE = ServiceSpec(
    name="llm-gateway",
    port=8004,
    description="One door for every model call: providers (LiteLLM), shared limits, batches, structured output, "
                "cache, and an OpenAI-compatible /v1.",
    routers=("flawforge.services.llm_gateway.api:gateway_router",),
    consumers=(CHAT_CONSUMER, BATCH_CONSUMER),
    readiness_checks=(llm_providers,),
    extras=("gateway",),
    error_formats=(("/v1", "flawforge.inference.errors:openai_error_body"),),
)
