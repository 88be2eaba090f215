# Joins the network namespace of process 1 (the host's, where /proc shows it) with setns.
# expect: forbidden
# expect-without-audit: forbidden
# detail-without-audit: seccomp
import os


def solve():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    try:
        fd = os.open("/proc/1/ns/net", os.O_RDONLY)
    except OSError:
        fd = 0
    joined = libc.setns(fd, 0x40000000)
    return joined
