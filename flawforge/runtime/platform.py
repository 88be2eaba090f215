"""The handles a service or the embedded stack works with: settings, bus and blob store."""
from __future__ import annotations

from dataclasses import dataclass

from flawforge.blobstore import BlobStore, open_blob_store
from flawforge.bus import Bus, open_bus
from flawforge.settings import Settings


@dataclass
class Platform:
    settings: Settings
    bus: Bus
    store: BlobStore

    @classmethod
    def from_settings(cls, settings: Settings) -> "Platform":
        from flawforge.jobs.dead_letters import JobDeadLetters
        from flawforge.jobs.finished import SkipWorkOfFinishedJobs

        store = open_blob_store(settings)
        middleware = [JobDeadLetters(store), SkipWorkOfFinishedJobs(store)]
        return cls(settings=settings, bus=open_bus(settings, store, middleware), store=store)

    def close(self) -> None:
        self.bus.close()
