# Explores the filesystem from its root.
# expect: forbidden
# expect-without-audit: ok
import os


def solve():
    return sorted(os.listdir("/"))
