"""How often to look again at something that changes by itself (a job's work items landing, its status)."""

# Unchanged for this long, looks come less often: a math job's items land every few tenths of a second, and its
# whole run is seconds long, so it is always looked at every poll.
PATIENT_AFTER_S = 2.0
# The longest pause between two looks: what a step's end may wait to be seen.
POLL_CAP_S = 0.5


def next_poll_s(poll_s: float, unchanged_s: float) -> float:
    """`poll_s`, or once nothing has changed for PATIENT_AFTER_S, a quarter of the time since the last change, at most
    POLL_CAP_S: a library that takes a minute is looked for twice a second, not twenty times (each look lists the
    store and reads the job's record: some 5 of a debugging job's 20 CPU s)."""
    if unchanged_s < PATIENT_AFTER_S:
        return poll_s
    return min(max(poll_s, unchanged_s / 4), max(poll_s, POLL_CAP_S))
