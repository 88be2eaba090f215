"""The handles a service or the embedded stack works with: settings, bus and blob store."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from flawforge.blobstore import BlobStore, open_blob_store
from flawforge.bus import Bus, Middleware, open_bus
from flawforge.settings import Settings


@dataclass
class Platform:
    settings: Settings
    bus: Bus
    store: BlobStore
    # The service whose consumers read a queue, or None: a job waiting in vain on a queue names the service to
    # start. The assembler, which knows the services, hands it over; the runtime and the jobs know none.
    queue_owner: Callable[[str], Optional[str]] = lambda queue: None

    @classmethod
    def from_settings(cls, settings: Settings, bus_middleware: Callable[[BlobStore], Sequence[Middleware]],
                      queue_owner: Callable[[str], Optional[str]] = lambda queue: None) -> "Platform":
        """The store and bus the settings name; the bus gets the standard middleware and `bus_middleware(store)`
        (flawforge.assembly.platform_for gives it the jobs' own, and the services' queue owners)."""
        store = open_blob_store(settings)
        return cls(settings=settings, bus=open_bus(settings, store, bus_middleware(store)), store=store,
                   queue_owner=queue_owner)

    def close(self) -> None:
        self.bus.close()
