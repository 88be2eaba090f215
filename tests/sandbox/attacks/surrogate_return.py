# Returns and traces strings holding lone surrogates, which no UTF-8 encoder takes: the result
# must still serialise and parse back (the value travels as its repr, type "other" of str).
# expect: ok
# expect-without-audit: ok
def solve():
    broken = "half \ud800 of a pair"
    tail = "\udcff"
    return broken + tail
