"""Compiling a request's JSON schema (or tools) into a grammar without letting one request hold the server.

A schema is checked before compiling: its compact JSON size and its enum values, all its enums together
(xgrammar took 108 s on an enum of 50,000 strings). A schema within the bounds still compiles in a child
process killed at a deadline: xgrammar's compiler is native code that a thread cannot stop. The child is
forked, not started fresh, because the compiler and the tokenizer's tokens are already in memory, where a
fresh interpreter would spend seconds importing xgrammar; it only compiles and writes the result to a pipe.
Compiled grammars are kept in an LRU keyed by the schema's compact JSON, so a repeated schema compiles once.
"""
from __future__ import annotations

import json
import logging
import multiprocessing
import threading
from collections import OrderedDict
from dataclasses import dataclass

from flawforge.inference.backend import OutputFormat
from flawforge.inference.errors import RequestError

log = logging.getLogger(__name__)

# Compiled grammars kept, by their own reported size: a 2,000-value enum compiles to about 0.5 MB.
CACHE_BYTES = 256 << 20


@dataclass(frozen=True)
class GrammarLimits:
    """What a request's schema may cost to compile (settings FLAWFORGE_INFERENCE_GRAMMAR_*)."""

    max_schema_chars: int
    max_enum_values: int
    compile_timeout_s: float

    @classmethod
    def from_settings(cls, settings) -> "GrammarLimits":
        return cls(settings.inference_grammar_max_schema_chars, settings.inference_grammar_max_enum_values,
                   settings.inference_grammar_compile_timeout_s)


# Parts of a schema with more children than this are named whole as what makes it large, not searched further.
MANY_CHILDREN = 256
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def compact(value) -> str:
    """A schema's canonical JSON: no spaces, one escaping. Key order is kept: a schema's property order is the
    order the reply writes them in, so two orders are two grammars."""
    return _COMPACT.encode(value)


def pointer(path: tuple) -> str:
    """A part's JSON pointer (RFC 6901)."""
    if not path:
        return "(the whole schema)"
    return "/" + "/".join(str(part).replace("~", "~0").replace("/", "~1") for part in path)


def _largest_part(value, size: int, path: tuple = ()) -> tuple:
    """The path of the part that makes a schema large: down through whichever child holds most of it."""
    if not isinstance(value, (dict, list)) or not value or len(value) > MANY_CHILDREN:
        return path
    children = value.items() if isinstance(value, dict) else enumerate(value)
    sized = [(len(compact(child)), key, child) for key, child in children]
    child_size, key, child = max(sized, key=lambda entry: entry[0])
    return _largest_part(child, child_size, path + (key,)) if child_size * 2 > size else path


def _enums(value, path: tuple = ()):
    """(path, number of values) of every enum in a schema, in document order."""
    if isinstance(value, dict):
        for key, child in value.items():
            if key == "enum" and isinstance(child, list):
                yield path + (key,), len(child)
            else:
                yield from _enums(child, path + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _enums(child, path + (index,))


def check_schema(spec, text: str, limits: GrammarLimits, param: str) -> None:
    """A 400 naming the part of a schema that makes it too large to compile; `text` is its compact JSON."""
    if len(text) > limits.max_schema_chars:
        where = pointer(_largest_part(spec, len(text)))
        raise RequestError(400, f"The schema of {param} is {len(text)} characters of JSON, more than the "
                                f"{limits.max_schema_chars} this server compiles (FLAWFORGE_INFERENCE_GRAMMAR_MAX_"
                                f"SCHEMA_CHARS); most of it is {where}.", param=param, code="schema_too_large")
    total = 0
    for path, count in _enums(spec):
        total += count
        if total > limits.max_enum_values:
            raise RequestError(400, f"The schema of {param} has too many enum values: {pointer(path)} has {count}, "
                                    f"{total} in all so far, more than the {limits.max_enum_values} this server "
                                    f"compiles (FLAWFORGE_INFERENCE_GRAMMAR_MAX_ENUM_VALUES).", param=param,
                               code="schema_too_large")


def _compile(compiler, kind: str, spec: str):
    if kind == "json_schema":
        # No free whitespace: a small model would otherwise pad a reply with newlines until max_tokens.
        return compiler.compile_json_schema(spec, any_whitespace=False)
    return compiler.compile_structural_tag(spec)


def _compile_and_send(compiler, kind: str, spec: str, sender) -> None:
    """The child's whole work: compile, send the grammar as JSON (or the compiler's complaint)."""
    try:
        sender.send((True, _compile(compiler, kind, spec).serialize_json()))
    except Exception as exc:  # the compiler's complaint about the schema, sent to the parent to word
        sender.send((False, str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__))


class GrammarCompiler:
    """xgrammar's compiler behind the bounds, the deadline and the cache; `limits` None (code that builds its own
    backend with its own schemas): no bounds, compiled in the process."""

    def __init__(self, tokenizer_info, limits: GrammarLimits | None):
        import xgrammar

        self.info = tokenizer_info
        # Its own cache is off: unbounded, and keyed by the exact text; the LRU here is both bounded and shared.
        self.compiler = xgrammar.GrammarCompiler(tokenizer_info, max_threads=1, cache_enabled=False)
        self.limits = limits
        self.compilations = 0  # cache misses compiled, for the log and the tests
        self._cache: OrderedDict[tuple[str, str], object] = OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()

    def compile(self, fmt: OutputFormat, param: str):
        """The compiled grammar of `fmt`; a RequestError naming `param` where it is invalid or too costly."""
        import xgrammar

        try:
            spec = json.loads(fmt.spec)
        except json.JSONDecodeError:
            raise RequestError(400, f"Invalid schema for {param}: not JSON", param=param,
                               code="invalid_schema") from None
        text = compact(spec)
        key = (fmt.kind, text)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        if self.limits is not None:
            check_schema(spec, text, self.limits, param)
        try:
            compiled = (_compile(self.compiler, fmt.kind, text) if self.limits is None
                        else xgrammar.CompiledGrammar.deserialize_json(self._compile_in_child(fmt.kind, text, param),
                                                                       self.info))
        except (RuntimeError, ValueError, xgrammar.InvalidJSONError, xgrammar.InvalidStructuralTagError) as exc:
            raise RequestError(400, f"Invalid schema for {param}: {str(exc).splitlines()[0][:300]}", param=param,
                               code="invalid_schema") from None
        with self._lock:
            self.compilations += 1
            if key not in self._cache:
                self._cache[key] = compiled
                self._cached_bytes += compiled.memory_size_bytes
            while self._cached_bytes > CACHE_BYTES and len(self._cache) > 1:
                _, evicted = self._cache.popitem(last=False)
                self._cached_bytes -= evicted.memory_size_bytes
        return compiled

    def _compile_in_child(self, kind: str, spec: str, param: str) -> str:
        """The grammar's JSON, compiled by a forked child that is killed at the deadline."""
        context = multiprocessing.get_context("fork")
        receiver, sender = context.Pipe(duplex=False)
        child = context.Process(target=_compile_and_send, args=(self.compiler, kind, spec, sender),
                                name="compile-grammar", daemon=True)
        child.start()
        sender.close()
        timeout = self.limits.compile_timeout_s
        try:
            if not receiver.poll(timeout):
                log.warning("a grammar for %s took over %g s to compile; its compilation was stopped", param, timeout)
                raise RequestError(400, f"The schema of {param} takes over {timeout:g} s to compile "
                                        f"(FLAWFORGE_INFERENCE_GRAMMAR_COMPILE_TIMEOUT_S); make it smaller or "
                                        f"simpler.", param=param, code="schema_too_complex")
            succeeded, answer = receiver.recv()
        except EOFError:  # the child died without a word: out of memory, or killed
            raise RequestError(400, f"The schema of {param} could not be compiled: the compiler died "
                                    f"(exit code {child.exitcode}).", param=param, code="schema_too_complex") from None
        finally:
            receiver.close()
            child.kill()
            child.join()
        if not succeeded:
            raise ValueError(answer)
        return answer
