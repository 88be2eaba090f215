"""Sandboxes shared by the sandbox tests: one with every layer, one without the audit layer."""
from __future__ import annotations

import pytest

from flawforge.sandbox import Sandbox, SandboxLimits

collect_ignore_glob = ["attacks/*"]  # programs for the sandbox, never for pytest

LIMITS = SandboxLimits(timeout_s=5, memory_mb=256, workdir_mb=16, file_size_mb=4, output_bytes=16 * 1024,
                       result_bytes=1 << 20)


@pytest.fixture(scope="session")
def sandbox():
    with Sandbox.from_settings(limits=LIMITS, workers=4) as sb:
        yield sb


@pytest.fixture(scope="session")
def sandbox_without_audit():
    """Only the operating-system layers: shows they contain on their own."""
    with Sandbox.from_settings(limits=LIMITS, workers=2, audit=False, required_layers=()) as sb:
        yield sb
