"""The formats that cross the sandbox boundary: control frames and the unit's report lines.

Control frames (service <-> zygote) are a 4-byte big-endian length and JSON.
A unit reports on its result pipe as JSON lines, one list per line, first item the tag:

  ["s", line, name, value]        a variable was assigned (value: see `encode`)
  ["r", value]                    the called function returned
  ["e", type, message, line, tb, errno, file]  the program raised (errno: of an OSError, else null)
  ["x", type, message, line, file]            the program does not compile
  ["f", event, reason]            the program attempted a forbidden operation
  ["ts", test]                    a test started
  ["tr", test, outcome, message]  a test finished
  ["d"]                           the runner finished: the report above is complete

A batch unit's report is one section per program, in order (see unit.run_programs):

  ["b", index]                    the program starts (the zygote restarts the wall clock)
  ...                             its own lines, as above
  ["o", stdout, stdout_bytes, stderr, stderr_bytes, cpu_s, wall_s, max_rss_kb]
  ["d"]                           the program finished
  ["a", why]                      instead of all but ["b"]: the program may not share the unit
  ["p", why]                      after ["d"]: the batch ends here (the program changed shared state)
"""
import json
import reprlib
import struct
from fractions import Fraction
from math import isfinite

HEADER = struct.Struct(">I")
# What a unit is asked to run (a request's "unit"): one program, a batch of programs, a module and its tests,
# a project's pytest suite.
EXEC, BATCH, TESTS, SUITE = "exec", "batch", "tests", "suite"
RUNNER_FAILED = 121  # exit status of a unit whose runner failed (e.g. out of memory while reporting)
# Starts each program's section. JSON escapes every quote inside a string, so these bytes
# occur nowhere else in a report.
PROGRAM_MARKER = b'["b",'
# Ints wider than this travel as hex text: decimal conversion of huge ints is slow and
# limited by sys.int_max_str_digits (4,300 digits, about 14,280 bits), hex is neither. The one
# rule for exact values: flawforge.proto.values.TypedValue follows it too.
MAX_DECIMAL_INT_BITS = 14_000
REPR_CHARS = 200


def pack(obj) -> bytes:
    data = json.dumps(obj, separators=(",", ":")).encode()
    return HEADER.pack(len(data)) + data


def encode_int(value: int):
    return value if value.bit_length() <= MAX_DECIMAL_INT_BITS else hex(value)


def decode_int(value) -> int:
    return int(value, 16) if isinstance(value, str) else int(value)


def encode(value) -> list:
    """A value as exact, typed JSON. Same type rules as flawforge.proto.values.TypedValue.of."""
    if value is None:
        return ["none"]
    if isinstance(value, bool):
        return ["bool", bool(value)]
    if isinstance(value, int):
        return ["int", encode_int(int(value))]
    if isinstance(value, float):
        number = float(value)
        return ["float", number if isfinite(number) else repr(number)]
    if isinstance(value, Fraction):
        return ["fraction", encode_int(value.numerator), encode_int(value.denominator)]
    if isinstance(value, str):
        return ["str", str(value)]
    try:
        text = SUMMARY.repr(value)[:REPR_CHARS]
    except MemoryError:
        raise  # the program ran out of memory: its outcome, not a value's text
    except Exception:
        text = "<unrepresentable>"
    return ["other", type(value).__name__, text]


class Summary(reprlib.Repr):
    """A value's text within REPR_CHARS, built without the whole repr: a traced 1.5 GB bytearray must not
    become a 6 GB string first. Containers show their first items, a level or two deep; a type reprlib
    does not know gets its own repr (a program's class's __repr__ is the program's own code and cost)."""

    def __init__(self):
        super().__init__()
        self.maxlevel = 3
        self.maxtuple = self.maxlist = self.maxarray = self.maxdict = self.maxset = self.maxfrozenset = 8
        self.maxdeque = 8
        self.maxstring = self.maxlong = self.maxother = REPR_CHARS

    def repr_int(self, x, level):
        if x.bit_length() > 4 * REPR_CHARS:  # its decimal text is long, and costly past int_max_str_digits
            return f"<int of {x.bit_length()} bits>"
        return super().repr_int(x, level)

    def repr_bytes(self, x, level):
        head = repr(bytes(x[:REPR_CHARS]))
        return head if len(x) <= REPR_CHARS else f"{head[:-1]}...{head[-1]}"

    def repr_bytearray(self, x, level):
        return f"bytearray({self.repr_bytes(x, level)})"

    def repr_memoryview(self, x, level):
        return f"<memoryview of {x.nbytes} bytes>"

    def repr_str(self, x, level):
        return super().repr_str(x[:REPR_CHARS + 1], level)


SUMMARY = Summary()


def decode(item: list):
    """Inverse of `encode` for exact types: (python value, None); for others: (repr text, type name)."""
    tag = item[0]
    if tag == "none":
        return None, None
    if tag == "bool":
        return bool(item[1]), None
    if tag == "int":
        return decode_int(item[1]), None
    if tag == "float":
        return float(item[1]), None
    if tag == "fraction":
        return Fraction(decode_int(item[1]), decode_int(item[2])), None
    if tag == "str":
        return str(item[1]), None
    if tag == "other":
        return str(item[2]), str(item[1])
    raise ValueError(f"unknown value tag {tag!r}")


def sections_of(request: dict) -> int:
    """How many sections a unit's report has, each with its own wall clock: 0 for a unit of one."""
    if request["unit"] == BATCH:
        return len(request["sources"])
    return 0
