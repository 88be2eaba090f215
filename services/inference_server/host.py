"""The process's one model, loaded in the background at start and shared by the HTTP API and the
batch worker. Requests that come before it is ready get a 503 naming the reason."""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from flawforge.errors import ConfigError
from flawforge.inference.backend import Backend
from flawforge.inference.errors import RequestError
from flawforge.inference.grammars import GrammarLimits
from flawforge.settings import Settings

if TYPE_CHECKING:
    from flawforge.inference.loading import LoadedModel

log = logging.getLogger(__name__)

MODEL_SETTINGS = ("inference_model_path", "inference_model_name", "inference_cache_dir", "inference_device",
                  "inference_dtype", "inference_backend", "inference_batch_tokens", "inference_threads",
                  "inference_max_batch_rows")


def open_backend(settings: Settings) -> Backend:
    backend = _backend(settings)
    backend.grammar_limits = GrammarLimits.from_settings(settings)
    return backend


def _backend(settings: Settings) -> Backend:
    # torch is imported here, not with the service spec: images without the inference extra load every spec.
    from flawforge.inference.loading import (
        choose_dtype, context_length, hf_folder, load_model, load_tokenizer, resolve_source, source_revision,
    )
    from flawforge.inference.transformers_backend import TransformersBackend
    from flawforge.inference.vllm_backend import VllmBackend, vllm_usable

    choice = settings.inference_backend
    if choice == "vllm" and not vllm_usable():
        raise ConfigError("FLAWFORGE_INFERENCE_BACKEND=vllm needs the vllm package and a CUDA GPU")
    if choice == "vllm" or (choice == "auto" and vllm_usable()):
        from transformers import AutoConfig

        source = resolve_source(settings.inference_model_path, settings.inference_model_name)
        folder = hf_folder(source, settings.inference_cache_dir)
        tokenizer = load_tokenizer(folder)
        dtype = str(choose_dtype(settings.inference_dtype, "cuda")).removeprefix("torch.")
        return VllmBackend(folder, source.name, source_revision(source), tokenizer,
                           context_length(AutoConfig.from_pretrained(folder), tokenizer), dtype)
    return TransformersBackend(load_model(settings), settings.inference_batch_tokens,
                               settings.inference_max_batch_rows)


class ModelHost:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.backend: Backend | None = None
        self.error: BaseException | None = None
        self.loaded_at = 0
        self._research: "LoadedModel | None" = None
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
            log.info("model %s ready on the %s backend", self.backend.model_name, self.backend.name)
        except Exception as exc:  # kept and reported by every request and by /readyz
            if isinstance(exc, ConfigError):  # a setting names what is wrong: its line is the whole story
                log.error("the model failed to load: %s", exc)
                log.debug("the model failed to load", exc_info=True)
            else:
                log.exception("the model failed to load")
            self.error = exc
        finally:
            self._done.set()

    def ready(self) -> Backend:
        """The backend, or a 503 saying why there is none yet."""
        if self.error is not None:
            raise RequestError(503, f"the model failed to load: {type(self.error).__name__}: {self.error}",
                               code="model_unavailable")
        if self.backend is None:
            raise RequestError(503, "the model is still loading; retry shortly", code="model_loading")
        return self.backend

    def wait(self, timeout: float | None = None) -> Backend:
        self.start()._done.wait(timeout)
        return self.ready()

    def research_model(self) -> "LoadedModel":
        """The transformers model the research endpoints need, beside vLLM if that serves sampling."""
        from flawforge.inference.loading import load_model
        from flawforge.inference.transformers_backend import TransformersBackend

        backend = self.ready()
        if isinstance(backend, TransformersBackend):
            return backend.lm
        with self._lock:
            if self._research is None:
                self._research = load_model(self.settings)
            return self._research


_hosts: dict[tuple, ModelHost] = {}
_hosts_lock = threading.Lock()


def host_for(settings: Settings) -> ModelHost:
    """One host per model configuration in the process, so every app and worker shares the model."""
    key = tuple(getattr(settings, name) for name in MODEL_SETTINGS)
    with _hosts_lock:
        if key not in _hosts:
            _hosts[key] = ModelHost(settings)
        return _hosts[key]
