# Encodes a value in its work dir's modification time and reports what the times were when it
# started: a unit before it in the same slot did the same, but its times are reset.
# repeat: 2
# expect: ok
# expect-without-audit: ok
# returns: 0
import os


def solve():
    found = os.stat(".").st_mtime_ns
    os.utime(".", ns=(123456789, 123456789))
    return found
