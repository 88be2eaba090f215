# Sleeps far past the wall-clock limit (uses no CPU, so only the wall clock can stop it).
# expect: timeout
# expect-without-audit: timeout
# timeout: 0.5
import time


def solve():
    time.sleep(600)
    return "woke up"
