"""The process's one model, loaded in the background at start and shared by the HTTP API and the
batch worker, and vLLM's server where that generates instead (`vllm_server`). Requests that come before
the model is ready get a 503 naming the reason."""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from flawforge.errors import ConfigError
from flawforge.inference.errors import RequestError
from flawforge.inference.grammars import GrammarLimits
from flawforge.settings import Settings

if TYPE_CHECKING:
    from flawforge.inference.loading import LoadedModel
    from flawforge.inference.transformers_backend import TransformersBackend
    from flawforge.inference.upstream import VllmServer

log = logging.getLogger(__name__)

MODEL_SETTINGS = ("inference_model_path", "inference_model_name", "inference_cache_dir", "inference_device",
                  "inference_dtype", "inference_batch_tokens", "inference_threads", "inference_max_batch_rows")


def open_backend(settings: Settings) -> "TransformersBackend":
    # torch is imported here, not with the service spec: images without the inference extra load every spec.
    from flawforge.inference.loading import load_model
    from flawforge.inference.transformers_backend import TransformersBackend

    backend = TransformersBackend(load_model(settings), settings.inference_batch_tokens,
                                  settings.inference_max_batch_rows)
    backend.grammar_limits = GrammarLimits.from_settings(settings)
    return backend


def vllm_server(settings: Settings) -> "VllmServer | None":
    """vLLM's OpenAI server that generates for this one (FLAWFORGE_INFERENCE_BACKEND=vllm), or None where this
    process generates itself."""
    from flawforge.inference.upstream import VllmServer

    url = settings.inference_vllm_url
    if settings.inference_backend == "vllm" and not url:
        raise ConfigError("FLAWFORGE_INFERENCE_BACKEND=vllm needs FLAWFORGE_INFERENCE_VLLM_URL, the base URL of "
                          "vLLM's OpenAI server (ending in /v1)")
    if settings.inference_backend == "transformers" or not url:
        return None
    return VllmServer(url, settings.token)


class ModelHost:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.backend: "TransformersBackend | None" = None
        self.error: BaseException | None = None
        self.loaded_at = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._done = threading.Event()

    def start(self) -> "ModelHost":
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._load, name="load-model", daemon=True)
                self._thread.start()
        return self

    def _load(self) -> None:
        try:
            self.backend = open_backend(self.settings)
            self.loaded_at = int(time.time())
            log.info("model %s ready", self.backend.model_name)
        except Exception as exc:  # kept and reported by every request and by /readyz
            if isinstance(exc, ConfigError):  # a setting names what is wrong: its line is the whole story
                log.error("the model failed to load: %s", exc)
                log.debug("the model failed to load", exc_info=True)
            else:
                log.exception("the model failed to load")
            self.error = exc
        finally:
            self._done.set()

    def ready(self) -> "TransformersBackend":
        """The backend, or a 503 saying why there is none yet."""
        if self.error is not None:
            raise RequestError(503, f"the model failed to load: {type(self.error).__name__}: {self.error}",
                               code="model_unavailable")
        if self.backend is None:
            raise RequestError(503, "the model is still loading; retry shortly", code="model_loading")
        return self.backend

    def wait(self, timeout: float | None = None) -> "TransformersBackend":
        self.start()._done.wait(timeout)
        return self.ready()

    def research_model(self) -> "LoadedModel":
        """The transformers model the research endpoints read."""
        return self.ready().lm


_hosts: dict[tuple, ModelHost] = {}
_hosts_lock = threading.Lock()


def host_for(settings: Settings) -> ModelHost:
    """One host per model configuration in the process, so every app and worker shares the model."""
    key = tuple(getattr(settings, name) for name in MODEL_SETTINGS)
    with _hosts_lock:
        if key not in _hosts:
            _hosts[key] = ModelHost(settings)
        return _hosts[key]
