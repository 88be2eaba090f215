# Creates a System V shared-memory segment, which would outlive the unit and be readable by the next.
# expect: forbidden
# expect-without-audit: forbidden
# detail-without-audit: seccomp
def solve():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    segment = libc.shmget(0x464C4157, 4096, 0o1666)  # IPC_CREAT | 0666
    return segment
