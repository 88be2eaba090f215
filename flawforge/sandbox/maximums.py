"""The server's maximums for what a caller may ask of the sandbox: limits, source size, batch size, and the
wall-clock time one request may ask for (its programs times their timeout).

A request names its own limits (SandboxLimits); the server refuses any above its maximum
(FLAWFORGE_SANDBOX_MAX_*) before running anything, naming the field and the maximum.
Pure logic: no processes, no HTTP.
"""
from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from flawforge.errors import InvalidInput
from flawforge.proto.sandbox import SandboxLimits
from flawforge.settings import Settings

# Request fields holding one program's source, and the one holding a list of them.
SOURCE_FIELDS = ("source", "original", "module_source", "test_source", "code")
SOURCES_FIELD = "variants"


class AboveMaximum(InvalidInput):
    """A request asks for more than the server allows; `errors` name each field (pydantic's error shape)."""

    def __init__(self, errors: list[dict]):
        super().__init__("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors))
        self.errors = errors


@dataclass(frozen=True)
class Maximums:
    timeout_s: float
    memory_mb: int
    workdir_mb: int
    source_bytes: int
    batch_variants: int
    result_bytes: int
    request_s: float
    default_timeout_s: float  # a request's timeout when it names no limits

    @classmethod
    def from_settings(cls, settings: Settings) -> "Maximums":
        return cls(timeout_s=settings.sandbox_max_timeout_s, memory_mb=settings.sandbox_max_memory_mb,
                   workdir_mb=settings.sandbox_max_workdir_mb, source_bytes=settings.sandbox_max_source_bytes,
                   batch_variants=settings.sandbox_max_batch_variants, result_bytes=settings.sandbox_max_result_bytes,
                   request_s=settings.sandbox_max_request_s, default_timeout_s=settings.sandbox_timeout_s)

    def limit_errors(self, limits: SandboxLimits | None, loc: tuple = ("limits",)) -> list[dict]:
        if limits is None:
            return []
        errors = []
        for field, unit in (("timeout_s", "s"), ("memory_mb", "MiB"), ("workdir_mb", "MiB"), ("result_bytes", "bytes")):
            asked, most = getattr(limits, field), getattr(self, field)
            if asked > most:
                errors.append(_error(loc + (field,), f"{field} {asked:g} is above the server's maximum of {most:g} "
                                                     f"{unit} (FLAWFORGE_SANDBOX_MAX_{field.upper()})"))
        return errors

    def source_error(self, source: str, loc: tuple) -> dict | None:
        # 4 bytes a character at most: only a source that may be too large is encoded to count its bytes
        if len(source) * 4 <= self.source_bytes or len(source.encode("utf-8", "surrogatepass")) <= self.source_bytes:
            return None
        return _error(loc, f"the source is above the server's maximum of {self.source_bytes} bytes "
                           "(FLAWFORGE_SANDBOX_MAX_SOURCE_BYTES)")

    def cost_error(self, request: BaseModel, field: str, programs: int) -> dict | None:
        """`programs` units' worth of the request's timeout above what one request may ask for."""
        limits = getattr(request, "limits", None)
        timeout = limits.timeout_s if limits is not None else self.default_timeout_s
        if programs * timeout <= self.request_s:
            return None
        return _error(("body", field), f"{programs} programs x {timeout:g} s = {programs * timeout:g} s are above the "
                                       f"server's maximum of {self.request_s:g} s a request "
                                       "(FLAWFORGE_SANDBOX_MAX_REQUEST_S)")

    def errors(self, request: BaseModel) -> list[dict]:
        """What in an API request (ExecRequest, BatchRequest, TestRunRequest, ...) is above a maximum, as
        pydantic-style errors located in the body."""
        errors = self.limit_errors(getattr(request, "limits", None), ("body", "limits"))
        for field in SOURCE_FIELDS:
            source = getattr(request, field, None)
            if isinstance(source, str):
                errors.append(self.source_error(source, ("body", field)))
        variants = getattr(request, SOURCES_FIELD, None)
        if variants is not None:
            if len(variants) > self.batch_variants:
                errors.append(_error(("body", SOURCES_FIELD), f"{len(variants)} variants are above the server's "
                                     f"maximum of {self.batch_variants} (FLAWFORGE_SANDBOX_MAX_BATCH_VARIANTS)"))
            else:
                errors += [self.source_error(source, ("body", SOURCES_FIELD, index))
                           for index, source in enumerate(variants)]
                errors.append(self.cost_error(request, SOURCES_FIELD, 1 + len(variants)))  # the original too
        return [error for error in errors if error is not None]

    def check(self, request: BaseModel) -> None:
        errors = self.errors(request)
        if errors:
            raise AboveMaximum(errors)


def _error(loc: tuple, msg: str) -> dict:
    return {"type": "value_error", "loc": loc, "msg": msg, "input": None}
