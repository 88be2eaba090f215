# Double-forks a daemon that would outlive its unit and write a marker on the host later.
# expect: forbidden
# expect-without-audit: error
# absent-after: /tmp/flawforge-attack-daemon
import os
import time


def solve():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(1)
            open("/tmp/flawforge-attack-daemon", "w").close()
        os._exit(0)
    return "spawned"
