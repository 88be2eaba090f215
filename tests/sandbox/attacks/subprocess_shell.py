# Runs a shell command that would leave a marker on the host.
# expect: forbidden
# expect-without-audit: error
# absent-after: /tmp/flawforge-attack-subprocess
import subprocess


def solve():
    return subprocess.run(["sh", "-c", "touch /tmp/flawforge-attack-subprocess"], check=True).returncode
