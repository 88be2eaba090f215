"""The research endpoints' requests turned into research computations and back into responses."""
from __future__ import annotations

import io
import math
import re

import torch

from flawforge.blobstore import BlobStore
from flawforge.inference import patching, research
from flawforge.inference.hooks import anatomy
from flawforge.inference.backend import Backend
from flawforge.inference.errors import RequestError
from flawforge.inference.loading import LoadedModel
from flawforge.inference.openai_api import check_model
from flawforge.inference.word_forms import p_sem, sequences
from flawforge.proto.inference import (
    ContinuationScore, LayerReadout, LensRequest, LensResponse, LensResult, PatchedReadout, PatchRequest,
    PatchResponse, PressureRequest, PressureResponse, PressureResult, PressureSequence, Readout, ScoreRequest, ScoreResponse, ScoreResult, TargetToken, TraceRequest, TraceResponse,
    TraceResult, TokenSpec,
)

TRACE_PREFIX = "inference/traces"
TRACE_NAME = re.compile(r"[0-9a-f]{64}\.pt")


def _encode(tokenizer, text: str, *, prompt: bool) -> list[int]:
    # A prompt gets the tokenizer's special tokens (a BOS where the model has one); a continuation does not.
    return tokenizer(text, add_special_tokens=prompt)["input_ids"]


def _check_length(lm_context: int, tokens: int, param: str) -> None:
    if tokens > lm_context:
        raise RequestError(400, f"{param} has {tokens} tokens; this model's maximum context length is {lm_context}.",
                           param=param, code="context_length_exceeded")
    if tokens == 0:
        raise RequestError(400, f"{param} encodes to no tokens.", param=param, code="empty_prompt")


def _pieces(tokenizer, ids: list[int]) -> list[str]:
    return [tokenizer.decode([i]) for i in ids]


def target_tokens(tokenizer, targets: list[TokenSpec]) -> list[TargetToken]:
    found = []
    for index, target in enumerate(targets):
        if isinstance(target, int):
            if not 0 <= target < len(tokenizer):
                raise RequestError(400, f"token id {target} is outside the vocabulary (0..{len(tokenizer) - 1})",
                                   param=f"targets.{index}")
            token_id = target
        else:
            ids = tokenizer(target, add_special_tokens=False)["input_ids"]
            if len(ids) != 1:
                raise RequestError(400, f"target {target!r} is {len(ids)} tokens {_pieces(tokenizer, ids)}; give a "
                                        "single token or its id", param=f"targets.{index}")
            token_id = ids[0]
        found.append(TargetToken(token_id=token_id, token=tokenizer.decode([token_id])))
    return found


def score(backend: Backend, req: ScoreRequest) -> ScoreResponse:
    check_model(backend.model_name, req.model)
    tok = backend.tokenizer
    items = []
    for i, item in enumerate(req.items):
        prompt = _encode(tok, item.prompt, prompt=True)
        conts = [_encode(tok, c, prompt=False) for c in item.continuations]
        for j, cont in enumerate(conts):
            if not cont:
                raise RequestError(400, "a continuation must encode to at least one token",
                                   param=f"items.{i}.continuations.{j}")
        _check_length(backend.context_length, len(prompt) + max(map(len, conts)), f"items.{i}")
        _check_length(backend.context_length, len(prompt), f"items.{i}.prompt")
        items.append((prompt, conts))
    logprobs = backend.score(items)
    return ScoreResponse(model=backend.model_name, results=[
        ScoreResult(prompt_tokens=len(prompt), continuations=[
            ContinuationScore(text=text, tokens=_pieces(tok, ids), token_logprobs=lps, logprob=sum(lps),
                              prob=math.exp(sum(lps)))
            for text, ids, lps in zip(item.continuations, conts, item_lps)])
        for item, (prompt, conts), item_lps in zip(req.items, items, logprobs)])


def pressure(backend: Backend, req: PressureRequest) -> PressureResponse:
    """P_sem of each target after its prompt: every token variant of the target teacher-forced in one
    scoring call, so a prompt runs once for all its variants and prompts share forward passes."""
    check_model(backend.model_name, req.model)
    tok = backend.tokenizer

    def encode(text: str) -> list[int]:
        return _encode(tok, text, prompt=False)

    def decode(ids) -> str:
        return tok.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)

    items = []
    for i, item in enumerate(req.items):
        prompt = _encode(tok, item.prompt, prompt=True)
        seqs = [list(s) for s in sequences(item.target, encode, decode)]
        _check_length(backend.context_length, len(prompt) + max(map(len, seqs), default=0), f"items.{i}")
        items.append((prompt, seqs))
    found = iter(backend.score([(prompt, seqs) for prompt, seqs in items if seqs]))
    results = []
    for item, (_, seqs) in zip(req.items, items):
        logprobs = next(found) if seqs else []
        single = {seq[0]: math.exp(lps[0]) for seq, lps in zip(seqs, logprobs) if len(seq) == 1}
        results.append(PressureResult(
            target=item.target, p_sem=p_sem(logprobs), p_sum=sum(math.exp(sum(lps)) for lps in logprobs),
            p_first=sum(single.values()) if single else None,
            sequences=[PressureSequence(tokens=_pieces(tok, seq), token_ids=seq, prob=math.exp(sum(lps)))
                       for seq, lps in zip(seqs, logprobs)]))
    return PressureResponse(model=backend.model_name, results=results)


def _prompt(lm: LoadedModel, text: str, param: str) -> list[int]:
    ids = _encode(lm.tokenizer, text, prompt=True)
    _check_length(lm.context_length, len(ids), param)
    return ids


def trace(lm: LoadedModel, store: BlobStore, req: TraceRequest, batch_tokens: int, max_bytes: int) -> TraceResponse:
    check_model(lm.name, req.model)
    prompts = [_prompt(lm, text, f"prompts.{i}") for i, text in enumerate(req.prompts)]
    config, anat = lm.model.config, anatomy(lm.model)
    for i, ids in enumerate(prompts):
        size = research.trace_bytes(anat.num_layers, config.num_attention_heads, config.hidden_size,
                                    len(ids) if req.full_sequence else 1, min(req.attention_positions, len(ids)))
        if size > max_bytes:
            raise RequestError(400, f"the trace of prompts.{i} ({len(ids)} tokens) would take {size >> 20} MiB, over "
                                    f"the cap of {max_bytes >> 20} MiB (FLAWFORGE_INFERENCE_TRACE_MAX_MB); trace "
                                    "fewer positions or a shorter prompt", param=f"prompts.{i}", code="trace_too_large")
    results = []
    for ids, found in zip(prompts, research.trace(lm, prompts, req.full_sequence, req.attention_positions,
                                                  batch_tokens)):
        buffer = io.BytesIO()
        torch.save({**found, "model": lm.name, "model_revision": lm.revision}, buffer)
        blob = store.put_content(TRACE_PREFIX, buffer.getvalue(), ".pt")
        results.append(TraceResult(blob=blob, download=f"/v1/research/traces/{blob.key.rsplit('/', 1)[1]}",
                                   tokens=_pieces(lm.tokenizer, ids), positions=found["positions"],
                                   next_token=lm.tokenizer.decode([found["next_token_id"]]),
                                   next_token_id=found["next_token_id"], next_token_prob=found["next_token_prob"],
                                   num_layers=found["attentions"].shape[0]))
    return TraceResponse(model=lm.name, model_revision=lm.revision, results=results)


def trace_key(name: str) -> str:
    """The blob key of a trace named by its file name (`<sha256>.pt`, as `download` gives it)."""
    if not TRACE_NAME.fullmatch(name):
        raise RequestError(404, f"No such trace: {name!r}", param="name", code="trace_not_found")
    return f"{TRACE_PREFIX}/{name[:2]}/{name}"


def _readout(lm: LoadedModel, reading: research.Readings) -> Readout:
    return Readout(probs=reading.probs, top_token=lm.tokenizer.decode([reading.top_id]), top_prob=reading.top_prob)


def logit_lens(lm: LoadedModel, req: LensRequest, batch_tokens: int) -> LensResponse:
    check_model(lm.name, req.model)
    targets = target_tokens(lm.tokenizer, req.targets)
    prompts = [_prompt(lm, text, f"prompts.{i}") for i, text in enumerate(req.prompts)]
    found = research.logit_lens(lm, prompts, [t.token_id for t in targets], req.position, batch_tokens)
    return LensResponse(model=lm.name, targets=targets, results=[
        LensResult(tokens=_pieces(lm.tokenizer, ids), position=position, layers=[
            LayerReadout(layer=layer, **_readout(lm, reading).model_dump()) for layer, reading in enumerate(readings)])
        for ids, (position, readings) in zip(prompts, found)])


def patch(lm: LoadedModel, req: PatchRequest, batch_tokens: int) -> PatchResponse:
    check_model(lm.name, req.model)
    targets = target_tokens(lm.tokenizer, req.targets)
    source, target = _prompt(lm, req.source, "source"), _prompt(lm, req.target, "target")
    baseline, patched = patching.patch(lm, source, target, [t.token_id for t in targets], req.layers, req.positions,
                                       req.read_position, req.mode == "each", batch_tokens)
    return PatchResponse(model=lm.name, targets=targets, baseline=_readout(lm, baseline), patched=[
        PatchedReadout(layers=layers, delta=[p - b for p, b in zip(reading.probs, baseline.probs)],
                       **_readout(lm, reading).model_dump())
        for layers, reading in patched])
