"""Base classes shared by every message."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import ClassVar, Generic, Iterable, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

registry: dict[str, type["Message"]] = {}


class Model(BaseModel):
    """API and message model: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


def jsonl(models: Iterable[BaseModel]) -> bytes:
    """The models as JSON lines, one a line: the format of every catalog and dataset file."""
    return "".join(model.model_dump_json() + "\n" for model in models).encode()


class Message(Model):
    """A bus message. Subclasses set `kind`; the registry maps kind -> class."""

    kind: ClassVar[str] = ""
    schema_version: Literal[1] = SCHEMA_VERSION
    message_id: str = Field(default_factory=lambda: uuid.uuid4().hex)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.kind:
            if cls.kind in registry and registry[cls.kind] is not cls:
                raise TypeError(f"message kind {cls.kind!r} defined twice")
            registry[cls.kind] = cls


class BlobRef(Model):
    """Where a blob lives and how to verify it. With `offset`, a slice of the blob at `key`: `size` bytes from
    `offset` (small blobs written together, as one)."""

    key: str
    sha256: str
    size: int = Field(ge=0)
    # Left out when None: a ref to a whole blob reads as it always did, for services that predate slices.
    offset: int | None = Field(None, ge=0, exclude_if=lambda offset: offset is None)


M = TypeVar("M", bound=Message)
R = TypeVar("R", bound=BaseModel)


@dataclass(frozen=True)
class WorkUnit(Generic[M, R]):
    """A kind of work item, declared once, as dramatiq's @actor binds a queue to its function: the queue its items
    travel on, their message, and the result a worker stores at the item's key (`jobs/<job>/items/<item>`). A job
    publishes and reads results through it (`JobContext.publish`, `JobContext.results_as_done`); the service that
    does the work consumes through it (`flawforge.runtime.service.Actor`, which adds the handler and how many
    items run at once)."""

    queue: str
    message: type[M]
    result: type[R]

    def checked(self, message: object) -> M:
        """The message, if it is this unit's; else a TypeError naming both."""
        if not isinstance(message, self.message):
            raise TypeError(f"queue {self.queue} carries {self.message.__name__} messages, not "
                            f"{type(message).__name__}")
        return message
