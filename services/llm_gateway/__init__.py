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
    """The providers setting names usable providers, and at least one of them answers (lists its models);
    in replay mode the cache answers, so none needs to."""
    providers = load_providers(platform.settings.llm_providers)
    if platform.settings.llm_replay:
        return
    failures = []
    for name, provider in providers.items():
        key = os.environ.get(provider.api_key_env) if provider.api_key_env else None
        try:
            response = httpx.get(f"{provider.base_url.rstrip('/')}/models", timeout=PROVIDER_PROBE_TIMEOUT_S,
                                 headers={"Authorization": f"Bearer {key}"} if key else {})
        except httpx.HTTPError as exc:
            failures.append(f"{name}: {type(exc).__name__} at {provider.base_url}")
            continue
        if response.status_code == 200:
            return
        failures.append(f"{name}: HTTP {response.status_code} from {provider.base_url}/models")
    raise ConnectionError("no provider reachable (" + "; ".join(failures) + ")")


SERVICE = ServiceSpec(
    name="llm-gateway",
    port=8004,
    description="One door for every model call: providers, batches, structured output, cache.",
    routers=("flawforge.services.llm_gateway.api:llm_router",),
    consumers=(CHAT_CONSUMER, BATCH_CONSUMER),
    readiness_checks=(llm_providers,),
)
