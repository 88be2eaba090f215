"""A unit of work declared once (proto's WorkUnit: queue, message, result) and done by a service's Actor (handler,
concurrency): the job publishes and reads results through the unit, the service spec lists the actor."""
from __future__ import annotations

import hashlib
import time

import pytest

from flawforge.assembly import platform_for
from flawforge.errors import FlawforgeError
from flawforge.jobs.context import JobContext
from flawforge.jobs.store import JobStore
from flawforge.proto.ops import Echo
from flawforge.proto.smoke import DIGEST, DigestRequested
from flawforge.runtime.service import Actor, Workers
from flawforge.services import load_service
from flawforge.settings import Settings


@pytest.fixture
def ctx(tmp_path):
    platform = platform_for(Settings(bus="memory", blob_backend="local", blob_dir=str(tmp_path)))
    yield JobContext(platform, JobStore(platform.store).create("smoke", {}).job_id)
    platform.close()


def test_a_job_and_the_metrics_service_meet_through_the_digest_unit_alone(ctx):
    payloads = [bytes([item]) * 100 for item in range(3)]
    workers = Workers(ctx.platform, list(load_service("metrics").queue_consumers())).start()
    try:
        for item, payload in enumerate(payloads):
            ref = ctx.platform.store.put_content("smoke/payloads", payload)
            ctx.publish(DIGEST, DigestRequested(job_id=ctx.job_id, item=item, payload=ref))
        results = dict(ctx.results_as_done(DIGEST, [f"{item}.json" for item in range(3)]))
    finally:
        workers.stop()
    assert {name: (result.item, result.sha256) for name, result in results.items()} == {
        f"{item}.json": (item, hashlib.sha256(payload).hexdigest()) for item, payload in enumerate(payloads)}


def test_a_job_cannot_publish_another_message_on_a_units_queue(ctx):
    with pytest.raises(TypeError, match="queue smoke.digest carries DigestRequested messages, not Echo"):
        ctx.publish(DIGEST, Echo(payload="hello"))
    assert DIGEST.queue not in ctx.bus.queues


def test_a_stored_result_that_is_not_the_units_fails_the_job_naming_the_item(ctx):
    ctx.platform.store.put(ctx.item_key("7.json"), b'{"item": 7, "sha256": "not hex"}')
    with pytest.raises(FlawforgeError, match=f"work item 7.json of job {ctx.job_id} stored a result that is not a "
                                             f"DigestResult"):
        list(ctx.results_as_done(DIGEST, ["7.json"]))


def recording_actor(handled: list) -> Actor:
    return Actor(DIGEST, lambda platform: handled.append, concurrency=3)


def mutator_library_actor(handled: list) -> Actor:
    """The mutator's, as its spec lists it: its own handler, given another kind, would fail on the missing fields
    (a reason other than poison)."""
    from flawforge.proto.debugging import LIBRARIES
    from flawforge.services.mutator.debugging import CONCURRENT_LIBRARIES

    actor = next(actor for actor in load_service("mutator").actors if actor.unit is LIBRARIES)
    assert actor.concurrency == CONCURRENT_LIBRARIES
    return actor


@pytest.mark.parametrize("actor_for, poison", [
    (recording_actor, "poison: queue smoke.digest carries DigestRequested messages, not Echo"),
    (mutator_library_actor, "poison: queue debugging.libraries carries LibraryWorkItem messages, not Echo")])
def test_an_actor_runs_its_concurrency_of_consumers_and_dead_letters_another_kind_unhandled(ctx, actor_for, poison):
    handled = []
    actor = actor_for(handled)
    consumers = actor.consumers()
    assert [consumer.queue for consumer in consumers] == [actor.unit.queue] * actor.concurrency
    bus = ctx.platform.bus
    workers = Workers(ctx.platform, list(consumers)).start()
    try:
        bus.publish(actor.unit.queue, Echo(payload="hello"))
        deadline = time.monotonic() + 10
        while not (dead := bus.dead_letters(actor.unit.queue)) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        workers.stop()
    assert handled == []
    assert [letter.headers["x-flawforge-error"] for letter in dead] == [poison]


def test_an_actor_runs_at_least_one_item_at_once():
    with pytest.raises(ValueError, match="the actor on queue smoke.digest runs at least one item at once, not 0"):
        Actor(DIGEST, lambda platform: print, concurrency=0)


def test_a_job_waiting_long_for_its_items_looks_less_often_and_still_sees_the_last_at_once(ctx, monkeypatch):
    """Items that stop landing for two seconds are looked for at a quarter of the time waited so far (at most twice a
    second), not every poll: a library of a debugging job takes a minute. Once one lands, the looks are quick again,
    and a math job, whose items land every few tenths of a second, is looked at every poll."""
    from flawforge.jobs import context

    clock, slept, lands = [0.0], [], {"a": 0.3, "b": 30.0, "c": 31.0}
    monkeypatch.setattr(context.time, "monotonic", lambda: clock[0])

    def sleep(seconds):
        slept.append(seconds)
        clock[0] += seconds
        for name, when in lands.items():
            if when <= clock[0] and not ctx.platform.store.exists(ctx.item_key(name)):
                ctx.platform.store.put(ctx.item_key(name), b"{}", "application/json")

    monkeypatch.setattr(context.time, "sleep", sleep)
    seen = {name: clock[0] for name, _ in ctx.items_as_done(["a", "b", "c"])}
    assert list(seen) == ["a", "b", "c"]
    assert len(slept) < 160 and max(slept) == 0.5  # 31 s at 0.05 s a look would be 620 looks
    assert set(slept[:40]) == {0.05}  # the first two seconds: every poll
    # a and c (a second after b): within a poll; b, after 29.7 s: at most the cap
    assert seen["a"] - 0.3 <= 0.05 and seen["b"] - 30.0 <= 0.5 and seen["c"] - 31.0 <= 0.05
