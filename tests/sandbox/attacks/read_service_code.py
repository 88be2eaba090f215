# Reads the service's own source code and settings.
# expect: forbidden
# expect-without-audit: error
def solve():
    with open("{REPO}/flawforge/settings.py") as f:
        return f.read()
