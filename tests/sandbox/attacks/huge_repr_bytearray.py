# Traces a 100 MiB bytearray: its whole repr would take 400 MiB, beyond the unit's memory.
# The trace summarises the value within a bounded size, without building the repr.
# expect: ok
# expect-without-audit: ok
def solve():
    data = bytearray(100 * 1024 * 1024)
    size = len(data)
    return data
