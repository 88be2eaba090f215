"""The mutator's debugging worker: one library's sdist in, its validated bugs and rejects out (at the job's item key)."""
from __future__ import annotations

from flawforge.jobs.context import item_key
from flawforge.pipelines.debug_conversations import CONCURRENT_LIBRARIES, SUITES_PER_LIBRARY, suite_sandbox
from flawforge.proto.debugging import LIBRARY_QUEUE, BugReject, LibraryResult, LibraryWorkItem
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Consumer


def make_library_handler(platform: Platform):
    settings_json = platform.settings.model_dump_json()

    def handle(message: LibraryWorkItem) -> None:
        from flawforge.debugging.generate import generate_for_library
        from flawforge.errors import FlawforgeError

        archive = platform.store.get_verified(message.archive)
        try:
            result = generate_for_library(suite_sandbox(settings_json), archive, message.archive_name,
                                          message.per_library, message.modifiers, message.seed, SUITES_PER_LIBRARY)
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
