# Lifts the recursion limit and recurses through C (repr), overflowing the C stack.
# expect: crashed
# expect-without-audit: crashed
import sys


class Nest:
    def __repr__(self):
        return repr(self)


def solve():
    sys.setrecursionlimit(10 ** 8)
    return repr(Nest())
