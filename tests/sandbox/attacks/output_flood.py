# Prints without end.
# expect: output_limit
# expect-without-audit: output_limit
def solve():
    line = "flood " * 100
    while True:
        print(line)
