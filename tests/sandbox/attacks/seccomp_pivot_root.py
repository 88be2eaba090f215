# Unmounts its view of the root and pivots to another one, to get past the read-only root.
# expect: forbidden
# expect-without-audit: forbidden
# detail-without-audit: seccomp
def solve():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    unmounted = libc.umount2(b"/", 2)
    pivoted = libc.syscall(155, b".", b".")
    return unmounted, pivoted
