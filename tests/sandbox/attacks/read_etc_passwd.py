# Reads the host's user database.
# expect: forbidden
# expect-without-audit: error
def solve():
    with open("/etc/passwd") as f:
        return f.read()
