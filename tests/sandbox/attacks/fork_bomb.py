# Classic fork bomb.
# expect: forbidden
# expect-without-audit: error
import os


def solve():
    while True:
        os.fork()
