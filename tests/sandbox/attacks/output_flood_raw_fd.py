# Floods stdout and stderr through the raw file descriptors, bypassing sys.stdout.
# expect: output_limit
# expect-without-audit: output_limit
import os


def solve():
    chunk = b"x" * 65536
    while True:
        os.write(1, chunk)
        os.write(2, chunk)
