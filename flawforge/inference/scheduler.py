"""Continuous batching on a transformers model: concurrent requests share one forward pass per step.

One thread owns the model. Requests are queued items, each with a queue of its own for the deltas it
streams. Between two decode steps the thread admits waiting requests (each prompt runs alone, then joins
the batch), lets every running request choose its next tokens from its rows of the step's logits (its
own grammar, penalties and seeded draws: `RequestDecoder`), drops the rows that finished or whose client
went away, and runs the next step for the rest.

The running sequences' key/value caches are held left-padded to one length (`PaddedBatch`): padding is
masked and each row's position ids count its own tokens, so a row computes what it would alone, up to
float rounding. What is guaranteed: greedy decoding picks the highest logit and, among exactly equal
logits, the lowest token id; a batch of rows may differ from a row alone in the last bits of a logit
(another matrix-multiply kernel, another summation order), so identical greedy text holds wherever the
best token leads the next by more than that rounding. tests/inference/test_batching.py checks the text
of the test prompts on the local model, in float32 on the CPU, batched against alone.
"""
from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from flawforge.inference.backend import Delta
from flawforge.inference.decoding import RequestDecoder
from flawforge.inference.loading import LoadedModel
from flawforge.runtime.metrics import GENERATION_ROWS, GENERATION_WAITING

log = logging.getLogger(__name__)

_END = object()  # a request's queue holds its deltas, then this (or the exception that ended it)


@dataclass(eq=False)
class GenerationRequest:
    """One request's prompt and decoder, the queue its deltas arrive on, and how it learns its client left."""

    prompt_ids: list[int]
    decoder: RequestDecoder
    cancelled: Callable[[], bool]
    deltas: queue.Queue = field(default_factory=queue.Queue)
    abandoned: threading.Event = field(default_factory=threading.Event)

    @property
    def rows(self) -> int:
        return self.decoder.params.n

    def gone(self) -> bool:
        return self.abandoned.is_set() or self.cancelled()

    def received(self) -> Iterator[Delta]:
        """The deltas as the scheduler releases them; leaving early (the caller stops reading) frees its rows."""
        try:
            while (item := self.deltas.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.abandoned.set()


class PaddedBatch:
    """The running rows' key/value cache, left-padded to one length, with each row's attention mask, token count
    and the logits its next token is chosen from. Row order is the order rows joined. Full-attention cache layers
    only (TransformersBackend checks the model's)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cache = None
        self.mask = torch.zeros((0, 0), dtype=torch.long, device=device)  # 1 where a column holds a row's token
        self.lengths = torch.zeros(0, dtype=torch.long, device=device)
        self.logits = torch.zeros(0)  # [rows, vocab], float32, on the CPU

    @property
    def rows(self) -> int:
        return self.mask.shape[0]

    def join(self, cache, logits: torch.Tensor, prompt_tokens: int, copies: int) -> None:
        """Adds `copies` rows continuing one prompt's cache (batch of one) and its last logits [1, vocab]."""
        cache.batch_repeat_interleave(copies)
        width = max(self.mask.shape[1], prompt_tokens)
        new_mask = F.pad(torch.ones((copies, prompt_tokens), dtype=torch.long, device=self.device),
                         (width - prompt_tokens, 0))
        if self.cache is None:
            self.cache = cache
        else:
            for mine, theirs in zip(self.cache.layers, cache.layers):
                for name in ("keys", "values"):
                    setattr(mine, name, torch.cat([_left_pad(getattr(mine, name), width),
                                                   _left_pad(getattr(theirs, name), width)]))
        self.mask = torch.cat([F.pad(self.mask, (width - self.mask.shape[1], 0)), new_mask])
        self.lengths = torch.cat([self.lengths, torch.full((copies,), prompt_tokens, device=self.device)])
        self.logits = torch.cat([self.logits.reshape(-1, logits.shape[-1]), logits.expand(copies, -1)])

    def keep(self, rows: list[int]) -> None:
        """Only `rows` stay, in their order; columns no remaining row uses are cut from the left."""
        if len(rows) == self.rows:
            return
        if not rows:
            self.__init__(self.device)
            return
        index = torch.tensor(rows, device=self.device)
        self.mask, self.lengths, self.logits = self.mask[index], self.lengths[index], self.logits[index.cpu()]
        unused = int((self.mask.shape[1] - self.lengths).min())
        for layer in self.cache.layers:
            layer.keys = layer.keys[index, :, unused:]
            layer.values = layer.values[index, :, unused:]
        self.mask = self.mask[:, unused:]

    def step_inputs(self, tokens: list[int]) -> dict:
        """The next forward's inputs: each row's token, at its own position, seeing only its own columns."""
        ones = torch.ones((self.rows, 1), dtype=torch.long, device=self.device)
        self.mask = torch.cat([self.mask, ones], 1)
        positions = self.lengths[:, None].clone()
        self.lengths = self.lengths + 1
        return {"input_ids": torch.tensor(tokens, device=self.device)[:, None], "attention_mask": self.mask,
                "position_ids": positions}


def _left_pad(states: torch.Tensor, width: int) -> torch.Tensor:
    """[rows, heads, length, dim] padded with zeros on the left to `width` positions."""
    return F.pad(states, (0, 0, width - states.shape[2], 0))


class BatchScheduler:
    """The thread that owns the model for generation, and the requests waiting for it. At most `max_rows`
    choices run at once (a request of more choices runs alone); the research endpoints take the model's lock
    between two steps."""

    def __init__(self, lm: LoadedModel, max_rows: int):
        self.lm = lm
        self.max_rows = max_rows
        self.inbox: queue.Queue[GenerationRequest] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()

    def submit(self, request: GenerationRequest) -> Iterator[Delta]:
        with self._start:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="generate", daemon=True)
                self._thread.start()
        self.inbox.put(request)
        return request.received()

    def _run(self) -> None:
        batch = PaddedBatch(self.lm.device)
        owners: list[tuple[GenerationRequest, int]] = []  # per row: its request and choice
        waiting: deque[GenerationRequest] = deque()
        while True:
            try:
                self._admit(batch, owners, waiting)
                if batch.rows:
                    self._step(batch, owners)
            except Exception as exc:  # the model failed: every running request ends with the error
                log.exception("a generation step failed")
                for request in dict.fromkeys(request for request, _ in owners):
                    request.deltas.put(exc)
                owners.clear()
                batch = PaddedBatch(self.lm.device)
                GENERATION_ROWS.set(0)

    def _admit(self, batch: PaddedBatch, owners: list, waiting: deque) -> None:
        """Takes new requests in; runs the prompts of those that fit beside the running rows."""
        while True:
            try:
                waiting.append(self.inbox.get(block=not batch.rows and not waiting))
            except queue.Empty:
                break
        while waiting and (not batch.rows or batch.rows + waiting[0].rows <= self.max_rows):
            request = waiting.popleft()
            if request.gone():
                request.deltas.put(_END)
                continue
            try:
                with self.lm.lock, torch.inference_mode():
                    out, cache = self.lm.forward(input_ids=torch.tensor([request.prompt_ids], device=self.lm.device),
                                                 logits_to_keep=1)
                batch.join(cache, out.logits[:, -1].float().cpu(), len(request.prompt_ids), request.rows)
            except Exception as exc:  # this prompt failed alone: the batch is as it was
                request.deltas.put(exc)
                continue
            owners += [(request, choice) for choice in range(request.rows)]
        GENERATION_ROWS.set(batch.rows)
        GENERATION_WAITING.set(len(waiting) + self.inbox.qsize())

    def _step(self, batch: PaddedBatch, owners: list) -> None:
        """Each request chooses its rows' next tokens; finished and abandoned rows leave; the rest run a step."""
        rows_of: dict[GenerationRequest, list[int]] = {}
        for row, (request, _) in enumerate(owners):
            rows_of.setdefault(request, []).append(row)
        kept: list[int] = []
        tokens: list[int] = []
        for request, rows in rows_of.items():
            if request.gone():
                request.deltas.put(_END)
                continue
            try:
                deltas, fed = request.decoder.step(batch.logits[rows])
            except Exception as exc:  # this request's decoding failed (its grammar, say); the others go on
                request.deltas.put(exc)
                continue
            for delta in deltas:
                request.deltas.put(delta)
            if not request.decoder.running:
                request.deltas.put(_END)
            for row in rows:
                choice = owners[row][1]
                if choice in fed:
                    kept.append(row)
                    tokens.append(fed[choice])
        batch.keep(kept)
        owners[:] = [owners[row] for row in kept]
        GENERATION_ROWS.set(batch.rows)
        if not kept:
            return
        with self.lm.lock, torch.inference_mode():
            out, batch.cache = self.lm.forward(batch.cache, **batch.step_inputs(tokens))
        batch.logits = out.logits[:, -1].float().cpu()
