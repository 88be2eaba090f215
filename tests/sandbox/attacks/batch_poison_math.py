# Replaces math functions and constants, hoping the next programs of its batch use them.
# Plain attribute assignments, so it runs in the batch; the batch ends after it.
# expect: ok
# expect-without-audit: ok
# returns: 2
import math


def solve():
    math.sqrt = abs
    math.pi = 3
    answer = 2
    return answer
