"""The one sandbox factory: every sandbox is built from the settings, and no code builds one another way."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from flawforge.sandbox import Sandbox, SandboxUnavailable
from flawforge.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DIRECT = re.compile(r"(?<![\w.])Sandbox\(")


def test_no_code_constructs_a_sandbox_but_the_factory():
    sources = [path for folder in ("flawforge", "services", "bench", "tests", "proto")
               for path in (ROOT / folder).rglob("*.py")]
    direct = [f"{path.relative_to(ROOT)}:{number}" for path in sources if path.name != "engine.py"
              for number, line in enumerate(path.read_text().splitlines(), 1) if DIRECT.search(line)]
    assert direct == []


def test_workers_limits_and_layers_come_from_the_settings(monkeypatch):
    monkeypatch.setenv("FLAWFORGE_SANDBOX_WORKERS", "3")
    monkeypatch.setenv("FLAWFORGE_SANDBOX_TIMEOUT_S", "2.5")
    with Sandbox.from_settings() as sandbox:
        assert sandbox.workers == 3 and len(sandbox.unit_uids) == 3
        assert sandbox.limits.timeout_s == 2.5 and sandbox.limits.memory_mb == Settings().sandbox_memory_mb
        assert sandbox.required_layers == tuple(Settings().sandbox_required_layers.split(","))
        assert sandbox.execute("import time\ntime.sleep(10)\n").detail == "wall-clock limit of 2.5 s reached"
    with pytest.raises(SandboxUnavailable, match="required isolation layer.*audit"):
        Sandbox.from_settings(Settings(sandbox_audit=False, sandbox_workers=1))
    with pytest.raises(TypeError, match="unknown sandbox argument"):
        Sandbox.from_settings(worker=2)
