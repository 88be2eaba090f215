"""Sampling and scoring with Hugging Face transformers: always available, CPU or GPU."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from flawforge.inference.backend import Backend, Sample, SamplingParams, ScoreItem, TokenChoice
from flawforge.inference.loading import LoadedModel
from flawforge.inference.research import score_continuations
from flawforge.inference.sampling import choose_next


@dataclass
class _Growing:
    """A sample while it is being generated."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenChoice] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None


class TransformersBackend(Backend):
    name = "transformers"

    def __init__(self, lm: LoadedModel, batch_tokens: int):
        self.lm = lm
        self.batch_tokens = batch_tokens
        self.model_name = lm.name
        self.tokenizer = lm.tokenizer
        self.context_length = lm.context_length

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Sample]:
        lm, eos = self.lm, self.lm.eos_ids
        # Sampling runs on the CPU from float32 logits, so a seed gives the same draws on any device.
        generator = torch.Generator().manual_seed(params.seed)
        samples = [_Growing() for _ in range(params.n)]
        with lm.lock, torch.inference_mode():
            out = lm.model(input_ids=torch.tensor([prompt_ids], device=lm.device), use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            cache.batch_repeat_interleave(params.n)  # the prompt runs once for all n samples
            logits = out.logits[:, -1].float().cpu().expand(params.n, -1)
            for _ in range(params.max_tokens):
                chosen = choose_next(logits, params.temperature, params.top_p, generator)
                logprobs = torch.log_softmax(logits, -1) if params.logprobs else None
                for row, sample in enumerate(samples):
                    if sample.finish_reason is None:
                        self._extend(sample, int(chosen[row]), None if logprobs is None else logprobs[row], params, eos)
                if all(s.finish_reason for s in samples):
                    break
                out = lm.model(input_ids=chosen[:, None].to(lm.device), past_key_values=cache, use_cache=True)
                logits = out.logits[:, -1].float().cpu()
        return [Sample(token_ids=s.token_ids, text=s.text, finish_reason=s.finish_reason or "length",
                       logprobs=s.logprobs) for s in samples]

    def _extend(self, sample: _Growing, token_id: int, logprobs: torch.Tensor | None, params: SamplingParams,
                eos: set[int]) -> None:
        if token_id in eos:
            sample.finish_reason = "stop"
            return
        sample.token_ids.append(token_id)
        if logprobs is not None:
            top = logprobs.topk(params.top_logprobs) if params.top_logprobs else None
            sample.logprobs.append(TokenChoice(
                token_id=token_id, logprob=float(logprobs[token_id]),
                top=[] if top is None else list(zip(top.indices.tolist(), top.values.tolist()))))
        text = self.tokenizer.decode(sample.token_ids, skip_special_tokens=True)
        cut = min((i for i in (text.find(s) for s in params.stop) if i >= 0), default=-1)
        if cut < 0:
            sample.text = text
            return
        sample.text, sample.finish_reason = text[:cut], "stop"
        # Tokens wholly inside the stop string are not part of the answer, nor are their logprobs.
        while sample.token_ids and len(self.tokenizer.decode(sample.token_ids[:-1], skip_special_tokens=True)) >= cut:
            sample.token_ids.pop()
            if sample.logprobs:
                sample.logprobs.pop()

    def score(self, items: list[ScoreItem]) -> list[list[list[float]]]:
        return score_continuations(self.lm, items, self.batch_tokens)
