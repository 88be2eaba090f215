"""Every message and API model exchanged between Flawforge services, defined once.

Messages travel over the bus as JSON; they carry blob-store keys and checksums,
never large payloads. Each model has a `schema_version` so consumers can refuse
messages from a newer producer instead of misreading them.
"""
from flawforge.proto.base import BlobRef, Message, SCHEMA_VERSION, registry

__all__ = ["BlobRef", "Message", "SCHEMA_VERSION", "registry"]
