# Assigns a large string in a loop, so the trace itself grows without end.
# expect: output_limit
# expect-without-audit: output_limit
def solve():
    text = "t" * 100000
    while True:
        text = text[1:] + text[0]
