"""Every message and API model exchanged between Flawforge services, defined once.

Messages travel over the bus as JSON; they carry blob-store keys and checksums,
never large payloads. Each model has a `schema_version` so consumers can refuse
messages from a newer producer instead of misreading them.
"""
import importlib
import pkgutil

from flawforge.proto.base import BlobRef, Message, SCHEMA_VERSION, registry

__all__ = ["BlobRef", "Message", "SCHEMA_VERSION", "import_all", "registry"]


def import_all() -> None:
    """Imports every proto module, so every message kind is in the registry."""
    for info in pkgutil.iter_modules(__path__):
        if info.name != "export":
            importlib.import_module(f"{__name__}.{info.name}")
