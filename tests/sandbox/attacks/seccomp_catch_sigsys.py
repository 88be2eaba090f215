# Ignores SIGSYS and blocks it, hoping a denied system call then only fails, so it can report
# a clean result; the filter kills the whole unit whatever the signal's disposition.
# expect: forbidden
# expect-without-audit: forbidden
# detail-without-audit: seccomp
import signal


def solve():
    signal.signal(signal.SIGSYS, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGSYS])
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(250, 0, 0, 0, 0)  # keyctl
    return 0
