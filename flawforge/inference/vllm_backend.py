"""Sampling and teacher-forced scoring with vLLM, used when it is importable and a GPU is present.

Sampling takes the same constraints as the transformers backend: penalties and logit bias, and
grammar-constrained output through vLLM's structured outputs (xgrammar by default, the library
the transformers backend uses). vLLM runs a request to its end, so a stream gets each choice as
one delta.

Scoring feeds prompt and continuation as one prompt and reads vLLM's `prompt_logprobs`, which hold
the log-probability of every prompt token given the tokens before it.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Callable, Iterator

from flawforge.inference.backend import Backend, Delta, SamplingParams, ScoreItem, TokenChoice
from flawforge.inference.errors import RequestError

# The transformers copy that serves the research endpoints needs GPU memory beside vLLM's pool.
GPU_MEMORY_SHARE = 0.6


def vllm_usable() -> bool:
    import torch

    return importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()


class VllmBackend(Backend):
    name = "vllm"

    def __init__(self, folder: Path, model_name: str, model_revision: str, tokenizer, context_length: int,
                 dtype: str):
        from vllm import LLM

        self.llm = LLM(model=str(folder), tokenizer=str(folder), dtype=dtype, gpu_memory_utilization=GPU_MEMORY_SHARE)
        self.model_name = model_name
        self.model_revision = model_revision
        self.tokenizer = tokenizer
        self.context_length = context_length
        self.vocab_size = self.llm.llm_engine.model_config.get_vocab_size()

    def _run(self, prompts: list[list[int]], params):
        return self.llm.generate([{"prompt_token_ids": ids} for ids in prompts], params, use_tqdm=False)

    def stream(self, prompt_ids: list[int], params: SamplingParams,
               cancelled: Callable[[], bool] = lambda: False) -> Iterator[Delta]:
        from vllm import SamplingParams as VllmParams
        from vllm.sampling_params import StructuredOutputsParams

        for name in ("dry_multiplier", "json_closing_reserve"):  # the transformers backend's extensions
            if getattr(params, name):
                raise RequestError(400, f"{name} is not supported by the vLLM backend", param=name,
                                   code="unsupported_parameter")
        structured = None
        if params.output_format is not None:
            key = "json" if params.output_format.kind == "json_schema" else "structural_tag"
            structured = StructuredOutputsParams(**{key: params.output_format.spec})
        [out] = self._run([prompt_ids], VllmParams(
            n=params.n, temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_tokens,
            seed=params.seed, stop=list(params.stop) or None, presence_penalty=params.presence_penalty,
            frequency_penalty=params.frequency_penalty, logit_bias=dict(params.logit_bias) or None,
            structured_outputs=structured, logprobs=params.top_logprobs if params.logprobs else None))
        eos = self.tokenizer.eos_token_id
        for index, choice in enumerate(out.outputs):
            ids = [t for t in choice.token_ids if t != eos]
            logprobs = []
            for token_id, alternatives in zip(ids, choice.logprobs or []):
                ranked = sorted(alternatives.items(), key=lambda kv: kv[1].rank)[:params.top_logprobs]
                logprobs.append(TokenChoice(token_id=token_id, logprob=alternatives[token_id].logprob,
                                            top=[(t, lp.logprob) for t, lp in ranked]))
            yield Delta(index=index, text=choice.text, token_ids=ids, logprobs=logprobs,
                        finish_reason="length" if choice.finish_reason == "length" else "stop")

    def score(self, items: list[ScoreItem]) -> list[list[list[float]]]:
        from vllm import SamplingParams as VllmParams

        pairs = [(prompt, cont) for prompt, conts in items for cont in conts]
        outs = iter(self._run([prompt + cont for prompt, cont in pairs], VllmParams(max_tokens=1, prompt_logprobs=0)))
        return [[[next_out.prompt_logprobs[len(prompt) + j][token].logprob for j, token in enumerate(cont)]
                 for cont, next_out in zip(conts, outs)] for prompt, conts in items]
