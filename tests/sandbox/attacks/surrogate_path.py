# Opens a path whose name is not UTF-8 (it decodes to lone surrogates) outside the work dir, so
# the forbidden operation's description, or the error message, holds them.
# expect: forbidden
# expect-without-audit: error
def solve():
    with open(b"/\xff\xfe-outside", "w") as f:
        f.write("x")
    return 0
