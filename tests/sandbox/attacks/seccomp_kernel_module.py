# Loads a kernel module from a file it wrote (finit_module), then tries kexec.
# expect: forbidden
# expect-without-audit: forbidden
# detail-without-audit: seccomp
import os


def solve():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    with open("module.ko", "wb") as f:
        f.write(b"\x7fELF" + bytes(60))
    fd = os.open("module.ko", os.O_RDONLY)
    loaded = libc.syscall(313, fd, b"", 0)
    rebooted = libc.syscall(246, 0, 0, 0, 0)
    return loaded, rebooted
