# Calls clone directly with CLONE_NEWUSER | CLONE_NEWNET (the C library's fork would not).
# expect: forbidden
# expect-without-audit: forbidden
# detail-without-audit: seccomp
def solve():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    child = libc.syscall(56, 0x10000000 | 0x40000000 | 17, 0, 0, 0, 0)  # clone(flags | SIGCHLD) on x86_64
    if child == 0:
        libc._exit(0)
    return child
