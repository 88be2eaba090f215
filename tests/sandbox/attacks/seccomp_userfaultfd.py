# Opens a userfaultfd, the usual way to stall the kernel mid-copy in an exploit.
# expect: forbidden
# expect-without-audit: forbidden
# detail-without-audit: seccomp
def solve():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(323, 0)
    return fd
