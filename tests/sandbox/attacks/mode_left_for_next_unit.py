# Opens its work dir to everyone and leaves a file there; the next unit in the slot must find it
# as fresh as the first did.
# repeat: 2
# expect: ok
# expect-without-audit: ok
# returns: '700 []'
import os


def solve():
    found = f"{os.stat('.').st_mode & 0o7777:o} {sorted(os.listdir('.'))}"
    os.chmod(".", 0o777)
    with open("left-behind", "w") as f:
        f.write("for the next unit")
    return found
