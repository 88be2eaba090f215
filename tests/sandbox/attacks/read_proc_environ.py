# Reads the environment of the process that started it, through /proc.
# expect: forbidden
# expect-without-audit: error
def solve():
    with open("/proc/1/environ", "rb") as f:
        return f.read().decode()
