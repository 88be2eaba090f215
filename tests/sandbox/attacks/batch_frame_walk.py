# Climbs from a running generator's frame into the runner's globals, to forge the results of
# the programs after it in a batch. Frames are out of a batch's reach, so it runs alone.
# expect: ok
# expect-without-audit: ok
# returns: True
def solve():
    walker = (walker.gi_frame.f_back for _ in [1])
    caller = next(walker)
    runner = caller.f_back
    found = "Channel" in runner.f_globals
    return found
