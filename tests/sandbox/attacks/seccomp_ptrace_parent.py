# Attaches to its parent (the fork server) with ptrace, to rewrite the reports of other units.
# expect: forbidden
# expect-without-audit: forbidden
# detail-without-audit: seccomp
import os


def solve():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    attached = libc.ptrace(16, os.getppid(), 0, 0)  # PTRACE_ATTACH
    return attached
