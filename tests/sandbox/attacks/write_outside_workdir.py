# Writes a file outside its work dir.
# expect: forbidden
# expect-without-audit: error
# absent-after: /tmp/flawforge-attack-write
def solve():
    with open("/tmp/flawforge-attack-write", "w") as f:
        f.write("escaped")
    return "written"
