# Loads a BPF program through the bpf system call.
# expect: forbidden
# expect-without-audit: forbidden
# detail-without-audit: seccomp
def solve():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    attributes = ctypes.create_string_buffer(128)
    loaded = libc.syscall(321, 5, attributes, 128)  # bpf(BPF_PROG_LOAD, ...)
    return loaded
