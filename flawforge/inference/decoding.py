"""Turning logits into text, shared by the backends: logit adjustments (penalties, bias), grammar
constraints (xgrammar), and the release of text as it is generated (stop strings, split characters).

Grammar-constrained decoding uses xgrammar, the library vLLM uses by default, so a request's
`response_format` or tools mean the same constraint on either backend (docs/compatibility.md has
the measurements behind the choice).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import torch

from flawforge.inference.backend import Backend, Delta, OutputFormat, SamplingParams, TokenChoice
from flawforge.inference.grammars import GrammarCompiler, GrammarLimits
from flawforge.inference.sampling import choose_next


class Vocabulary:
    """The tokenizer's tokens as raw bytes, and a grammar compiler over them (flawforge.inference.grammars:
    bounded, time-boxed under `limits`, compiled grammars cached)."""

    def __init__(self, tokenizer, vocab_size: int, limits: GrammarLimits | None = None):
        import xgrammar

        self.info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self.grammars = GrammarCompiler(self.info, limits)
        self.vocab_size = vocab_size
        # Characters of the longest token's text, added tokens (the chat template's markers) included: a text of
        # more than context x this many characters has more tokens than the context holds, uncounted.
        self.longest_token = max(max(map(len, self.info.decoded_vocab)),
                                 max((len(t.content) for t in tokenizer.added_tokens_decoder.values()), default=0))
        self._breakers: dict[tuple[str, ...], frozenset[int]] = {}

    def breaker_ids(self, breakers: tuple[str, ...]) -> frozenset[int]:
        """The tokens whose text holds one of `breakers` (the loop guard's sequence breakers)."""
        if breakers not in self._breakers:
            needles = [b.encode() for b in breakers if b]
            self._breakers[breakers] = frozenset(i for i, raw in enumerate(self.info.decoded_vocab)
                                                 if any(n in raw for n in needles))
        return self._breakers[breakers]

    @cached_property
    def closers(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens made only of JSON's closing marks (`"`, `]`, `}`), what ends a string, array or object, in two
        tiers: those that begin with a quote, then the rest. Inside a string only a quote ends it (a bracket
        there is text the grammar allows, and a model can write `]]]]` until the budget runs out)."""
        closing = frozenset(b'"]}')
        padding = [False] * (self.vocab_size - len(self.info.decoded_vocab))
        marks = [bool(raw) and all(byte in closing for byte in raw) for raw in self.info.decoded_vocab]
        quoted = [mark and raw[0] == ord('"') for mark, raw in zip(marks, self.info.decoded_vocab)]
        return (torch.tensor(quoted + padding)[:self.vocab_size],
                torch.tensor([mark and not first for mark, first in zip(marks, quoted)] + padding)[:self.vocab_size])

    def token_bytes(self, token_id: int) -> bytes:
        """A token's own bytes: part of a UTF-8 character where the tokenizer split one."""
        return bytes(self.info.decoded_vocab[token_id])

    def compile(self, fmt: OutputFormat, param: str):
        """The grammar of `fmt`; a RequestError naming `param` where it is invalid or too costly to compile."""
        return self.grammars.compile(fmt, param)


class Constraint:
    """One grammar matcher per sampled row: masks what the grammar forbids, follows what was chosen."""

    def __init__(self, vocabulary: Vocabulary, compiled, rows: int):
        import xgrammar

        self.matchers = [xgrammar.GrammarMatcher(compiled) for _ in range(rows)]
        self.bitmask = xgrammar.allocate_token_bitmask(rows, vocabulary.vocab_size)
        self._apply = xgrammar.apply_token_bitmask_inplace

    def mask(self, logits: torch.Tensor, rows: list[int]) -> None:
        """Sets the logits of forbidden tokens to -inf in place, for the rows still generating."""
        for row in rows:
            self.matchers[row].fill_next_token_bitmask(self.bitmask, row)
        self._apply(logits, self.bitmask, indices=rows)

    def close(self, logits: torch.Tensor, rows: list[int], closers: tuple[torch.Tensor, ...]) -> None:
        """Leaves only closing marks where the grammar allows one (after `mask`), of the first tier of `closers`
        that has one: a JSON value that must end within the token budget ends at the next mark it may take."""
        for row in rows:
            allowed = torch.isfinite(logits[row])
            for tier in closers:
                if (tier & allowed).any():
                    logits[row].masked_fill_(~(tier & allowed), float("-inf"))
                    break

    def accept(self, row: int, token_id: int) -> bool:
        """Follows the chosen token; True once the grammar is complete (nothing may follow)."""
        matcher = self.matchers[row]
        if not matcher.accept_token(token_id):
            raise RuntimeError(f"the grammar refused token {token_id}, which its own mask allowed")
        return matcher.is_terminated()


class LogitAdjuster:
    """OpenAI's presence and frequency penalties (over the tokens generated so far) and logit bias."""

    def __init__(self, params: SamplingParams, vocab_size: int):
        self.params = params
        self.bias = None
        if params.logit_bias:
            self.bias = torch.zeros(vocab_size)
            for token_id, value in params.logit_bias:
                self.bias[token_id] = value
        self.counts = (torch.zeros(params.n, vocab_size) if params.presence_penalty or params.frequency_penalty
                       else None)

    @property
    def active(self) -> bool:
        return self.bias is not None or self.counts is not None

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.bias is not None:
            logits = logits + self.bias
        if self.counts is not None:
            logits = (logits - self.counts * self.params.frequency_penalty
                      - (self.counts > 0).float() * self.params.presence_penalty)
        return logits

    def chose(self, row: int, token_id: int) -> None:
        if self.counts is not None:
            self.counts[row, token_id] += 1


class LoopGuard:
    """A penalty on repeating what the completion already wrote (the "DRY" sampler of llama.cpp's server):
    a token that would extend a repeat of an earlier run of at least `allowed_length` tokens loses
    `multiplier * base ** (length - allowed_length)` of its logit, so a greedy repetition loop is left
    within a few tokens while short repeats (a variable's name, JSON keys) are free. A run does not extend
    across a sequence-breaker token (one whose text holds a breaker string), so repeats are counted within a
    line, a quoted string or a clause. Only the completion's own tokens count, not the prompt's: a reply
    may copy its prompt (a question's words, an example's shape) without penalty."""

    def __init__(self, params: SamplingParams, breaker_ids: frozenset[int]):
        self.params = params
        self.breakers = breaker_ids
        self.generated: list[list[int]] = [[] for _ in range(params.n)]

    def repeat_lengths(self, row: int) -> dict[int, int]:
        """For each token that would extend a repeat, the length of the longest run it would extend."""
        tokens = self.generated[row]
        window = self.params.dry_penalty_last_n
        if window > 0:
            tokens = tokens[-window:]
        tail = 0  # the run that may repeat ends here and starts after the last breaker
        for token in reversed(tokens):
            if token in self.breakers:
                break
            tail += 1
        if tail < self.params.dry_allowed_length:
            return {}
        matches = _suffix_matches(tokens)
        lengths: dict[int, int] = {}
        for distance in range(1, len(tokens)):
            length = min(matches[distance], tail)
            if length >= self.params.dry_allowed_length:
                following = tokens[len(tokens) - distance]
                lengths[following] = max(lengths.get(following, 0), length)
        return lengths

    def apply(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        params = self.params
        for row in rows:
            lengths = self.repeat_lengths(row)
            if lengths:
                ids = torch.tensor(list(lengths))
                exponent = torch.tensor(list(lengths.values()), dtype=torch.float32) - params.dry_allowed_length
                logits[row, ids] -= params.dry_multiplier * params.dry_base ** exponent
        return logits

    def chose(self, row: int, token_id: int) -> None:
        self.generated[row].append(token_id)


def _suffix_matches(tokens: list[int]) -> list[int]:
    """matches[d]: how many tokens the sequence ending d tokens before the end shares with the sequence's own
    end (the Z-function of the reversed tokens, linear time)."""
    reverse = tokens[::-1]
    size = len(reverse)
    z = [0] * size
    left = right = 0
    for i in range(1, size):
        if i < right:
            z[i] = min(right - i, z[i - left])
        while i + z[i] < size and reverse[z[i]] == reverse[i + z[i]]:
            z[i] += 1
        if i + z[i] > right:
            left, right = i, i + z[i]
    return z


def _held_suffix(text: str, patterns: tuple[str, ...]) -> int:
    """Length of the longest end of `text` that may still grow into one of `patterns`."""
    longest = 0
    for pattern in patterns:
        for size in range(min(len(pattern) - 1, len(text)), longest, -1):
            if text.endswith(pattern[:size]):
                longest = size
                break
    return longest


@dataclass
class TextAssembler:
    """One choice's text as tokens arrive. Text is released once it can no longer change: not the half
    of a split UTF-8 character, nor an end that may become a stop string (which is cut, with the tokens
    wholly inside it). A token's logprobs are released with the last of its text."""

    tokenizer: object
    index: int
    stop: tuple[str, ...] = ()
    token_ids: list[int] = field(default_factory=list)
    choices: list[TokenChoice] = field(default_factory=list)
    released_chars: int = 0
    released_tokens: int = 0

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def add(self, token_id: int, choice: TokenChoice | None) -> Delta:
        """The delta after one more token; its finish_reason is "stop" where a stop string appeared."""
        self.token_ids.append(token_id)
        if choice is not None:
            self.choices.append(choice)
        text = self._decode(self.token_ids)
        search_from = max(0, self.released_chars - max((len(s) for s in self.stop), default=0))
        cut = min((i for i in (text.find(s, search_from) for s in self.stop) if i >= 0), default=-1)
        if cut >= 0:
            while self.token_ids and len(self._decode(self.token_ids[:-1])) >= cut:
                self.token_ids.pop()
                if len(self.choices) > len(self.token_ids):
                    self.choices.pop()
            return self._release(text[:cut], len(self.token_ids), "stop")
        held = len(text) - len(text.rstrip("\ufffd")) or _held_suffix(text, self.stop)
        return self._release(text[:len(text) - held], len(self.token_ids) if not held else self.released_tokens)

    def finish(self, reason: str) -> Delta:
        """Releases what was held: the choice ended (end of sequence, grammar complete, or length)."""
        return self._release(self._decode(self.token_ids), len(self.token_ids), reason)

    def _release(self, text: str, tokens: int, reason: str | None = None) -> Delta:
        delta = Delta(index=self.index, text=text[self.released_chars:],
                      token_ids=self.token_ids[self.released_tokens:tokens],
                      logprobs=self.choices[self.released_tokens:tokens], finish_reason=reason)
        self.released_chars = max(self.released_chars, len(text))
        self.released_tokens = max(self.released_tokens, tokens)
        return delta


class RequestDecoder:
    """One request's choices, from the logits of each step to the deltas it streams: logit adjustments, loop
    guard, grammar, the seeded draw and the release of text. It keeps no model state, so a scheduler may run its
    choices in a batch beside other requests' and hand it only their rows of each step's logits."""

    def __init__(self, backend: Backend, eos_ids: set[int], params: SamplingParams):
        self.params = params
        self.eos = eos_ids
        self.vocab_size = backend.vocab_size
        vocabulary = backend.vocabulary if params.output_format or params.dry_multiplier > 0 else None
        self.constraint = (Constraint(vocabulary, vocabulary.compile(params.output_format, "response_format"),
                                      params.n) if params.output_format else None)
        self.closers = vocabulary.closers if self.constraint is not None else ()
        self.adjuster = LogitAdjuster(params, backend.vocab_size)
        self.guard = (LoopGuard(params, vocabulary.breaker_ids(params.dry_sequence_breakers))
                      if params.dry_multiplier > 0 else None)
        # Draws run on the CPU from float32 logits, so a seed gives the same draws on any device and in any batch.
        self.generator = torch.Generator().manual_seed(params.seed)
        self.texts = [TextAssembler(backend.tokenizer, row, params.stop) for row in range(params.n)]
        self.running = list(range(params.n))  # the choices still generating, in order
        self.steps = 0
        # From this step on a JSON reply is closed; one that ends there has finish_reason "length" all the same.
        self.closing_from = (params.max_tokens - params.json_closing_reserve
                             if self.constraint is not None and params.output_format.kind == "json_schema"
                             and params.json_closing_reserve else params.max_tokens)

    def step(self, logits: torch.Tensor) -> tuple[list[Delta], dict[int, int]]:
        """`logits` [running choices, vocab] (float32, CPU): this step's deltas and, for each choice that goes
        on, the token to feed back. Greedy picks the highest logit, the lowest token id among equal ones."""
        params, running, step = self.params, self.running, self.steps
        if len(running) < params.n:  # the adjusters index choices by number: finished ones hold zeros
            full = logits.new_zeros((params.n, logits.shape[-1]))
            full[running] = logits
            logits = full
        raw = torch.log_softmax(logits, -1) if params.logprobs else None
        if self.adjuster.active:
            logits = self.adjuster.apply(logits)
        if self.guard is not None:
            logits = self.guard.apply(logits.clone(), running)
        if self.constraint is not None:
            logits = logits.clone()
            self.constraint.mask(logits, running)
            if step >= self.closing_from:
                self.constraint.close(logits, running, self.closers)
        chosen = choose_next(logits[running], params.temperature, params.top_p, self.generator).tolist()
        deltas, fed = [], {}
        for row, token_id in zip(list(running), chosen):
            delta = self._advance(row, token_id, raw, step)
            if delta.finish_reason:
                running.remove(row)
            else:
                fed[row] = token_id
            if delta.text or delta.token_ids or delta.finish_reason:
                deltas.append(delta)
        self.steps += 1
        return deltas, fed

    def _advance(self, row: int, token_id: int, raw: torch.Tensor | None, step: int) -> Delta:
        params, text = self.params, self.texts[row]
        self.adjuster.chose(row, token_id)
        if self.guard is not None:
            self.guard.chose(row, token_id)
        complete = self.constraint is not None and self.constraint.accept(row, token_id)
        ended = "stop" if step < self.closing_from else "length"
        if token_id in self.eos:
            return text.finish(ended)
        delta = text.add(token_id, _choice(token_id, raw, row, params))
        if complete and not delta.finish_reason:
            return _merged(delta, text.finish(ended))
        if not delta.finish_reason and step == params.max_tokens - 1:
            return _merged(delta, text.finish("length"))
        return delta


def _choice(token_id: int, logprobs: torch.Tensor | None, row: int, params: SamplingParams) -> TokenChoice | None:
    if logprobs is None:
        return None
    top = logprobs[row].topk(params.top_logprobs) if params.top_logprobs else None
    return TokenChoice(token_id=token_id, logprob=float(logprobs[row, token_id]),
                       top=[] if top is None else list(zip(top.indices.tolist(), top.values.tolist())))


def _merged(first: Delta, second: Delta) -> Delta:
    return Delta(index=first.index, text=first.text + second.text, token_ids=first.token_ids + second.token_ids,
                 logprobs=first.logprobs + second.logprobs, finish_reason=second.finish_reason)
