# Stores a secret in the session keyring with add_key, then reads the keyring with keyctl,
# through ctypes after trying to switch the audit hook off.
# expect: forbidden
# expect-without-audit: forbidden
# detail-without-audit: seccomp
import sys


def solve():
    try:
        sys.addaudithook(lambda *args: None)
    except Exception:
        pass
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    key = libc.syscall(248, b"user", b"flawforge-leak", b"secret", 6, -3)  # add_key(..., KEY_SPEC_SESSION_KEYRING)
    found = libc.syscall(250, 10, -3, 0, 0)  # keyctl(KEYCTL_READ, session keyring)
    return key, found
