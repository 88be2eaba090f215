"""Operational messages: liveness probes and throughput measurement of the bus."""
from __future__ import annotations

from flawforge.proto.base import Message


class Echo(Message):
    kind = "ops.echo"
    payload: str
