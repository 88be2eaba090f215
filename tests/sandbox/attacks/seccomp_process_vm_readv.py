# Reads the fork server's memory directly with process_vm_readv.
# expect: forbidden
# expect-without-audit: forbidden
# detail-without-audit: seccomp
import os


def solve():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(64)
    local = (ctypes.c_void_p * 2)(ctypes.addressof(buffer), 64)
    remote = (ctypes.c_void_p * 2)(0x400000, 64)
    read = libc.process_vm_readv(os.getppid(), local, 1, remote, 1, 0)
    return read
