"""How often to look again at something that changes by itself (a job's work items landing, its status)."""

# The longest pause between two looks: what a step's end may wait to be seen.
POLL_CAP_S = 0.5


def next_poll_s(poll_s: float, unchanged_s: float) -> float:
    """`poll_s`, or a quarter of the time since the last change where that is longer, at most POLL_CAP_S: items
    landing every few milliseconds are seen at once, and a library that takes a minute is looked for twice a second,
    not twenty times (each look lists the store and reads the job's record: some 5 of a debugging job's 20 CPU s)."""
    return min(max(poll_s, unchanged_s / 4), max(poll_s, POLL_CAP_S))
