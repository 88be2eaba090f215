# Signals the sandbox's fork server (pid 1 of its namespace) and every process it may reach.
# expect: forbidden
# expect-without-audit: error
import os
import signal


def solve():
    os.kill(1, signal.SIGKILL)
    os.kill(-1, signal.SIGKILL)
