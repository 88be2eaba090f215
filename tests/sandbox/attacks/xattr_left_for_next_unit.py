# Leaves a value in an extended attribute of its work dir and reports whether a unit before it,
# in the same slot, left one: the next unit gets a fresh work dir, so it never finds one.
# repeat: 2
# expect: ok
# expect-without-audit: ok
# returns: None
import os


def solve():
    try:
        found = os.getxattr(".", "user.flawforge-leak")
    except OSError:
        found = None
    try:
        os.setxattr(".", "user.flawforge-leak", b"from the previous unit")
    except OSError:
        pass
    return found
