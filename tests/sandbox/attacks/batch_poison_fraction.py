# Replaces Fraction's arithmetic and a method, hoping the next programs of its batch compute
# with them. Plain attribute assignments, so it runs in the batch; the batch ends after it.
# expect: ok
# expect-without-audit: ok
# returns: 1
from fractions import Fraction


def solve():
    Fraction.__add__ = lambda self, other: Fraction(0)
    Fraction.limit_denominator = lambda self, max_denominator=0: Fraction(0)
    answer = 1
    return answer
