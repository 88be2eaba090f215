# Crashes the interpreter with a real segmentation fault.
# expect: crashed
# expect-without-audit: crashed
import faulthandler


def solve():
    faulthandler.disable()
    faulthandler._sigsegv()
