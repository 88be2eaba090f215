# Dereferences a null pointer through ctypes.
# expect: forbidden
# expect-without-audit: crashed
import ctypes


def solve():
    return ctypes.string_at(0)
