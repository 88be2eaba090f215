# Writes through a symlink to the work dir's parent.
# expect: forbidden
# expect-without-audit: error
# absent-after: /tmp/flawforge-attack-climb
import os


def solve():
    os.symlink("/tmp", "up")
    with open("up/flawforge-attack-climb", "w") as f:
        f.write("escaped")
