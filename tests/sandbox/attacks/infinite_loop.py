# An endless pure-Python loop: the wall clock must stop it.
# expect: timeout
# expect-without-audit: timeout
# timeout: 0.5
def solve():
    while True:
        pass
