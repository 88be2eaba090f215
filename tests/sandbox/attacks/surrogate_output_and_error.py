# Prints lone surrogates to stdout and stderr, writes undecodable bytes to stdout's descriptor,
# then raises an exception whose message holds surrogates.
# expect: error
# expect-without-audit: error
import os
import sys


def solve():
    print("out \ud800")
    print("err \udfff", file=sys.stderr)
    sys.stdout.flush()
    os.write(1, b"\xff\xfe raw\n")
    raise ValueError("message \udc80 with a surrogate")
