# Wraps the unit's result pipe, a descriptor it inherited, in a file object to write a report of its own; a
# descriptor the program made itself (mkstemp's) may be wrapped, as pytest's plugins and hypothesis do.
# expect: forbidden
# detail: opens an inherited file descriptor
# expect-without-audit: crashed
import os
import tempfile


def solve():
    handle, name = tempfile.mkstemp()
    with os.fdopen(handle, "w") as own:
        own.write("mine")
    with open(name) as own:
        assert own.read() == "mine"
    with open(3, "w", closefd=False) as pipe:
        pipe.write('["r", 1]\n')
    return 0
