"""The mutator's debugging worker: one library's sdist in, its validated bugs and rejects out (at the job's item key)."""
from __future__ import annotations

import logging
import math
from contextlib import contextmanager

from flawforge.errors import FlawforgeError, Unavailable
from flawforge.jobs.context import item_key
from flawforge.proto.debugging import LIBRARIES, BugReject, LibraryResult, LibraryWorkItem
from flawforge.runtime.platform import Platform
from flawforge.runtime.service import Actor
from flawforge.sandbox.suites import SUITE_WORKERS, suite_sandbox

log = logging.getLogger(__name__)

# Libraries worked on at once, each running its share of the suite sandbox's units at once.
CONCURRENT_LIBRARIES = 2
SUITES_PER_LIBRARY = SUITE_WORKERS // CONCURRENT_LIBRARIES


def library_reject(archive_name: str, exc: Exception) -> LibraryResult:
    """What a library that failed is worth to the job: one reject saying why (a domain error's message; for anything
    else, MemoryError included, its type too), so the job keeps every other library's results."""
    name, _, version = archive_name.removesuffix(".tar.gz").rpartition("-")
    source = name or archive_name
    reason, detail = ("unusable_library", str(exc)) if isinstance(exc, FlawforgeError) \
        else ("library_failed", f"{type(exc).__name__}: {exc}")
    return LibraryResult(source=source, version=version,
                         rejects=[BugReject(source=source, version=version, reason=reason, detail=detail)])


@contextmanager
def rewriter(platform: Platform, message: LibraryWorkItem):
    """The lm_rewrite modifier's candidates for generate_for_library, through the gateway, where the item names a
    model and the modifier; None otherwise. A model's fair share of the round robin, twice over, is asked for."""
    from flawforge.debugging.modifiers.lm_rewrite import LmRewrite

    if not message.model or LmRewrite.name not in message.modifiers:
        yield None
        return
    from flawforge.llm.gateway import Gateway

    gateway = Gateway.from_settings(platform.store, platform.settings)
    count = max(2, math.ceil(2 * message.per_library / len(message.modifiers)))
    project = message.archive_name.removesuffix(".tar.gz")
    try:
        yield lambda modules, executed: LmRewrite(message.model).candidates(gateway, modules, executed, count,
                                                                           message.seed, project)
    finally:
        gateway.close()


def make_library_handler(platform: Platform):
    settings_json = platform.settings.model_dump_json()

    def handle(message: LibraryWorkItem) -> None:
        from flawforge.debugging.environments import EnvironmentBuilder
        from flawforge.debugging.generate import generate_for_library
        from flawforge.debugging.layout import name_and_version, read_archive

        archive = platform.store.get_verified(message.archive)
        try:
            builder = EnvironmentBuilder.from_settings(platform.settings)
            built = builder.for_library(read_archive(archive), name_and_version(message.archive_name)[0])
            with rewriter(platform, message) as rewrites:
                result = generate_for_library(suite_sandbox(settings_json), archive, message.archive_name,
                                              message.per_library, message.modifiers, message.seed,
                                              SUITES_PER_LIBRARY, environment=built.environment,
                                              environment_path=built.path, excluded=built.excluded,
                                              rewrites=rewrites, tests_per_candidate=message.tests_per_candidate,
                                              cache=builder.folder)
        except Unavailable:
            raise  # the platform's trouble (no package index, no sandbox): the bus tries the item again
        except Exception as exc:  # whatever one library does to its handling is its reject, never a lost item
            if not isinstance(exc, FlawforgeError):
                log.exception("library %s failed", message.archive_name)
            result = library_reject(message.archive_name, exc)
        platform.store.put(item_key(message.job_id, message.item_name), result.model_dump_json().encode(),
                           "application/json")

    return handle


LIBRARY_ACTOR = Actor(LIBRARIES, make_library_handler, concurrency=CONCURRENT_LIBRARIES)
