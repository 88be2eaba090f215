# Fills its work dir with files until the disk is full.
# expect: output_limit
# expect-without-audit: output_limit
def solve():
    chunk = b"f" * (1024 * 1024)
    for i in range(100000):
        with open(f"fill-{i}", "wb") as f:
            for _ in range(4):
                f.write(chunk)
