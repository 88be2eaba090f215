"""Sandboxed execution of untrusted Python: traces of function calls, unit-test runs, batches.

    from flawforge.sandbox import Sandbox, SandboxLimits
    with Sandbox.from_settings(settings, limits=SandboxLimits(timeout_s=2, memory_mb=256)) as sb:
        result = sb.trace_call(source, "solve")
        values = result.final_values()

`Sandbox.from_settings` is the only way to make one: its layers, workers and default limits
come from the settings (FLAWFORGE_SANDBOX_*).
"""
from flawforge.proto.sandbox import ExecutionResult, SandboxLimits, TestRunResult
from flawforge.sandbox.engine import Sandbox, SandboxUnavailable

__all__ = ["ExecutionResult", "Sandbox", "SandboxLimits", "SandboxUnavailable", "TestRunResult"]
