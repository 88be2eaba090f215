"""Named hook points on a transformers decoder, read and written one way (as TransformerLens names them).

Hook points, one per activation:
- `embed`: the embedding output, the residual stream before block 0;
- `blocks.{b}.resid_post`: block b's output, the residual stream after it (before the final norm);
- `blocks.{b}.attn_out`: block b's attention output (after its output projection), before it is added;
- `blocks.{b}.mlp_out`: block b's MLP output, before it is added;
- `blocks.{b}.attn.pattern`: block b's attention probabilities [rows, heads, queries, keys] (eager attention);
- `blocks.{b}.attn.mask`: the additive (or boolean) attention mask block b's attention receives.

A hook function takes the activation and returns a replacement, or None to leave it. `hooked` installs
hook functions by name, `capture` keeps activations. The setters write a source's values into a
patched run: `write_columns` into an activation, `copy_cache` into the key/value cache (the keys as
cached, after the rotary encoding), `hide_keys` into the attention mask.

The residual stream is indexed like Hugging Face's hidden states: layer 0 is `embed`, layer l (1..L) is
block l-1's output (`resid(layer)` names it).
"""
from __future__ import annotations

from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Callable, Iterator, Mapping, Sequence

import torch
from torch import nn

from flawforge.inference.errors import RequestError

HookFn = Callable[[torch.Tensor], "torch.Tensor | None"]

_BLOCK_POINTS = ("resid_post", "attn_out", "mlp_out", "attn.pattern", "attn.mask")


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


def _child(module: nn.Module, names: Sequence[str], what: str) -> nn.Module:
    for name in names:
        if isinstance(getattr(module, name, None), nn.Module):
            return getattr(module, name)
    raise RequestError(501, f"{type(module).__name__}: its {what} was not found", code="unsupported_model")


def anatomy(model: nn.Module) -> Anatomy:
    decoder = model.get_decoder()
    layers = next((getattr(decoder, n) for n in ("layers", "h", "blocks")
                   if isinstance(getattr(decoder, n, None), nn.ModuleList)), None)
    if layers is None:
        raise RequestError(501, f"{type(model).__name__}: its decoder layers were not found", code="unsupported_model")
    return Anatomy(embed=model.get_input_embeddings(), layers=layers,
                   norm=_child(decoder, ("norm", "final_layernorm", "ln_f", "norm_f"), "final norm"),
                   unembed=model.get_output_embeddings())


def resid(layer: int) -> str:
    """The hook point of residual-stream layer `layer` (0: embeddings; l: after block l-1)."""
    return "embed" if layer == 0 else f"blocks.{layer - 1}.resid_post"


@dataclass(frozen=True)
class HookPoint:
    """Where an activation is found: a module's output (its `element`-th item where it returns a tuple), or,
    for the attention mask, the `attention_mask` argument of the attention module's call."""

    name: str
    module: nn.Module
    element: int = 0
    argument: bool = False


def hook_point(anat: Anatomy, name: str) -> HookPoint:
    if name == "embed":
        return HookPoint(name, anat.embed)
    parts = name.split(".", 2)
    if len(parts) != 3 or parts[0] != "blocks" or not parts[1].isdigit() or parts[2] not in _BLOCK_POINTS:
        raise ValueError(f"unknown hook point {name!r}: expected embed or blocks.<b>.<{'|'.join(_BLOCK_POINTS)}>")
    block = int(parts[1])
    if block >= anat.num_layers:
        raise ValueError(f"hook point {name!r}: the model has blocks 0..{anat.num_layers - 1}")
    layer = anat.layers[block]
    point = parts[2]
    if point == "resid_post":
        return HookPoint(name, layer)
    if point == "mlp_out":
        return HookPoint(name, _child(layer, ("mlp", "feed_forward", "ffn"), "MLP"))
    attention = _child(layer, ("self_attn", "attn", "attention", "self_attention"), "attention module")
    if point == "attn_out":
        return HookPoint(name, attention)
    if point == "attn.pattern":
        return HookPoint(name, attention, element=1)
    return HookPoint(name, attention, argument=True)


def _on_output(point: HookPoint, fn: HookFn, module, args, output):
    value = output[point.element] if isinstance(output, tuple) else output
    if value is None:
        raise RequestError(501, f"{point.name}: the model returns no such activation (attention probabilities "
                                "need the eager implementation)", code="unsupported_model")
    replaced = fn(value)
    if replaced is None:
        return None
    if not isinstance(output, tuple):
        return replaced
    return output[:point.element] + (replaced,) + output[point.element + 1:]


def _on_mask(fn: HookFn, module, args, kwargs):
    hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
    mask = kwargs.get("attention_mask")
    if mask is None:  # one unpadded query: the model passes none; make the additive mask it stands for
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        past = cache.get_seq_length(module.layer_idx) if cache is not None else 0
        queries = hidden.shape[1]
        mask = torch.zeros((hidden.shape[0], 1, queries, past + queries), dtype=hidden.dtype, device=hidden.device)
        if queries > 1:
            mask = mask.masked_fill(torch.ones_like(mask, dtype=torch.bool).triu(past + 1), torch.finfo(mask.dtype).min)
    replaced = fn(mask.expand(hidden.shape[0], *mask.shape[1:]))
    if replaced is not None:
        kwargs["attention_mask"] = replaced
    return args, kwargs


@contextmanager
def hooked(anat: Anatomy, fns: Mapping[str, HookFn]):
    """Runs the model with each named hook point passed through its hook function."""
    with ExitStack() as stack:
        for name, fn in fns.items():
            point = hook_point(anat, name)
            if point.argument:
                handle = point.module.register_forward_pre_hook(partial(_on_mask, fn), with_kwargs=True)
            else:
                handle = point.module.register_forward_hook(partial(_on_output, point, fn))
            stack.callback(handle.remove)
        yield


@contextmanager
def capture(anat: Anatomy, names: Sequence[str],
            select: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """Keeps the named activations of the runs inside, by name (the last run's), each passed through `select`
    (rows and columns picked as the pass computes them, so the whole tensor need not be kept)."""
    kept: dict[str, torch.Tensor] = {}

    def keep(name: str, value: torch.Tensor) -> None:
        kept[name] = select(value) if select is not None else value

    with hooked(anat, {name: partial(keep, name) for name in names}):
        yield kept


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


# --- setters: a source's values written into a patched run -------------------------------------


def _index(values: Sequence[int], device) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.long, device=device)


def write_columns(rows: Sequence[int], columns: Sequence[int], values: torch.Tensor) -> HookFn:
    """A hook function writing `values` [len(columns), d] at `columns` of every row in `rows`."""

    def write(activation: torch.Tensor) -> torch.Tensor:
        patched = activation.clone()
        device = activation.device
        patched[_index(rows, device)[:, None], _index(columns, device)[None, :]] = values.to(device, activation.dtype)
        return patched

    return write


def hide_keys(rows: Sequence[int], query: int, keys: Sequence[int]) -> HookFn:
    """A hook function for `blocks.{b}.attn.mask` (one mask row per batch row): query column `query` of every
    row in `rows` does not attend to the key positions `keys` (an attention knockout)."""

    def hide(mask: torch.Tensor) -> torch.Tensor:
        mask = mask.clone()
        blocked = False if mask.dtype == torch.bool else torch.finfo(mask.dtype).min
        mask[_index(rows, mask.device)[:, None], :, query, _index(keys, mask.device)[None, :]] = blocked
        return mask

    return hide


def copy_cache(cache, block: int, rows: Sequence[int], columns: Sequence[int], source, source_columns: Sequence[int],
               source_row: int = 0) -> None:
    """Writes the key and value vectors that `source` (a key/value cache) holds for block `block` at
    `source_columns` of its row `source_row` into `cache` at `columns` of every row in `rows`. The keys are
    copied as cached, after the rotary encoding: a key keeps the position it was computed at."""
    layer, origin = cache.layers[block], source.layers[block]
    device = layer.keys.device
    at = (_index(rows, device)[:, None], slice(None), _index(columns, device)[None, :])
    from_columns = _index(source_columns, device)
    # Cloned: forks of one cache share tensors until a layer's update concatenates.
    layer.keys, layer.values = layer.keys.clone(), layer.values.clone()
    layer.keys[at] = origin.keys[source_row][:, from_columns].transpose(0, 1)[None].to(layer.keys.dtype)
    layer.values[at] = origin.values[source_row][:, from_columns].transpose(0, 1)[None].to(layer.values.dtype)
