"""Sandboxed execution of untrusted Python: traces of function calls, unit-test runs, batches.

    from flawforge.sandbox import Sandbox, SandboxLimits
    with Sandbox.from_settings(settings, limits=SandboxLimits(timeout_s=2, memory_mb=256)) as sb:
        result = sb.trace_call(source, "solve")
        values = result.final_values()

`Sandbox.from_settings` is the only way to make one: its layers, workers and default limits
come from the settings (FLAWFORGE_SANDBOX_*).
"""
import importlib

# Imported on first use: the typed values of flawforge.proto follow the runtime's wire rules, and
# importing flawforge.sandbox.runtime.wire from there must not import the engine (which imports proto).
_EXPORTS = {"ExecutionResult": "flawforge.proto.sandbox", "SandboxLimits": "flawforge.proto.sandbox",
            "TestRunResult": "flawforge.proto.sandbox", "Sandbox": "flawforge.sandbox.engine",
            "SandboxUnavailable": "flawforge.sandbox.engine"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
