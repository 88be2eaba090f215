# Sets up an io_uring, whose operations bypass the system-call checks of other layers.
# expect: forbidden
# expect-without-audit: forbidden
# detail-without-audit: seccomp
def solve():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)
    ring = libc.syscall(425, 8, params)  # io_uring_setup
    return ring
