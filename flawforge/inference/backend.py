"""The contract of a sampling and scoring backend (transformers or vLLM)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    n: int
    temperature: float
    top_p: float
    max_tokens: int
    seed: int
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0


@dataclass
class TokenChoice:
    token_id: int
    logprob: float  # of the unscaled model distribution
    top: list[tuple[int, float]] = field(default_factory=list)  # most likely alternatives, best first


@dataclass
class Sample:
    token_ids: list[int]
    text: str
    finish_reason: str  # "stop" (end of sequence or a stop string) or "length"
    logprobs: list[TokenChoice] = field(default_factory=list)


ScoreItem = tuple[list[int], list[list[int]]]  # prompt token ids, continuations' token ids


class Backend(ABC):
    name: str
    model_name: str
    tokenizer: object
    context_length: int

    @abstractmethod
    def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Sample]:
        """`params.n` samples continuing the prompt, reproducible for a given seed."""

    @abstractmethod
    def score(self, items: list[ScoreItem]) -> list[list[list[float]]]:
        """Teacher-forced log-probability of each continuation token: [item][continuation][token]."""
