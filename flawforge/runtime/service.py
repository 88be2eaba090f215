"""A service is declared once: its name, HTTP routers, queues it consumes and readiness checks."""
from __future__ import annotations

import gc
import importlib
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from flawforge.bus.base import Handler, PoisonMessage
from flawforge.proto.base import Message, WorkUnit
from flawforge.runtime.platform import Platform

if TYPE_CHECKING:  # the mutator's generation processes import this module and never serve HTTP
    from fastapi import APIRouter

log = logging.getLogger(__name__)

# Workers allocate many short-lived objects that form no cycles (messages, models, syntax trees, values):
# at Python's default threshold of 700 the cycle collector keeps scanning them (measured on the math job:
# a sixth of generation time).
GC_THRESHOLD = 50_000


def collect_garbage_rarely() -> None:
    """Raises the cycle collector's first threshold for this process (never lowers it)."""
    first, *older = gc.get_threshold()
    gc.set_threshold(max(first, GC_THRESHOLD), *older)


@dataclass(frozen=True)
class Consumer:
    """A queue the service works on; `make_handler` builds the handler from the platform."""

    queue: str
    make_handler: Callable[[Platform], Handler]


@dataclass(frozen=True)
class Actor:
    """How a service does one unit of work (its queue, message and result declared in `proto/`): the factory of
    its handler, and how many items it runs at once, each on a Consumer of its own. The service spec lists the
    actor; a message of another kind on its queue is dead-lettered, never handled."""

    unit: WorkUnit
    make_handler: Callable[[Platform], Handler]
    concurrency: int = 1

    def __post_init__(self):
        if self.concurrency < 1:
            raise ValueError(f"the actor on queue {self.unit.queue} runs at least one item at once, not "
                             f"{self.concurrency}")

    def consumers(self) -> tuple[Consumer, ...]:
        return (Consumer(queue=self.unit.queue, make_handler=self._checked_handler),) * self.concurrency

    def _checked_handler(self, platform: Platform) -> Handler:
        handle = self.make_handler(platform)

        def handle_checked(message: Message) -> None:
            try:
                self.unit.checked(message)
            except TypeError as exc:
                raise PoisonMessage(str(exc)) from None
            handle(message)

        return handle_checked


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    port: int
    description: str
    # "module:function" paths of its router factories, imported only when its HTTP app is built: the embedded
    # stack runs the consumers alone and never pays for importing the web framework.
    routers: tuple[str, ...] = ()
    # Router factories of web pages that hold no data (HTML, scripts, styles): served without a token, since a
    # browser cannot send one when it navigates; the page's own requests to the API carry it.
    pages: tuple[str, ...] = ()
    # Queues it reads without an actor: requests of clients on the bus, and work not declared as a WorkUnit yet.
    consumers: tuple[Consumer, ...] = ()
    actors: tuple[Actor, ...] = ()
    # Each check raises with a message saying what is missing; /readyz reports them.
    readiness_checks: tuple[Callable[[Platform], None], ...] = ()
    extras: tuple[str, ...] = field(default=())  # optional dependency groups its image installs
    # (path prefix, "module:function") pairs: the function turns an ErrorAnswer into the error body of the
    # routes under that prefix (an OpenAI-compatible API answers OpenAI's error object); else the default body.
    error_formats: tuple[tuple[str, str], ...] = ()

    def queue_consumers(self) -> tuple[Consumer, ...]:
        """Its consumers, then each actor's."""
        return self.consumers + tuple(consumer for actor in self.actors for consumer in actor.consumers())

    def _imported(self, what: str, path: str) -> Callable:
        module, colon, name = path.partition(":")
        if not (module and colon and name):
            raise ValueError(f"service {self.name}: {what} {path!r} is not 'module:function'")
        return getattr(importlib.import_module(module), name)

    def router_factories(self, paths: tuple[str, ...] | None = None) -> list[Callable[[Platform], APIRouter]]:
        """The factories named by `paths` (default: the API routers), imported now."""
        return [self._imported("router", path) for path in (self.routers if paths is None else paths)]

    def error_format_functions(self) -> list[tuple[str, Callable]]:
        return [(prefix, self._imported("error format", path)) for prefix, path in self.error_formats]


class Workers:
    """Runs the consumers of one or more services on threads until stopped."""

    def __init__(self, platform: Platform, consumers: list[Consumer]):
        self.platform = platform
        self.consumers = consumers
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: dict[str, BaseException] = {}

    def start(self) -> "Workers":
        collect_garbage_rarely()
        for consumer in self.consumers:
            self.platform.bus.declare(consumer.queue)
        for consumer in self.consumers:
            handler = consumer.make_handler(self.platform)
            thread = threading.Thread(target=self._run, args=(consumer.queue, handler),
                                      name=f"consume-{consumer.queue}", daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def _run(self, queue: str, handler: Handler) -> None:
        try:
            self.platform.bus.consume(queue, handler, self.stop_event)
        except BaseException as exc:  # reported by /readyz instead of dying silently
            log.exception("consumer of %s stopped", queue)
            self.errors[queue] = exc

    def alive(self) -> bool:
        return not self.errors and all(t.is_alive() for t in self.threads)

    def stop(self, timeout: float = 10.0) -> None:
        self.stop_event.set()
        self.platform.bus.wake_consumers()
        for thread in self.threads:
            thread.join(timeout)
