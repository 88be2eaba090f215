# Writes one file past the file-size limit.
# expect: output_limit
# expect-without-audit: output_limit
def solve():
    with open("big", "wb") as f:
        while True:
            f.write(b"b" * (1024 * 1024))
