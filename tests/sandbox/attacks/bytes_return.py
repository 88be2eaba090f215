# Returns bytes that are not UTF-8 and traces a bytearray and a memoryview of them.
# expect: ok
# expect-without-audit: ok
def solve():
    raw = b"\xff\xfe\x00\x80" * 64
    mutable = bytearray(raw)
    view = memoryview(raw)
    return raw
