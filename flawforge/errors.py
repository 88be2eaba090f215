"""Errors a user can cause or see; the CLI prints them as one line, without a traceback."""


class FlawforgeError(Exception):
    """Base class of errors whose message is meant for the user."""


class ConfigError(FlawforgeError):
    pass


class BusUnavailable(FlawforgeError):
    """The broker cannot be reached or refused a message; nothing was published."""


class BlobNotFound(FlawforgeError, KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return f"no blob at key {self.args[0]!r}"


class BlobStoreUnavailable(FlawforgeError):
    pass


class ChecksumMismatch(FlawforgeError):
    pass


class Interrupted(FlawforgeError):
    """The user pressed Ctrl-C; the message says what became of the work (exit status 130)."""
