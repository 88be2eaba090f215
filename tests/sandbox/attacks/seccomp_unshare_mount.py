# Tries to switch the audit hook off, then through ctypes enters a new user and mount namespace
# (root in it) and mounts a tmpfs. The audit layer stops the ctypes import; without it, the
# seccomp filter kills the unit at unshare.
# expect: forbidden
# expect-without-audit: forbidden
# detail-without-audit: seccomp
import sys


def switch_audit_off():
    for attempt in (lambda: sys.addaudithook(lambda *args: None), lambda: setattr(sys, "audit", lambda *a: None),
                    lambda: sys.modules.pop("ctypes", None)):
        try:
            attempt()
        except Exception:
            pass


def solve():
    switch_audit_off()
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    entered = libc.unshare(0x10000000 | 0x00020000)
    mounted = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
    return entered, mounted
