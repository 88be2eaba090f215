"""The contract of a sampling and scoring backend (transformers or vLLM)."""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Iterator, Literal

if TYPE_CHECKING:
    from flawforge.inference.grammars import GrammarLimits


@dataclass(frozen=True)
class OutputFormat:
    """A constraint every sampled token obeys (grammar-constrained decoding).

    `json_schema`: the reply is one JSON value matching the schema (JSON text). `structural_tag`:
    free text in which each trigger starts a tagged block whose content matches its schema (the
    structural-tag JSON both xgrammar and vLLM take); tool calls use it.
    """

    kind: Literal["json_schema", "structural_tag"]
    spec: str

    @classmethod
    def json_schema(cls, schema: dict) -> "OutputFormat":
        return cls("json_schema", json.dumps(schema))


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
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit)
    output_format: OutputFormat | None = None
    # Under a json_schema format: the last tokens of the budget close the JSON value (Constraint.close).
    json_closing_reserve: int = 0
    # The repetition guard (decoding.LoopGuard); off while the multiplier is 0.
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1  # the completion's last N tokens; -1: all of them
    dry_sequence_breakers: tuple[str, ...] = ("\n", ":", '"', "*")


@dataclass
class TokenChoice:
    token_id: int
    logprob: float  # of the unscaled model distribution
    top: list[tuple[int, float]] = field(default_factory=list)  # most likely alternatives, best first


@dataclass
class Sample:
    token_ids: list[int]
    text: str
    finish_reason: str  # "stop" (end of sequence, a stop string or a finished grammar) or "length"
    logprobs: list[TokenChoice] = field(default_factory=list)


@dataclass
class Delta:
    """What one choice adds in one step of a stream: text released so far, its tokens, maybe its end."""

    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenChoice] = field(default_factory=list)
    finish_reason: str | None = None


ScoreItem = tuple[list[int], list[list[int]]]  # prompt token ids, continuations' token ids


class Backend(ABC):
    name: str
    model_name: str
    model_revision: str  # content hash of the weights: the same name may name different weights
    tokenizer: object
    context_length: int
    vocab_size: int  # rows of the model's output layer (may exceed the tokenizer's length)
    # What a request's schema may cost to compile; the server sets it from settings. None: no bounds, for code that
    # builds its own backend and samples with its own schemas.
    grammar_limits: "GrammarLimits | None" = None

    @cached_property
    def vocabulary(self):
        """Token bytes and the grammar compiler; built on first use (about a second)."""
        from flawforge.inference.decoding import Vocabulary

        return Vocabulary(self.tokenizer, self.vocab_size, self.grammar_limits)

    @abstractmethod
    def stream(self, prompt_ids: list[int], params: SamplingParams,
               cancelled: Callable[[], bool] = lambda: False) -> Iterator[Delta]:
        """`params.n` samples continuing the prompt, as deltas in order; every choice ends with a delta
        holding its finish_reason. Reproducible for a given seed; stops early once `cancelled()`."""

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Sample]:
        samples = [Sample(token_ids=[], text="", finish_reason="length") for _ in range(params.n)]
        for delta in self.stream(prompt_ids, params):
            sample = samples[delta.index]
            sample.text += delta.text
            sample.token_ids += delta.token_ids
            sample.logprobs += delta.logprobs
            if delta.finish_reason:
                sample.finish_reason = delta.finish_reason
        return samples

    @abstractmethod
    def score(self, items: list[ScoreItem]) -> list[list[list[float]]]:
        """Teacher-forced log-probability of each continuation token: [item][continuation][token]."""
