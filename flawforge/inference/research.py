"""Research computations on a transformers model: teacher-forced scoring, traces of hidden states
and attentions (of prompts, and of prompts continued to a decision step) and the logit lens. Activation
patching is `flawforge.inference.patching`; both read the model through `flawforge.inference.hooks`.

Prompts of different lengths share a forward pass, left-padded: padding is masked and position
ids count real tokens only, so each row computes what it would alone (up to float rounding).
The residual stream is indexed like Hugging Face's hidden states: 0 is the embedding output and
l (1..L) the output of the l-th block, always before the final norm.
"""
from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import torch

from flawforge.inference.errors import RequestError
from flawforge.inference.hooks import anatomy, capture, eager_attention, resid
from flawforge.inference.loading import LoadedModel

if TYPE_CHECKING:
    from flawforge.inference.prefill import Prefill


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


def _patterns(num_layers: int) -> list[str]:
    return [f"blocks.{block}.attn.pattern" for block in range(num_layers)]


def trace(lm: LoadedModel, prompts: list[list[int]], full_sequence: bool, attention_rows: int,
          batch_tokens: int) -> list[dict]:
    """One greedy step per prompt with the residual stream of every layer and the last attention rows.

    Each result is a dict of tensors and numbers ready for torch.save. Hidden states are kept at
    the last position, or at every position with `full_sequence`; attention probabilities are kept
    for the last `attention_rows` query positions (over every key), sliced as each layer computes
    them, so neither the blob nor the memory of a pass grows with the square of the length.
    """
    anat = anatomy(lm.model)
    layers = anat.num_layers
    results: list[dict] = [{} for _ in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    with lm.lock, torch.inference_mode(), eager_attention(lm.model):
        for group in groups(order, lambda g: len(g) * max(len(prompts[i]) for i in g), batch_tokens):
            padded = left_pad([prompts[i] for i in group], pad_id(lm), lm.device)
            with ExitStack() as stack:
                states = stack.enter_context(capture(anat, [resid(layer) for layer in range(layers + 1)],
                                                     select=lambda h: h if full_sequence else h[:, -1:]))
                rows = stack.enter_context(capture(anat, _patterns(layers),
                                                   select=lambda a: a[:, :, -attention_rows:].float().cpu()))
                out = lm.model(**padded.inputs(), logits_to_keep=1)
            probs = torch.softmax(out.logits[:, -1].float(), -1).cpu()
            for row, index in enumerate(group):
                start = padded.width - padded.lengths[row]
                kept = slice(start if full_sequence else -1, None)
                query_rows = min(attention_rows, padded.lengths[row])
                next_id = int(probs[row].argmax())
                first = start if full_sequence else padded.width - 1
                results[index] = {
                    "input_ids": torch.tensor(prompts[index]),
                    "positions": list(range(first - start, padded.lengths[row])),
                    "hidden_states": torch.stack([states[resid(layer)][row, kept] for layer in range(layers + 1)])
                    .float().cpu(),
                    "attention_positions": list(range(padded.lengths[row] - query_rows, padded.lengths[row])),
                    "attentions": torch.stack([rows[name][row, :, -query_rows:, start:] for name in _patterns(layers)]),
                    "next_token_id": next_id,
                    "next_token_prob": float(probs[row, next_id]),
                }
    return results


def trace_at(lm: LoadedModel, prompts: Prefill, completions: Sequence[Sequence[int]], steps: Sequence[int],
             lens_ids: Sequence[Sequence[int]], decompose_blocks: Sequence[int]) -> list[dict]:
    """Per row, at the last position of its prefix prompt + completion[:T] (T = `steps[row]`): `hidden_states`
    [L+1, d] (embedding and every block's output, before the final norm), `attentions` [L, heads,
    prompt_length] (to the prompt's keys only), and, where the row's `lens_ids` (the target's single-token
    ids) are not empty, `lens` [L+1] (their probability mass read through the final norm and unembedding at
    every layer) and `decomposition` [k, 3] for the blocks `decompose_blocks`: the mass read from the
    block's input, after adding its attention output, and after adding its MLP output (None otherwise).
    Continues the prefill: its last prompt column and each row's completion tokens run again with the
    prompt's cache, and each row is read at its own step (later columns cannot reach it)."""
    anat = anatomy(lm.model)
    layers = anat.num_layers
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
    at = (torch.arange(rows, device=lm.device), torch.tensor(list(steps), device=lm.device))
    parts = [f"blocks.{block}.{part}" for block in decompose_blocks for part in ("attn_out", "mlp_out")]
    results = []
    with lm.lock, torch.inference_mode(), eager_attention(lm.model):
        cache = prompts.fork()
        cache.crop(-1)
        with ExitStack() as stack:
            states = stack.enter_context(capture(anat, [resid(layer) for layer in range(layers + 1)] + parts,
                                                 select=lambda h: h[at]))
            patterns = stack.enter_context(capture(anat, _patterns(layers),
                                                   select=lambda a: a[at[0], :, at[1]].float().cpu()))
            lm.forward(cache, **inputs, logits_to_keep=1)
        hidden = torch.stack([states[resid(layer)] for layer in range(layers + 1)], 1)  # [rows, L+1, d]
        for row in range(rows):
            start, length, step = width - padded.lengths[row], padded.lengths[row], steps[row]
            ids = torch.tensor(list(lens_ids[row]), dtype=torch.long, device=hidden.device)
            lens = decomposition = None
            if len(ids):
                def mass(vectors: torch.Tensor) -> torch.Tensor:
                    return anat.readout(vectors)[..., ids].sum(-1).float().cpu()

                lens = mass(hidden[row])
                decomposition = torch.zeros((0, 3))
                if decompose_blocks:
                    read = []
                    for block in decompose_blocks:  # block b's input is residual layer b
                        h_in = hidden[row, block]
                        h_attn = h_in + states[f"blocks.{block}.attn_out"][row]
                        read.append(torch.stack([h_in, h_attn, h_attn + states[f"blocks.{block}.mlp_out"][row]]))
                    decomposition = mass(torch.stack(read))  # [k, 3]
            prompt = padded.input_ids[row, start:].cpu()
            results.append({
                "input_ids": torch.cat([prompt, torch.tensor(list(completions[row][:step]), dtype=torch.long)]),
                "prompt_tokens": int(length),
                # clone: a row of the batch's tensor would carry the whole batch's storage into torch.save
                "hidden_states": hidden[row].float().cpu().clone(),
                "attentions": torch.stack([patterns[name][row, :, start:width] for name in _patterns(layers)]).clone(),
                "lens": lens,
                "decomposition": decomposition,
                "decomposition_blocks": list(decompose_blocks),
            })
    return results


# --- logit lens ---------------------------------------------------------------------------------


@dataclass
class Readings:
    """Probabilities of the target tokens and the most likely token, read at one point."""

    probs: list[float]
    top_id: int
    top_prob: float


def readings(probs: torch.Tensor, target_ids: list[int]) -> Readings:
    top = int(probs.argmax())
    return Readings(probs=probs[target_ids].tolist(), top_id=top, top_prob=float(probs[top]))


def logit_lens(lm: LoadedModel, prompts: list[list[int]], target_ids: list[int], position: int,
               batch_tokens: int) -> list[tuple[int, list[Readings]]]:
    """For each prompt: the position read and, per layer 0..L, what the residual stream predicts there."""
    anat = anatomy(lm.model)
    names = [resid(layer) for layer in range(anat.num_layers + 1)]
    results: list[tuple[int, list[Readings]]] = [(0, []) for _ in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    with lm.lock, torch.inference_mode():
        for group in groups(order, lambda g: len(g) * max(len(prompts[i]) for i in g), batch_tokens):
            padded = left_pad([prompts[i] for i in group], pad_id(lm), lm.device)
            try:
                columns = torch.tensor([padded.column(row, position) for row in range(len(group))], device=lm.device)
            except IndexError as exc:
                raise RequestError(400, str(exc), param="position") from None
            rows = torch.arange(len(group), device=lm.device)
            with capture(anat, names, select=lambda hidden: hidden[rows, columns]) as at_position:
                lm.model(**padded.inputs(), logits_to_keep=1)
            probs = torch.stack([anat.readout(at_position[name]) for name in names]).cpu()
            for row, index in enumerate(group):
                read = int(columns[row]) - (padded.width - padded.lengths[row])
                results[index] = (read, [readings(probs[layer, row], target_ids) for layer in range(len(names))])
    return results
