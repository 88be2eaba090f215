"""Sandboxed execution of untrusted Python: traces of function calls, unit-test runs, batches.

    from flawforge.sandbox import Sandbox, SandboxLimits
    with Sandbox(SandboxLimits(timeout_s=2, memory_mb=256)) as sb:
        result = sb.trace_call(source, "solve")
        values = result.final_values()
"""
from flawforge.proto.sandbox import ExecutionResult, SandboxLimits, TestRunResult
from flawforge.sandbox.engine import Sandbox, SandboxUnavailable

__all__ = ["ExecutionResult", "Sandbox", "SandboxLimits", "SandboxUnavailable", "TestRunResult"]
