# Allocates far more than the memory limit in one go.
# expect: memory_limit
# expect-without-audit: memory_limit
# memory: 64
def solve():
    block = bytearray(8 * 1024 ** 3)
    return len(block)
