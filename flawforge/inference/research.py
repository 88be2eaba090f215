"""Research computations on a transformers model: teacher-forced scoring, traces of hidden states
and attentions, the logit lens and activation patching.

Prompts of different lengths share a forward pass, left-padded: padding is masked and position
ids count real tokens only, so each row computes what it would alone (up to float rounding).
The residual stream is indexed like Hugging Face's hidden states: 0 is the embedding output and
l (1..L) the output of the l-th block, always before the final norm.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Callable, Iterator, Sequence

import torch
from torch import nn

from flawforge.inference.errors import RequestError
from flawforge.inference.loading import LoadedModel

# One residual-stream tensor [rows, positions, hidden] at a layer; an edit returns a replacement or None.
ResidualEdit = Callable[[int, torch.Tensor], "torch.Tensor | None"]


@dataclass(frozen=True)
class Anatomy:
    """The modules the residual stream passes through, found by their usual names."""

    embed: nn.Module
    layers: nn.ModuleList
    norm: nn.Module
    unembed: nn.Module

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def readout(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token probabilities from residual-stream vectors: final norm, unembedding, softmax."""
        return torch.softmax(self.unembed(self.norm(hidden)).float(), -1)


def anatomy(model: nn.Module) -> Anatomy:
    decoder = model.get_decoder()
    layers = next((getattr(decoder, n) for n in ("layers", "h", "blocks")
                   if isinstance(getattr(decoder, n, None), nn.ModuleList)), None)
    norm = next((getattr(decoder, n) for n in ("norm", "final_layernorm", "ln_f", "norm_f")
                 if isinstance(getattr(decoder, n, None), nn.Module)), None)
    if layers is None or norm is None:
        raise RequestError(501, f"{type(model).__name__}: its decoder layers and final norm were not found",
                           code="unsupported_model")
    return Anatomy(embed=model.get_input_embeddings(), layers=layers, norm=norm,
                   unembed=model.get_output_embeddings())


@dataclass
class Padded:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    lengths: list[int]

    @property
    def width(self) -> int:
        return self.input_ids.shape[1]

    def column(self, row: int, position: int) -> int:
        """Padded column of `position` (negative: from the end) among the row's own tokens."""
        length = self.lengths[row]
        if not -length <= position < length:
            raise IndexError(f"position {position} is outside a prompt of {length} tokens")
        return self.width - length + position % length

    def inputs(self) -> dict:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask,
                "position_ids": self.position_ids}


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int, device) -> Padded:
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
        mask[row, width - len(seq):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return Padded(ids.to(device), mask.to(device), positions.to(device), [len(s) for s in sequences])


def groups(order: Sequence[int], cost: Callable[[list[int]], int], budget: int) -> Iterator[list[int]]:
    """Consecutive runs of `order` whose padded cost stays within budget (a lone item may exceed it)."""
    group: list[int] = []
    for index in order:
        if group and cost(group + [index]) > budget:
            yield group
            group = []
        group.append(index)
    if group:
        yield group


def pad_id(lm: LoadedModel) -> int:
    tok = lm.tokenizer
    return next(i for i in (tok.pad_token_id, tok.eos_token_id, 0) if i is not None)


def _edit_output(edit: ResidualEdit, layer: int, module, args, output):
    hidden = output[0] if isinstance(output, tuple) else output
    replaced = edit(layer, hidden)
    if replaced is None:
        return None
    return (replaced, *output[1:]) if isinstance(output, tuple) else replaced


@contextmanager
def residual_hooks(anat: Anatomy, edit: ResidualEdit):
    """Calls `edit` with the residual stream after the embedding and after every block."""
    modules = [anat.embed, *anat.layers]
    handles = [m.register_forward_hook(partial(_edit_output, edit, layer)) for layer, m in enumerate(modules)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def eager_attention(model):
    """Attention probabilities exist only in the eager implementation; the fast one is restored after."""
    previous = model.config._attn_implementation
    if previous != "eager":
        model.set_attn_implementation("eager")
    try:
        yield
    finally:
        if previous != "eager":
            model.set_attn_implementation(previous)


# --- scoring ------------------------------------------------------------------------------------


def score_continuations(lm: LoadedModel, items: list[tuple[list[int], list[list[int]]]],
                        batch_tokens: int) -> list[list[list[float]]]:
    """log P(token | prompt, earlier continuation tokens) for every continuation token.

    Each prompt is followed, in its row of the batch, by all of its continuations packed one after
    another; an attention mask lets each continuation see the prompt and itself only, and its
    position ids go on from the prompt's end. So the prompt runs once for all its continuations.
    """
    results: list[list[list[float]]] = [[[] for _ in conts] for _, conts in items]

    def cost(group: list[int]) -> int:
        return len(group) * (max(len(items[i][0]) for i in group) + max(_packed(items[i][1]) for i in group))

    order = sorted(range(len(items)), key=lambda i: len(items[i][0]))
    with lm.lock, torch.inference_mode():
        for group in groups(order, cost, batch_tokens):
            _score_group(lm, [items[i] for i in group], [results[i] for i in group])
    return results


def _packed(conts: list[list[int]]) -> int:
    # A continuation's last token is never an input: nothing after it is predicted.
    return sum(len(c) - 1 for c in conts)


def _score_group(lm: LoadedModel, items, out: list[list[list[float]]]) -> None:
    """One forward pass. Row layout: [padding][prompt][continuation inputs...][padding]; every prompt ends at
    column `prompt_width`, so the logits needed are the last `packed_width + 1` columns of every row."""
    prompt_width = max(len(prompt) for prompt, _ in items)
    packed_width = max(_packed(conts) for _, conts in items)
    width = prompt_width + packed_width
    ids = torch.full((len(items), width), pad_id(lm), dtype=torch.long)
    positions = torch.zeros((len(items), width), dtype=torch.long)
    allowed = torch.eye(width, dtype=torch.bool).repeat(len(items), 1, 1)  # padding sees itself: no empty row
    picks: list[tuple[int, int, int]] = []  # (row, logit column, token) of every continuation token
    for row, (prompt, conts) in enumerate(items):
        start = prompt_width - len(prompt)
        ids[row, start:prompt_width] = torch.tensor(prompt)
        positions[row, start:prompt_width] = torch.arange(len(prompt))
        allowed[row, start:prompt_width, start:prompt_width] = torch.ones(len(prompt), len(prompt)).tril().bool()
        column = prompt_width
        for cont in conts:
            inputs = len(cont) - 1
            ids[row, column:column + inputs] = torch.tensor(cont[:-1], dtype=torch.long)
            positions[row, column:column + inputs] = len(prompt) + torch.arange(inputs)
            allowed[row, column:column + inputs, start:prompt_width] = True
            allowed[row, column:column + inputs, column:column + inputs] = torch.ones(inputs, inputs).tril().bool()
            # Logit column 0 is the prompt's last token; column k is packed input k - 1.
            sources = [0] + list(range(column - prompt_width + 1, column - prompt_width + 1 + inputs))
            picks += [(row, source, token) for source, token in zip(sources, cont)]
            column += inputs
    dtype, device = lm.model.dtype, lm.device
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)[:, None]
    logits = lm.model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                      logits_to_keep=packed_width + 1).logits
    rows, sources, tokens = (torch.tensor(column, device=logits.device) for column in zip(*picks))
    picked = iter((torch.log_softmax(logits.float(), -1)[rows, sources, tokens]).tolist())
    for row_out, (_, conts) in zip(out, items):
        for cont_out, cont in zip(row_out, conts):
            cont_out.extend(next(picked) for _ in cont)


# --- trace --------------------------------------------------------------------------------------


def trace_bytes(num_layers: int, heads: int, hidden: int, positions: int, attention_rows: int) -> int:
    """Size of one trace's tensors (float32): hidden states [layers+1, positions, hidden] and attention
    rows [layers, heads, attention_rows, positions]; linear in the prompt's length."""
    return 4 * ((num_layers + 1) * positions * hidden + num_layers * heads * attention_rows * positions)


def _attention_module(layer: nn.Module) -> nn.Module:
    for name in ("self_attn", "attn", "attention", "self_attention"):
        if isinstance(getattr(layer, name, None), nn.Module):
            return getattr(layer, name)
    raise RequestError(501, f"{type(layer).__name__}: its attention module was not found", code="unsupported_model")


def trace(lm: LoadedModel, prompts: list[list[int]], full_sequence: bool, attention_rows: int,
          batch_tokens: int) -> list[dict]:
    """One greedy step per prompt with the residual stream of every layer and the last attention rows.

    Each result is a dict of tensors and numbers ready for torch.save. Hidden states are kept at
    the last position, or at every position with `full_sequence`; attention probabilities are kept
    for the last `attention_rows` query positions (over every key), sliced as each layer computes
    them, so neither the blob nor the memory of a pass grows with the square of the length.
    """
    anat = anatomy(lm.model)
    attention = [_attention_module(layer) for layer in anat.layers]
    results: list[dict] = [{} for _ in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    with lm.lock, torch.inference_mode(), eager_attention(lm.model):
        for group in groups(order, lambda g: len(g) * max(len(prompts[i]) for i in g), batch_tokens):
            padded = left_pad([prompts[i] for i in group], pad_id(lm), lm.device)
            captured: dict[int, torch.Tensor] = {}
            rows: dict[int, torch.Tensor] = {}

            def keep_rows(layer: int, module, args, output) -> None:
                weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
                if weights is None:
                    raise RequestError(501, "the model's attention returns no probabilities", code="unsupported_model")
                rows[layer] = weights[:, :, -attention_rows:].float().cpu()

            handles = [module.register_forward_hook(partial(keep_rows, layer)) for layer, module in enumerate(attention)]
            try:
                with residual_hooks(anat, lambda layer, hidden: captured.__setitem__(layer, hidden)):
                    out = lm.model(**padded.inputs(), logits_to_keep=1)
            finally:
                for handle in handles:
                    handle.remove()
            probs = torch.softmax(out.logits[:, -1].float(), -1).cpu()
            for row, index in enumerate(group):
                start = padded.width - padded.lengths[row]
                kept = slice(start if full_sequence else padded.width - 1, None)
                query_rows = min(attention_rows, padded.lengths[row])
                next_id = int(probs[row].argmax())
                results[index] = {
                    "input_ids": torch.tensor(prompts[index]),
                    "positions": list(range(kept.start - start, padded.lengths[row])),
                    "hidden_states": torch.stack([captured[layer][row, kept] for layer in sorted(captured)])
                    .float().cpu(),
                    "attention_positions": list(range(padded.lengths[row] - query_rows, padded.lengths[row])),
                    "attentions": torch.stack([rows[layer][row, :, -query_rows:, start:]
                                               for layer in range(len(attention))]),
                    "next_token_id": next_id,
                    "next_token_prob": float(probs[row, next_id]),
                }
    return results


# --- logit lens and patching --------------------------------------------------------------------


@dataclass
class Readings:
    """Probabilities of the target tokens and the most likely token, read at one point."""

    probs: list[float]
    top_id: int
    top_prob: float


def _readings(probs: torch.Tensor, target_ids: list[int]) -> Readings:
    top = int(probs.argmax())
    return Readings(probs=probs[target_ids].tolist(), top_id=top, top_prob=float(probs[top]))


def logit_lens(lm: LoadedModel, prompts: list[list[int]], target_ids: list[int], position: int,
               batch_tokens: int) -> list[tuple[int, list[Readings]]]:
    """For each prompt: the position read and, per layer 0..L, what the residual stream predicts there."""
    anat = anatomy(lm.model)
    results: list[tuple[int, list[Readings]]] = [(0, []) for _ in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    with lm.lock, torch.inference_mode():
        for group in groups(order, lambda g: len(g) * max(len(prompts[i]) for i in g), batch_tokens):
            padded = left_pad([prompts[i] for i in group], pad_id(lm), lm.device)
            try:
                columns = torch.tensor([padded.column(row, position) for row in range(len(group))])
            except IndexError as exc:
                raise RequestError(400, str(exc), param="position") from None
            rows = torch.arange(len(group))
            at_position: dict[int, torch.Tensor] = {}
            with residual_hooks(anat, lambda layer, hidden: at_position.__setitem__(
                    layer, hidden[rows.to(hidden.device), columns.to(hidden.device)])):
                lm.model(**padded.inputs(), logits_to_keep=1)
            probs = torch.stack([anat.readout(at_position[layer]) for layer in sorted(at_position)]).cpu()
            for row, index in enumerate(group):
                read = int(columns[row]) - (padded.width - padded.lengths[row])
                results[index] = (read, [_readings(probs[layer, row], target_ids) for layer in range(len(probs))])
    return results


def patch(lm: LoadedModel, source: list[int], target: list[int], target_ids: list[int],
          layers: list[int] | None, positions: list[int] | None, read_position: int, each_layer: bool,
          batch_tokens: int) -> tuple[Readings, list[tuple[list[int], Readings]]]:
    """Activation patching: the target prompt's run with the source's residual stream written in.

    One batch holds the source, the unpatched target and the patched targets. Rows do not mix, so
    at each layer the source row's own output is what the patched rows receive.
    Returns the baseline readings and, per patched run, its layers and readings.
    """
    anat = anatomy(lm.model)
    layers = list(range(anat.num_layers + 1)) if layers is None else layers
    bad = [layer for layer in layers if not 0 <= layer <= anat.num_layers]
    if bad or not layers:
        raise RequestError(400, f"layers must be within 0..{anat.num_layers}" + (f"; got {bad}" if bad else ""),
                           param="layers")
    if positions is None:
        if len(source) != len(target):
            raise RequestError(400, f"patching every position needs prompts of equal length; the source has "
                                    f"{len(source)} tokens, the target {len(target)}", param="positions")
        positions = list(range(len(target)))
    plans = [[]] + ([[layer] for layer in layers] if each_layer else [layers])
    per_pass = max(1, batch_tokens // max(len(source), len(target)) - 1)
    readings: list[Readings] = []
    with lm.lock, torch.inference_mode():
        for start in range(0, len(plans), per_pass):
            chunk = plans[start:start + per_pass]
            padded = left_pad([source] + [target] * len(chunk), pad_id(lm), lm.device)
            try:
                source_cols = torch.tensor([padded.column(0, p) for p in positions])
                target_cols = torch.tensor([padded.column(1, p) for p in positions])
            except IndexError as exc:
                raise RequestError(400, str(exc), param="positions") from None
            try:
                read_col = padded.column(1, read_position)
            except IndexError as exc:
                raise RequestError(400, str(exc), param="read_position") from None
            rows_at = {layer: torch.tensor([1 + r for r, plan in enumerate(chunk) if layer in plan])
                       for layer in layers}

            def write_source(layer: int, hidden: torch.Tensor):
                rows = rows_at.get(layer)
                if rows is None or not len(rows):
                    return None
                hidden = hidden.clone()
                device = hidden.device
                hidden[rows.to(device)[:, None], target_cols.to(device)[None, :]] = hidden[0, source_cols.to(device)]
                return hidden

            with residual_hooks(anat, write_source):
                logits = lm.model(**padded.inputs(), logits_to_keep=padded.width - read_col).logits[:, 0]
            probs = torch.softmax(logits.float(), -1).cpu()
            readings += [_readings(probs[1 + r], target_ids) for r in range(len(chunk))]
    return readings[0], [(plan, reading) for plan, reading in zip(plans[1:], readings[1:])]
