# Traces a list holding a 40 MiB string, 40 MiB of bytes and a huge integer: the list's whole repr
# would outgrow a 256 MiB unit (and the integer's is refused past 4,300 digits).
# expect: ok
# expect-without-audit: ok
def solve():
    items = ["x" * (40 << 20), b"\x01" * (40 << 20), 10 ** 20000]
    count = len(items)
    return count
