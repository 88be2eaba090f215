# Unbounded recursion under the default recursion limit.
# expect: error
# expect-without-audit: error
def down(n):
    return down(n + 1) + 1


def solve():
    return down(0)
