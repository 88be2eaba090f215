# Grows memory a megabyte at a time until something gives.
# expect: memory_limit
# expect-without-audit: memory_limit
# memory: 64
def solve():
    blocks = []
    while True:
        blocks.append(bytearray(1024 * 1024))
