# Computes 10**10**8, a hundred-million-digit integer.
# expect: timeout
# expect-without-audit: timeout
# timeout: 1
def solve():
    big = 10 ** 10 ** 8
    return big
