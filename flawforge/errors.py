"""Errors a user can cause or see; the CLI prints them as one line, without a traceback.

Each class carries the HTTP status and the stable code a service answers it with (one set of
exception handlers, ErrorAnswers in flawforge/runtime/http_errors.py, turns them into answers):
code that raises one never deals in HTTP.
"""


class FlawforgeError(Exception):
    """Base class of errors whose message is meant for the user."""

    http_status = 500
    code = "error"


class NotFound(FlawforgeError):
    http_status = 404
    code = "not_found"


class Conflict(FlawforgeError):
    http_status = 409
    code = "conflict"


class InvalidInput(FlawforgeError):
    """A request that names something wrong (the message says what)."""

    http_status = 422
    code = "invalid_input"


class Unavailable(FlawforgeError):
    """Something the service needs does not work now; trying again later may succeed."""

    http_status = 503
    code = "unavailable"


class ConfigError(FlawforgeError):
    code = "config_error"


class BusUnavailable(Unavailable):
    """The broker cannot be reached or refused a message; nothing was published."""

    code = "bus_unavailable"


class BlobNotFound(NotFound, KeyError):
    code = "blob_not_found"

    def __str__(self) -> str:  # KeyError would quote the message
        return f"no blob at key {self.args[0]!r}"


class BlobStoreUnavailable(Unavailable):
    """The blob store cannot be read or written (unreachable, read-only, full); the message says which."""

    code = "storage_unavailable"


class ChecksumMismatch(FlawforgeError):
    code = "checksum_mismatch"


class Unauthorized(FlawforgeError):
    """A request without a valid bearer token."""

    http_status = 401
    code = "unauthorized"


class Forbidden(FlawforgeError):
    """A valid token whose role may not use the route."""

    http_status = 403
    code = "forbidden"


class Interrupted(FlawforgeError):
    """The user pressed Ctrl-C; the message says what became of the work (exit status 130)."""


class NothingDone(FlawforgeError):
    """The command ran but produced nothing (no template matched, every model call failed): exit status 1."""
