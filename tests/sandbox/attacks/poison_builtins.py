# Poisons builtins and shared modules, hoping the next unit inherits them (the canary checks it does not).
# expect: ok
# expect-without-audit: ok
import builtins
import fractions
import math
import sys


def solve():
    builtins.print = None
    builtins.int = str
    builtins.__import__ = None
    fractions.Fraction = float
    math.sqrt = lambda x: 0
    sys.setrecursionlimit(50)
    sys.modules["json"] = None
    return "poisoned"
