"""The mutator's debugging worker: one library's sdist in, its validated bugs and rejects out (at the job's item key).

The sandbox that runs the suites is made here and nowhere else in the pipeline."""
from __future__ import annotations

import os
from functools import lru_cache

from flawforge.jobs.context import item_key
from flawforge.proto.debugging import LIBRARY_QUEUE, SUITE_HASH_SEED, BugReject, LibraryResult, LibraryWorkItem
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Consumer

# Libraries worked on at once, and suites each runs at once: together about one unit per core and one
# waiting, so a core never idles between a unit's end and the next one's start.
CONCURRENT_LIBRARIES = 2
SUITES_PER_LIBRARY = max(1, len(os.sched_getaffinity(0)))


@lru_cache(maxsize=2)
def suite_sandbox(settings_json: str | None = None):
    """The sandbox that runs suites (by the service's settings): it may also read pytest's folder, and hashes
    strings with a fixed seed, so that tests parametrized over a set get the same ids in every run. In the
    process: the trace-executor's HTTP API does not take suites yet."""
    from flawforge.sandbox import Sandbox
    from flawforge.sandbox.engine import csv_setting, pytest_path
    from flawforge.settings import Settings

    settings = Settings.model_validate_json(settings_json) if settings_json else Settings()
    return Sandbox.from_settings(settings, in_process=True, read_paths=[*csv_setting(settings.sandbox_read_paths), pytest_path()],
                                 workers=CONCURRENT_LIBRARIES * SUITES_PER_LIBRARY, hash_seed=SUITE_HASH_SEED)


def make_library_handler(platform: Platform):
    settings_json = platform.settings.model_dump_json()

    def handle(message: LibraryWorkItem) -> None:
        from flawforge.debugging.generate import generate_for_library
        from flawforge.errors import FlawforgeError

        archive = platform.store.get_verified(message.archive)
        try:
            result = generate_for_library(suite_sandbox(settings_json), archive, message.archive_name, message.per_library,
                                          message.modifiers, message.seed, SUITES_PER_LIBRARY)
        except FlawforgeError as exc:  # a library the pipeline cannot use is a reject, never a lost item
            name, _, version = message.archive_name.removesuffix(".tar.gz").rpartition("-")
            result = LibraryResult(source=name or message.archive_name, version=version, rejects=[
                BugReject(source=name or message.archive_name, version=version, reason="unusable_library",
                          detail=str(exc))])
        platform.store.put(item_key(message.job_id, message.item_name), result.model_dump_json().encode(),
                           "application/json")

    return handle


LIBRARY_CONSUMERS = tuple(Consumer(queue=LIBRARY_QUEUE, make_handler=make_library_handler)
                          for _ in range(CONCURRENT_LIBRARIES))
