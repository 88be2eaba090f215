"""Sampling and scoring with Hugging Face transformers: always available, CPU or GPU."""
from __future__ import annotations

from typing import Callable, Iterator

import torch

from flawforge.inference.backend import Backend, Delta, SamplingParams, ScoreItem, TokenChoice
from flawforge.inference.decoding import Constraint, LogitAdjuster, LoopGuard, TextAssembler
from flawforge.inference.loading import LoadedModel
from flawforge.inference.research import score_continuations
from flawforge.inference.sampling import choose_next


class TransformersBackend(Backend):
    name = "transformers"

    def __init__(self, lm: LoadedModel, batch_tokens: int):
        self.lm = lm
        self.batch_tokens = batch_tokens
        self.model_name = lm.name
        self.model_revision = lm.revision
        self.tokenizer = lm.tokenizer
        self.context_length = lm.context_length
        self.vocab_size = lm.model.config.vocab_size

    def stream(self, prompt_ids: list[int], params: SamplingParams,
               cancelled: Callable[[], bool] = lambda: False) -> Iterator[Delta]:
        lm, eos = self.lm, self.lm.eos_ids
        constraint = (Constraint(self.vocabulary, self.vocabulary.compile(params.output_format, "response_format"),
                                 params.n) if params.output_format else None)
        adjuster = LogitAdjuster(params, self.vocab_size)
        guard = (LoopGuard(params, self.vocabulary.breaker_ids(params.dry_sequence_breakers))
                 if params.dry_multiplier > 0 else None)
        # Sampling runs on the CPU from float32 logits, so a seed gives the same draws on any device.
        generator = torch.Generator().manual_seed(params.seed)
        texts = [TextAssembler(self.tokenizer, row, params.stop) for row in range(params.n)]
        running = list(range(params.n))
        # From this step on a JSON reply is closed; one that ends there has finish_reason "length" all the same.
        closing_from = (params.max_tokens - params.json_closing_reserve
                        if constraint is not None and params.output_format.kind == "json_schema"
                        and params.json_closing_reserve else params.max_tokens)
        with lm.lock, torch.inference_mode():
            out, cache = lm.forward(input_ids=torch.tensor([prompt_ids], device=lm.device), logits_to_keep=1)
            cache.batch_repeat_interleave(params.n)  # the prompt runs once for all n samples
            logits = out.logits[:, -1].float().cpu().expand(params.n, -1)
            for step in range(params.max_tokens):
                if cancelled():
                    return
                raw = torch.log_softmax(logits, -1) if params.logprobs else None
                if adjuster.active:
                    logits = adjuster.apply(logits)
                if guard is not None:
                    logits = guard.apply(logits.clone(), running)
                if constraint is not None:
                    logits = logits.clone()
                    constraint.mask(logits, running)
                    if step >= closing_from:
                        constraint.close(logits, running, self.vocabulary.closers)
                chosen = choose_next(logits, params.temperature, params.top_p, generator)
                for row in list(running):
                    token_id = int(chosen[row])
                    adjuster.chose(row, token_id)
                    if guard is not None:
                        guard.chose(row, token_id)
                    complete = constraint is not None and constraint.accept(row, token_id)
                    ended = "stop" if step < closing_from else "length"
                    if token_id in eos:
                        running.remove(row)
                        yield texts[row].finish(ended)
                        continue
                    delta = texts[row].add(token_id, self._choice(token_id, raw, row, params))
                    if complete and not delta.finish_reason:
                        delta = _merged(delta, texts[row].finish(ended))
                    elif not delta.finish_reason and step == params.max_tokens - 1:
                        delta = _merged(delta, texts[row].finish("length"))
                    if delta.finish_reason:
                        running.remove(row)
                    if delta.text or delta.token_ids or delta.finish_reason:
                        yield delta
                if not running:
                    return
                out, _ = lm.forward(cache, input_ids=chosen[:, None].to(lm.device))
                logits = out.logits[:, -1].float().cpu()

    @staticmethod
    def _choice(token_id: int, logprobs: torch.Tensor | None, row: int, params: SamplingParams) -> TokenChoice | None:
        if logprobs is None:
            return None
        top = logprobs[row].topk(params.top_logprobs) if params.top_logprobs else None
        return TokenChoice(token_id=token_id, logprob=float(logprobs[row, token_id]),
                           top=[] if top is None else list(zip(top.indices.tolist(), top.values.tolist())))

    def score(self, items: list[ScoreItem]) -> list[list[list[float]]]:
        return score_continuations(self.lm, items, self.batch_tokens)


def _merged(first: Delta, second: Delta) -> Delta:
    return Delta(index=first.index, text=first.text + second.text, token_ids=first.token_ids + second.token_ids,
                 logprobs=first.logprobs + second.logprobs, finish_reason=second.finish_reason)
