# Hides its own MemoryError: in a batch it could run out of memory where it alone would not,
# and answer differently. Catching that broadly keeps it out of a batch.
# expect: ok
# expect-without-audit: ok
# memory: 64
# returns: 'out of memory'
def solve():
    try:
        blocks = [bytearray(1 << 20) for _ in range(1000)]
        return len(blocks)
    except Exception:
        return "out of memory"
