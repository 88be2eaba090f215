# Looks for the service's secrets in its environment: there must be nothing to find.
# expect: ok
# expect-without-audit: ok
# returns: 0
import os


def solve():
    return len(os.environ)
