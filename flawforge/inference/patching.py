"""Activation patching: a source prompt's activations written into a target prompt's run.

One generic patcher, `run_patched`: the target's tokens before the first patched position run once and
their key/value cache is repeated for every row of the patched batch; each row gets its own patches
(setters, one per patch: a setter edits the rows' cache and/or returns hook functions), and the rest of
the target runs once for all rows. The kinds of the semantic-pressure study are classes in `PATCH_KINDS`,
each making the setter of one block; the research endpoint's residual patching uses the same patcher.

The study's kinds, at the target's last position, baseline (source) into negative (target) prompt, as
the reference implementation (Semantic Gravity Wells) defines them:
- A `residual`: block b's output;
- B `attn_out`: block b's attention output;
- C `kv_instruction`: the cached key and value vectors of line 1 of the baseline ("Answer with exactly one
  English word.") copied into the cache at the negative's prohibition-line positions, token by token in
  order (as many as the shorter span holds);
- D `kv_question`: the same for the question's tokens;
- `instruction_knockout` (not the reference's): block b's attention from the last position to the
  prohibition line's tokens is masked out.
C and D copy the keys as cached, after the rotary encoding, into a cache the negative's prefix computed
unpatched: only the last position and what follows it read them.

The greedy continuation of the flip test continues each kind as the reference does: A and B keep their hook
on, each new token's activation at block b overwritten with the source's last-position one; the others leave
their patch in the cache only (C and D's copied entries, the knockout's patched last position).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Sequence

import torch

from flawforge.inference.errors import RequestError
from flawforge.inference.hooks import HookFn, anatomy, capture, copy_cache, hide_keys, hooked, resid, write_columns
from flawforge.inference.loading import LoadedModel
from flawforge.inference.prefill import fork_cache
from flawforge.inference.research import Readings, readings

if TYPE_CHECKING:
    from transformers import DynamicCache

Setter = Callable[["DynamicCache", list[int]], dict[str, HookFn]]
"""Installs one patch into some rows of a patched run: edits the run's cache in place and/or returns hook
functions by hook-point name."""


@dataclass
class SourceRun:
    """The source prompt run whole: its key/value cache, the activations kept at every position
    ([positions, d] by hook-point name) and its next-token probabilities."""

    cache: DynamicCache
    activations: dict[str, torch.Tensor]
    probs: torch.Tensor


def run_source(lm: LoadedModel, source: list[int], points: Sequence[str]) -> SourceRun:
    anat = anatomy(lm.model)
    with lm.lock, torch.inference_mode():
        with capture(anat, points, select=lambda value: value[0]) as kept:
            out, cache = lm.forward(input_ids=torch.tensor([source], device=lm.device), logits_to_keep=1)
    return SourceRun(cache, kept, torch.softmax(out.logits[0, -1].float(), -1).cpu())


def _chain(first: HookFn, second: HookFn) -> HookFn:
    def both(value: torch.Tensor):
        changed = first(value)
        value = value if changed is None else changed
        again = second(value)
        return value if again is None else again

    return both


def run_patched(lm: LoadedModel, target: list[int], start: int, rows: Sequence[Sequence[Setter]], read: int,
                max_new_tokens: int = 0, batch_rows: int | None = None,
                hooks_while_continuing: bool = False) -> tuple[torch.Tensor, list[list[int]]]:
    """The target prompt run once per entry of `rows`, each with its setters installed.

    `target[:start]` runs once unpatched and its cache is repeated for the rows; `target[start:]` runs with
    the patches. Returns the next-token probabilities [rows, vocab] read at position `read` (>= start) and,
    with `max_new_tokens` (reading at the last position), each row's greedy continuation, the patched cache
    kept. With `hooks_while_continuing` the rows' hook functions stay on for the continuation too: each step
    runs one new token, column 0 of its activations, where a patch of the last position (alone in the tail)
    writes; without, a patch reaches later tokens through the cache only. `batch_rows` caps the rows of one
    forward pass."""
    if not 0 <= start <= read < len(target):
        raise ValueError(f"patched run of {len(target)} tokens: need 0 <= start ({start}) <= read ({read}) < length")
    if hooks_while_continuing and start != len(target) - 1:
        raise ValueError(f"hooks kept on while continuing write each new token where the last position alone was "
                         f"patched: need start ({start}) = the last position ({len(target) - 1})")
    anat = anatomy(lm.model)
    batch_rows = batch_rows or len(rows)
    tail_width = len(target) - start
    probs_out, continuations = [], []
    with lm.lock, torch.inference_mode():
        prefix = lm.forward(input_ids=torch.tensor([target[:start]], device=lm.device))[1] if start else None
        for first in range(0, len(rows), batch_rows):
            chunk = rows[first:first + batch_rows]
            cache = None
            if prefix is not None:
                cache = fork_cache(prefix)
                cache.batch_repeat_interleave(len(chunk))
            rows_of: dict[Setter, list[int]] = {}
            for row, setters in enumerate(chunk):
                for setter in setters:
                    rows_of.setdefault(setter, []).append(row)
            fns: dict[str, HookFn] = {}
            for setter, its_rows in rows_of.items():
                for name, fn in setter(cache, its_rows).items():
                    fns[name] = _chain(fns[name], fn) if name in fns else fn
            tail = torch.tensor([target[start:]], device=lm.device).expand(len(chunk), -1)
            positions = torch.arange(start, len(target), device=lm.device)[None].expand(len(chunk), -1)
            with hooked(anat, fns):
                out, cache = lm.forward(cache, input_ids=tail, position_ids=positions,
                                        logits_to_keep=tail_width - (read - start))
            probs = torch.softmax(out.logits[:, 0].float(), -1)
            probs_out.append(probs.cpu())
            if max_new_tokens:
                with hooked(anat, fns if hooks_while_continuing else {}):
                    continuations += _greedy(lm, cache, probs.argmax(-1), len(target), max_new_tokens)
    return torch.cat(probs_out), continuations


def _greedy(lm: LoadedModel, cache, chosen: torch.Tensor, length: int, max_new_tokens: int) -> list[list[int]]:
    """Greedy continuations of the rows whose first tokens are `chosen`, the end of sequence excluded."""
    eos, count = lm.eos_ids, chosen.shape[0]
    continuations: list[list[int]] = [[] for _ in range(count)]
    done = [False] * count
    for step in range(max_new_tokens):
        for row, token in enumerate(chosen.tolist()):
            if not done[row]:
                done[row] = token in eos
                if not done[row]:
                    continuations[row].append(token)
        if all(done) or step == max_new_tokens - 1:
            break
        position = torch.full((count, 1), length + step, device=lm.device)
        out, _ = lm.forward(cache, input_ids=chosen[:, None].to(lm.device), position_ids=position)
        chosen = out.logits[:, -1].float().argmax(-1)
    return continuations


# --- the study's patch kinds --------------------------------------------------------------------


@dataclass(frozen=True)
class PatchPlan:
    """One prompt's patching: baseline (source) and negative (target) prompt ids, and the token indices of
    the instruction (the baseline's line 1, the negative's prohibition line) and of the question in each."""

    source: list[int]
    target: list[int]
    source_instruction: list[int]
    target_instruction: list[int]
    source_question: list[int]
    target_question: list[int]


class PatchKind(ABC):
    """One kind of patch of the study: what the source run keeps and the setter of one block, at the target's
    last position."""

    name: ClassVar[str]
    reference: ClassVar[str]  # the reference implementation's letter, or "" for a kind of our own
    label: ClassVar[str]  # what is patched, in words (figures and the report)
    # Whether the patch's hooks stay on while the patched run continues (the flip test), writing each new token.
    hooks_while_continuing: ClassVar[bool] = False

    def source_points(self, blocks: int) -> list[str]:
        """The hook points whose activations the source run keeps."""
        return []

    @abstractmethod
    def setter(self, plan: PatchPlan, source: SourceRun, block: int) -> Setter:
        ...


class _LastPosition(PatchKind):
    """The source's activation at its last position written over the target's at its last position and, while
    the patched run continues, over each new token's (the reference keeps its hook on)."""

    point: ClassVar[str]
    hooks_while_continuing = True

    def source_points(self, blocks: int) -> list[str]:
        return [self.point.format(block=block) for block in range(blocks)]

    def setter(self, plan: PatchPlan, source: SourceRun, block: int) -> Setter:
        name = self.point.format(block=block)
        values = source.activations[name][-1:]

        def install(cache, rows: list[int]) -> dict[str, HookFn]:
            # The patched run's tail is the last token alone, and each continuation step one new token.
            return {name: write_columns(rows, [0], values)}

        return install


class ResidualStream(_LastPosition):
    name, reference, label = "residual", "A", "residual stream (block output)"
    point = "blocks.{block}.resid_post"


class AttentionOutput(_LastPosition):
    name, reference, label = "attn_out", "B", "attention output"
    point = "blocks.{block}.attn_out"


class _CachedKeysValues(PatchKind):
    """The source's cached key and value vectors of one span copied into the target's cache at the positions of
    its counterpart span, paired in order (the shorter span's length)."""

    @abstractmethod
    def spans(self, plan: PatchPlan) -> tuple[list[int], list[int]]:
        """(target positions, source positions), before the last token."""

    def setter(self, plan: PatchPlan, source: SourceRun, block: int) -> Setter:
        target, origin = self.spans(plan)
        pairs = [(t, s) for t, s in zip(target, origin) if t < len(plan.target) - 1 and s < len(plan.source) - 1]

        def install(cache, rows: list[int]) -> dict[str, HookFn]:
            if pairs:
                copy_cache(cache, block, rows, [t for t, _ in pairs], source.cache, [s for _, s in pairs])
            return {}

        return install


class InstructionKeysValues(_CachedKeysValues):
    name, reference, label = "kv_instruction", "C", "cached K/V: line 1 into the prohibition line"

    def spans(self, plan: PatchPlan) -> tuple[list[int], list[int]]:
        return plan.target_instruction, plan.source_instruction


class QuestionKeysValues(_CachedKeysValues):
    name, reference, label = "kv_question", "D", "cached K/V of the question"

    def spans(self, plan: PatchPlan) -> tuple[list[int], list[int]]:
        return plan.target_question, plan.source_question


class InstructionKnockout(PatchKind):
    name, reference, label = "instruction_knockout", "", "prohibition line hidden from the last position"

    def setter(self, plan: PatchPlan, source: SourceRun, block: int) -> Setter:
        def install(cache, rows: list[int]) -> dict[str, HookFn]:
            return {f"blocks.{block}.attn.mask": hide_keys(rows, 0, plan.target_instruction)}

        return install


PATCH_KINDS: dict[str, PatchKind] = {kind.name: kind for kind in (
    ResidualStream(), AttentionOutput(), InstructionKeysValues(), QuestionKeysValues(), InstructionKnockout())}


@dataclass
class PatchReadings:
    """One prompt and kind: the unpatched target's readings and, per block patched, the patched run's.
    `p` is P = sum over first tokens t of p(t) * rest[t]; `p_first` the mass on the target's single-token
    ids (None where it has none)."""

    p_first_source: float | None
    p_first_orig: float | None
    p_orig: float
    p_first: list[float] | None
    p: list[float]
    completion_orig: list[int]
    completions: list[list[int]]


def patch_effects(lm: LoadedModel, plan: PatchPlan, kind: PatchKind, single_ids: Sequence[int],
                  rest: dict[int, float], max_new_tokens: int) -> PatchReadings:
    """Patch each block in turn (one row per block, row 0 unpatched) at the target's last position and read
    it out; `rest[t]` is the unpatched target's probability of completing some sequence of S(X) after t. Each
    row is continued greedily for `max_new_tokens` (the flip test), the kind's hooks on where it keeps them."""
    blocks = anatomy(lm.model).num_layers
    source = run_source(lm, plan.source, kind.source_points(blocks))
    rows = [[]] + [[kind.setter(plan, source, block)] for block in range(blocks)]
    last = len(plan.target) - 1
    probs, completions = run_patched(lm, plan.target, last, rows, last, max_new_tokens,
                                     hooks_while_continuing=kind.hooks_while_continuing)
    starts = torch.tensor(list(rest), dtype=torch.long)
    p = (probs[:, starts] * torch.tensor(list(rest.values()))).sum(-1).clamp(max=1.0)
    ids = torch.tensor(list(single_ids), dtype=torch.long)
    p_first = probs[:, ids].sum(-1) if len(ids) else None
    return PatchReadings(
        p_first_source=float(source.probs[ids].sum()) if len(ids) else None,
        p_first_orig=float(p_first[0]) if p_first is not None else None, p_orig=float(p[0]),
        p_first=p_first[1:].tolist() if p_first is not None else None, p=p[1:].tolist(),
        completion_orig=completions[0], completions=completions[1:])


# --- the research endpoint's residual patching ----------------------------------------------------


def _position(length: int, position: int, param: str) -> int:
    if not -length <= position < length:
        raise RequestError(400, f"position {position} is outside a prompt of {length} tokens", param=param)
    return position % length


def patch(lm: LoadedModel, source: list[int], target: list[int], target_ids: list[int],
          layers: list[int] | None, positions: list[int] | None, read_position: int, each_layer: bool,
          batch_tokens: int) -> tuple[Readings, list[tuple[list[int], Readings]]]:
    """The target prompt's run with the source's residual stream written in at `positions` (the same index in
    both prompts) of residual layers `layers` (0: embeddings, l: after block l), all together or one layer per
    run. Returns the unpatched target's readings at `read_position` and, per patched run, its layers and
    readings."""
    layer_count = anatomy(lm.model).num_layers
    layers = list(range(layer_count + 1)) if layers is None else layers
    bad = [layer for layer in layers if not 0 <= layer <= layer_count]
    if bad or not layers:
        raise RequestError(400, f"layers must be within 0..{layer_count}" + (f"; got {bad}" if bad else ""),
                           param="layers")
    if positions is None:
        if len(source) != len(target):
            raise RequestError(400, f"patching every position needs prompts of equal length; the source has "
                                    f"{len(source)} tokens, the target {len(target)}", param="positions")
        positions = list(range(len(target)))
    source_columns = [_position(len(source), p, "positions") for p in positions]
    target_columns = [_position(len(target), p, "positions") for p in positions]
    read = _position(len(target), read_position, "read_position")
    start = min(target_columns + [read])
    kept = run_source(lm, source, [resid(layer) for layer in layers])

    def setter(layer: int) -> Setter:
        name, values = resid(layer), kept.activations[resid(layer)][source_columns]
        return lambda cache, rows: {name: write_columns(rows, [c - start for c in target_columns], values)}

    plans = [[]] + ([[layer] for layer in layers] if each_layer else [layers])
    setters = {layer: setter(layer) for layer in layers}
    probs, _ = run_patched(lm, target, start, [[setters[layer] for layer in plan] for plan in plans], read,
                           batch_rows=max(1, batch_tokens // (len(target) - start)))
    found = [readings(row, target_ids) for row in probs]
    return found[0], list(zip(plans[1:], found[1:]))
