"""Sampling and scoring with Hugging Face transformers: always available, CPU or GPU. Concurrent requests
share forward passes step by step (flawforge.inference.scheduler)."""
from __future__ import annotations

from typing import Callable, Iterator

from flawforge.errors import ConfigError
from flawforge.inference.backend import Backend, Delta, SamplingParams, ScoreItem
from flawforge.inference.decoding import RequestDecoder
from flawforge.inference.loading import LoadedModel
from flawforge.inference.research import score_continuations
from flawforge.inference.scheduler import BatchScheduler, GenerationRequest
from flawforge.settings import Settings

MAX_BATCH_ROWS = Settings.model_fields["inference_max_batch_rows"].default


class TransformersBackend(Backend):
    name = "transformers"

    def __init__(self, lm: LoadedModel, batch_tokens: int, max_batch_rows: int = MAX_BATCH_ROWS):
        self.lm = lm
        self.batch_tokens = batch_tokens
        self.model_name = lm.name
        self.model_revision = lm.revision
        self.tokenizer = lm.tokenizer
        self.context_length = lm.context_length
        self.vocab_size = lm.model.config.vocab_size
        self.eos_ids = lm.eos_ids
        _check_cache_layers(lm.model)
        self.scheduler = BatchScheduler(lm, max_batch_rows)

    def stream(self, prompt_ids: list[int], params: SamplingParams,
               cancelled: Callable[[], bool] = lambda: False) -> Iterator[Delta]:
        decoder = RequestDecoder(self, self.eos_ids, params)  # a bad grammar fails here, before it queues
        return self.scheduler.submit(GenerationRequest(list(prompt_ids), decoder, cancelled))

    def score(self, items: list[ScoreItem]) -> list[list[list[float]]]:
        return score_continuations(self.lm, items, self.batch_tokens)


def _check_cache_layers(model) -> None:
    """Continuous batching left-pads full-attention caches: a sliding-window layer would drop a padded row's own
    tokens from its window."""
    from transformers import DynamicCache

    kinds = {type(layer).__name__ for layer in DynamicCache(config=model.config).layers} - {"DynamicLayer"}
    if kinds:
        raise ConfigError(f"the transformers backend batches full-attention caches only; this model's cache has "
                          f"{', '.join(sorted(kinds))} layers")
