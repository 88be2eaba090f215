# Plants a symlink in its work dir pointing at a host file, then reads through it.
# expect: forbidden
# expect-without-audit: error
import os


def solve():
    os.symlink("/etc/shadow", "innocent.txt")
    with open("innocent.txt") as f:
        return f.read()
