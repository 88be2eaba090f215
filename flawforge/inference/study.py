"""Model passes of the semantic-pressure study on a transformers model, batched across prompts.

- `prefill`: the prompts once (left-padded), their key/value cache kept for the passes below.
- `generate`: the greedy completion and the nucleus samples of many prompts at once, in one batch,
  from the prefill. Each prompt's samples come from its own generator seeded with the study's seed,
  so a prompt's samples do not depend on which prompts share its batch.
- `trace_at`: the prefixes (prompt + completion[:T]) continued from the prefill, keeping, at step T,
  the residual stream of every layer, the attention of every head to the prompt's keys, the logit
  lens over the target's first tokens, and the attention / MLP decomposition of the last layers.
- `patch_effects`: activation patching baseline -> negative per layer at the last position, for the
  residual stream, the attention output, the key/value vectors of the question tokens, and the
  instruction tokens; each patched run is read out and continued greedily for the flip test. The
  patched rows share the target's unpatched prefix (run once, its cache repeated).

Layers are block indices 0..L-1; block l's output is Hugging Face's hidden_states[l + 1].
"""
from __future__ import annotations

import copy
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Sequence

import torch

from flawforge.inference.loading import LoadedModel
from flawforge.inference.research import Padded, anatomy, eager_attention, left_pad, pad_id, residual_hooks
from flawforge.inference.sampling import nucleus_candidates, pick

if TYPE_CHECKING:  # imported lazily: a service imports transformers on its model-loading thread
    from transformers import DynamicCache

PATCH_KINDS = ("residual", "attn_out", "kv_question", "instruction")


@dataclass(frozen=True)
class Sampling:
    n: int
    temperature: float
    top_p: float
    seed: int


@dataclass
class Prefill:
    """The prompts run once (left-padded): their key/value cache and the logits at their last position. The
    greedy pass, the traces and the sampling pass all continue from it, each from a fork of the cache."""

    padded: Padded
    cache: DynamicCache
    logits: torch.Tensor  # [rows, vocab], float, on the CPU

    def fork(self) -> DynamicCache:
        """A cache sharing the prompt's tensors: a layer's update concatenates into new tensors and crop and
        row selection rebind them, so what a continuation does to its fork never reaches the prompt's."""
        forked = copy.copy(self.cache)
        forked.layers = [copy.copy(layer) for layer in self.cache.layers]
        return forked


def prefill(lm: LoadedModel, prompts: Sequence[Sequence[int]]) -> Prefill:
    padded = left_pad([list(p) for p in prompts], pad_id(lm), lm.device)
    with lm.lock, torch.inference_mode():
        out, cache = lm.forward(**padded.inputs(), logits_to_keep=1)
    return Prefill(padded, cache, out.logits[:, -1].float().cpu())


def _step_inputs(mask: torch.Tensor, lengths: torch.Tensor, generated: int, next_ids: torch.Tensor) -> dict:
    mask = torch.cat([mask, torch.ones((mask.shape[0], generated), dtype=torch.long, device=mask.device)], 1)
    return {"input_ids": next_ids[:, None], "attention_mask": mask, "position_ids": lengths[:, None] + generated - 1}


def generate(lm: LoadedModel, prompts: Prefill, greedy_tokens: int, sampling: Sampling | None = None,
             sample_tokens: int = 0) -> tuple[list[list[int]], list[list[list[int]]]]:
    """Continues the prompts' prefill: per prompt, a greedy completion of at most `greedy_tokens` (none at 0)
    and `sampling.n` samples of at most `sample_tokens` (none without `sampling`), token ids with the end of
    sequence excluded. Both run in one batch.

    The batch holds sequences, not completions: completions of one prompt whose tokens so far are the same
    share one sequence (one forward pass gives their common next-token distribution; each picks its own
    token from it), and a finished completion leaves, so the work follows the distinct prefixes actually
    generated. A prompt's samples come from its own generator, so they do not depend on its batch."""
    eos = lm.eos_ids
    padded = prompts.padded
    count = padded.input_ids.shape[0]
    n = sampling.n if sampling else 0
    kinds = ([("greedy", greedy_tokens)] if greedy_tokens else []) + [("sample", sample_tokens)] * n
    rows = [(prompt, kind, limit) for prompt in range(count) for kind, limit in kinds]
    generators = [torch.Generator().manual_seed(sampling.seed) for _ in range(count)] if sampling else []
    out_ids: list[list[int]] = [[] for _ in rows]
    live = [row for row, (_, _, limit) in enumerate(rows) if limit > 0]
    sequence_of = [prompt for prompt, _, _ in rows]  # each completion's sequence in the batch
    with lm.lock, torch.inference_mode():
        cache, logits = prompts.fork(), prompts.logits
        mask, lengths = padded.attention_mask, torch.tensor(padded.lengths, device=lm.device)
        for step in range(max((limit for _, limit in kinds), default=0)):
            chosen = _choose(logits, [sequence_of[row] for row in live], [rows[row][:2] for row in live], sampling,
                             generators)
            going, parents, next_ids, index = [], [], [], {}
            for row, token in zip(live, chosen):
                if token in eos:
                    continue
                out_ids[row].append(token)
                if len(out_ids[row]) == rows[row][2]:
                    continue
                key = (sequence_of[row], token)
                if key not in index:
                    index[key] = len(parents)
                    parents.append(sequence_of[row])
                    next_ids.append(token)
                sequence_of[row] = index[key]
                going.append(row)
            live = going
            if not live:
                break
            if parents != list(range(logits.shape[0])):
                selected = torch.tensor(parents, device=lm.device)
                cache.batch_select_indices(selected)
                mask, lengths = mask[selected], lengths[selected]
            out, _ = lm.forward(cache, **_step_inputs(mask, lengths, step + 1, torch.tensor(next_ids, device=lm.device)))
            logits = out.logits[:, -1].float().cpu()
    greedy = [out_ids[row] for row, (_, kind, _) in enumerate(rows) if kind == "greedy"]
    samples = [[out_ids[row] for row, (p, kind, _) in enumerate(rows) if p == prompt and kind == "sample"]
               for prompt in range(count)] if sampling else []
    return greedy, samples


def _choose(logits: torch.Tensor, sequences: list[int], rows: list[tuple[int, str]], sampling: Sampling | None,
            generators: list[torch.Generator]) -> list[int]:
    """The next token of each live completion (its sequence's logits; its prompt and kind in `rows`)."""
    sequences_t = torch.tensor(sequences)
    chosen = logits.argmax(-1)[sequences_t]
    sampled = [i for i, (_, kind) in enumerate(rows) if kind == "sample"]
    if sampled:
        tokens, weights = nucleus_candidates(torch.softmax(logits / sampling.temperature, -1), sampling.top_p)
        for prompt in sorted({rows[i][0] for i in sampled}):
            mine = torch.tensor([i for i in sampled if rows[i][0] == prompt])
            of = sequences_t[mine]
            chosen[mine] = pick(tokens[of], weights[of], generators[prompt])
    return chosen.tolist()


def _capture_output(store: dict, layer: int, module, args, output):
    store[layer] = output[0] if isinstance(output, tuple) else output


def trace_at(lm: LoadedModel, prompts: Prefill, completions: Sequence[Sequence[int]], steps: Sequence[int],
             lens_ids: Sequence[Sequence[int]], decompose_layers: int) -> list[dict]:
    """Per row, at the last position of its prefix prompt + completion[:T] (T = `steps[row]`): `hidden_states`
    [L+1, d] (embedding and every block's output, before the final norm), `attentions` [L, heads,
    prompt_length] (to the prompt's keys only), `lens` [L+1] (the probability mass on the row's `lens_ids`
    read through the final norm and unembedding at every layer) and `decomposition` [k, 3] for the last k
    blocks: the mass read from the block's input, after adding its attention output, and after adding its
    MLP output. Continues the prefill: its last prompt column and each row's completion tokens run again with
    the prompt's cache, and each row is read at its own step (later columns cannot reach it)."""
    anat = anatomy(lm.model)
    last = list(range(anat.num_layers - decompose_layers, anat.num_layers))
    padded = prompts.padded
    rows, width = padded.input_ids.shape
    extra = max(steps)
    columns = torch.full((rows, extra + 1), pad_id(lm), dtype=torch.long)
    columns[:, 0] = padded.input_ids[:, -1].cpu()
    for row, (ids, step) in enumerate(zip(completions, steps)):
        columns[row, 1:step + 1] = torch.tensor(list(ids[:step]), dtype=torch.long)
    lengths = torch.tensor(padded.lengths)
    inputs = {"input_ids": columns.to(lm.device),
              "attention_mask": torch.cat([padded.attention_mask, torch.ones((rows, extra), dtype=torch.long,
                                                                             device=lm.device)], 1),
              "position_ids": (lengths[:, None] - 1 + torch.arange(extra + 1)).to(lm.device)}
    at = (torch.arange(rows), torch.tensor(list(steps)))
    results = []
    with lm.lock, torch.inference_mode(), eager_attention(lm.model):
        cache = prompts.fork()
        cache.crop(-1)
        residual: dict[int, torch.Tensor] = {}
        attn_out: dict[int, torch.Tensor] = {}
        mlp_out: dict[int, torch.Tensor] = {}
        with ExitStack() as stack:
            stack.enter_context(residual_hooks(anat, lambda layer, hidden: residual.__setitem__(layer, hidden[at])))
            for layer in last:
                block = anat.layers[layer]
                stack.callback(block.self_attn.register_forward_hook(partial(_capture_output, attn_out, layer)).remove)
                stack.callback(block.mlp.register_forward_hook(partial(_capture_output, mlp_out, layer)).remove)
            out, _ = lm.forward(cache, **inputs, output_attentions=True, logits_to_keep=1)
        hidden = torch.stack([residual[layer] for layer in sorted(residual)], 1)  # [rows, L+1, d]
        lens = torch.stack([anat.readout(hidden[:, layer]) for layer in range(hidden.shape[1])], 1)  # [rows, L+1, V]
        steps_out = []
        for layer in last:
            h_in = hidden[:, layer]
            h_mid = h_in + attn_out[layer][at]
            steps_out.append(torch.stack([anat.readout(h_in), anat.readout(h_mid),
                                          anat.readout(h_mid + mlp_out[layer][at])], 1))
        decomposition = torch.stack(steps_out, 1) if steps_out else None  # [rows, k, 3, V]
        for row in range(rows):
            start, length, step = width - padded.lengths[row], padded.lengths[row], steps[row]
            ids = torch.tensor(list(lens_ids[row]), dtype=torch.long, device=lens.device)
            prompt = padded.input_ids[row, start:].cpu()
            results.append({
                "input_ids": torch.cat([prompt, torch.tensor(list(completions[row][:step]), dtype=torch.long)]),
                "prompt_tokens": int(length),
                # clone: a row of the batch's tensor would carry the whole batch's storage into torch.save
                "hidden_states": hidden[row].float().cpu().clone(),
                "attentions": torch.stack([a[row, :, step, start:width] for a in out.attentions]).float().cpu(),
                "lens": lens[row][:, ids].sum(-1).float().cpu(),
                "decomposition": (decomposition[row][..., ids].sum(-1).float().cpu() if decomposition is not None
                                  else torch.zeros((0, 3))),
                "decomposition_layers": last,
            })
    return results


# --- patching -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PatchPlan:
    """One prompt's patching: baseline (source) and negative (target) prompt ids, the token indices of the
    question in each (same text, aligned one to one) and of the prohibition line in the negative."""

    source: list[int]
    target: list[int]
    source_question: list[int]
    target_question: list[int]
    target_instruction: list[int]


def _captured_source(lm: LoadedModel, kind: str, source: list[int]) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
    """The source prompt's activations each patch kind copies, per layer and position (batch of one), and its
    next-token probabilities."""
    anat = anatomy(lm.model)
    captured: dict[int, torch.Tensor] = {}
    handles = []
    for layer, block in enumerate(anat.layers):
        if kind == "residual":
            handles.append(block.register_forward_hook(partial(_capture_output, captured, layer)))
        elif kind == "attn_out":
            handles.append(block.self_attn.register_forward_hook(partial(_capture_output, captured, layer)))
        elif kind == "kv_question":
            for key, proj in (((layer, "k"), block.self_attn.k_proj), ((layer, "v"), block.self_attn.v_proj)):
                handles.append(proj.register_forward_hook(partial(_capture_output, captured, key)))
    try:
        logits = lm.model(input_ids=torch.tensor([source], device=lm.device), logits_to_keep=1).logits[0, -1]
    finally:
        for handle in handles:
            handle.remove()
    return captured, torch.softmax(logits.float(), -1).cpu()


@contextmanager
def _patch_hooks(lm: LoadedModel, kind: str, plan: PatchPlan, captured: dict, rows: list[set[int]], start: int):
    """Hooks for the target's run from position `start` on, one batch row per entry of `rows`, row r patched at
    the layers rows[r] with the source's captured activations."""
    anat = anatomy(lm.model)
    handles = []
    patched = {layer: [r for r, layers in enumerate(rows) if layer in layers] for layer in range(anat.num_layers)}
    target_q = [p - start for p in plan.target_question]

    def write(layer, key, columns, source_columns, module, args, output):
        tensor = output[0] if isinstance(output, tuple) else output
        tensor = tensor.clone()
        index = torch.tensor(patched[layer], dtype=torch.long, device=tensor.device)
        tensor[index[:, None], torch.tensor(columns, dtype=torch.long, device=tensor.device)[None, :]] = \
            captured[key][0, source_columns].to(tensor.dtype)
        return (tensor, *output[1:]) if isinstance(output, tuple) else tensor

    def knock_out(layer, module, args, kwargs):
        mask = kwargs.get("attention_mask")
        queries = kwargs["hidden_states"].shape[1] if "hidden_states" in kwargs else args[0].shape[1]
        keys = start + queries
        if mask is None:  # no padding and one query: the model passes none; make the additive one
            mask = torch.zeros((len(rows), 1, queries, keys), dtype=lm.model.dtype, device=lm.device)
        mask = mask.expand(len(rows), *mask.shape[1:]).clone()
        blocked = False if mask.dtype == torch.bool else torch.finfo(mask.dtype).min
        index = torch.tensor(patched[layer], dtype=torch.long, device=mask.device)
        hidden = torch.tensor(plan.target_instruction, dtype=torch.long, device=mask.device)
        mask[index[:, None], 0, -1, hidden[None, :]] = blocked
        kwargs["attention_mask"] = mask
        return args, kwargs

    for layer, block in enumerate(anat.layers):
        if not patched[layer]:
            continue
        if kind == "residual":
            handles.append(block.register_forward_hook(partial(write, layer, layer, [-1], [-1])))
        elif kind == "attn_out":
            handles.append(block.self_attn.register_forward_hook(partial(write, layer, layer, [-1], [-1])))
        elif kind == "kv_question":
            for key, proj in (("k", block.self_attn.k_proj), ("v", block.self_attn.v_proj)):
                handles.append(proj.register_forward_hook(
                    partial(write, layer, (layer, key), target_q, plan.source_question)))
        elif kind == "instruction":
            handles.append(block.self_attn.register_forward_pre_hook(partial(knock_out, layer), with_kwargs=True))
        else:
            raise ValueError(f"unknown patch kind {kind!r}: expected one of {', '.join(PATCH_KINDS)}")
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def patched_runs(lm: LoadedModel, plan: PatchPlan, kind: str, rows: list[set[int]],
                 max_new_tokens: int) -> tuple[torch.Tensor, torch.Tensor, list[list[int]]]:
    """The target prompt run once per entry of `rows`, patched at those layers with the source's activations.

    The rows share the target's tokens before the first patched position (the last token, or the first
    question token for kv_question): that prefix runs once and its cache is repeated, so a row costs the
    patched tokens only. Returns the source's next-token probabilities, each row's, and each row's greedy
    continuation (the patch stays in the cache)."""
    start = plan.target_question[0] if kind == "kv_question" else len(plan.target) - 1
    count = len(rows)
    with lm.lock, torch.inference_mode():
        captured, source_probs = _captured_source(lm, kind, plan.source)
        _, cache = lm.forward(input_ids=torch.tensor([plan.target[:start]], device=lm.device))
        cache.batch_repeat_interleave(count)
        tail = torch.tensor([plan.target[start:]], device=lm.device).expand(count, -1)
        positions = torch.arange(start, len(plan.target), device=lm.device)[None].expand(count, -1)
        with _patch_hooks(lm, kind, plan, captured, rows, start):
            out, _ = lm.forward(cache, input_ids=tail, position_ids=positions, logits_to_keep=1)
        probs = torch.softmax(out.logits[:, -1].float(), -1).cpu()
        eos, continuations, done = lm.eos_ids, [[] for _ in rows], [False] * count
        chosen = probs.argmax(-1)
        for step in range(max_new_tokens):
            for row, token in enumerate(chosen.tolist()):
                if not done[row]:
                    done[row] = token in eos
                    if not done[row]:
                        continuations[row].append(token)
            if all(done) or step == max_new_tokens - 1:
                break
            position = torch.full((count, 1), len(plan.target) + step, device=lm.device)
            out, _ = lm.forward(cache, input_ids=chosen[:, None].to(lm.device), position_ids=position)
            chosen = out.logits[:, -1].float().argmax(-1).cpu()
    return source_probs, probs, continuations


def patch_effects(lm: LoadedModel, plan: PatchPlan, kind: str, first_ids: Sequence[int],
                  rest: dict[int, float], max_new_tokens: int) -> dict:
    """Patch each layer in turn (one row per layer) and read the patched target out.

    Returns `p_first_orig`, `p_orig` (P = sum over first tokens t of p(t) * rest[t], rest[t] the unpatched
    target's probability of completing some sequence of S(X) after t), per layer `p_first` and `p` of the
    patched run, `p_first_source`, and the greedy continuations (`completion_orig`, per layer `completions`).
    """
    layers = anatomy(lm.model).num_layers
    source_probs, probs, completions = patched_runs(lm, plan, kind, [set()] + [{layer} for layer in range(layers)],
                                                    max_new_tokens)
    ids = torch.tensor(list(first_ids), dtype=torch.long)
    p_first = probs[:, ids].sum(-1)
    starts = torch.tensor(list(rest), dtype=torch.long)
    p = (probs[:, starts] * torch.tensor(list(rest.values()))).sum(-1).clamp(max=1.0)
    return {"p_first_source": float(source_probs[ids].sum()), "p_first_orig": float(p_first[0]),
            "p_orig": float(p[0]), "p_first": p_first[1:].tolist(), "p": p[1:].tolist(),
            "completion_orig": completions[0], "completions": completions[1:]}
