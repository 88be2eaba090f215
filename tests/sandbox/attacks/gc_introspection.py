# Walks the garbage collector's objects looking for the sandbox runtime.
# expect: forbidden
# expect-without-audit: ok
import gc


def solve():
    return len(gc.get_objects())
