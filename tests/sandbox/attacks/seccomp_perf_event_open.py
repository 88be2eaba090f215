# Opens a perf event counter on the host's CPUs.
# expect: forbidden
# expect-without-audit: forbidden
# detail-without-audit: seccomp
def solve():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    attributes = ctypes.create_string_buffer(128)
    fd = libc.syscall(298, attributes, -1, 0, -1, 0)
    return fd
