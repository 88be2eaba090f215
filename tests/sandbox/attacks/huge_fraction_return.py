# Returns a Fraction of 5,000 digits over 4,000 digits and traces ints on both sides of the
# decimal/hex threshold: JSON parsers refuse decimal ints past 4,300 digits.
# expect: ok
# expect-without-audit: ok
from fractions import Fraction


def solve():
    below = (1 << 14000) - 1
    above = 1 << 14001
    value = Fraction(10 ** 5000 + 1, 3 ** 8384)
    return value
