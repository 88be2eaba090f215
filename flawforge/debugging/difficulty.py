"""How hard an instance is to fix: features read off the instance, and an estimate from them.

The features are what makes a bug hard to find in SWE-smith's and SWE-bench's experience: how much
the fix changes, how many functions it touches, how many tests fail (more failures, more evidence),
and how far the bug is from where the traceback points (a bug the traceback does not reach at all
must be found by reading). The estimate is a weighted sum of them on a 0-10 scale; its weights are
set by hand, not fitted to solve rates, so it orders instances, it does not predict a rate. A run
with a solver (solver.py) records each instance's solve rate beside the estimate, and summary.json
both per modifier; fitting the weights waits for enough solved tasks to mean something.
"""
from __future__ import annotations

import math

from flawforge.debugging.failures import FRAME
from flawforge.debugging.patches import fix_site
from flawforge.debugging.statements import sections
from flawforge.proto.debugging import Difficulty, Instance

# A traceback that never enters the buggy file counts as this many lines away.
UNREACHED = 200


def failing_frame(instance: Instance) -> int | None:
    """The line of the buggy file where the first failure's traceback is deepest in it, if it reaches it."""
    first = next(iter(sections(instance.failing_output).values()), "")
    lines = [int(m.group("line")) for m in map(FRAME.match, first.splitlines())
             if m and (m.group("path") == instance.path or m.group("path").endswith("/" + instance.path))]
    return lines[-1] if lines else None


def difficulty_of(instance: Instance) -> Difficulty:
    changed = sum(1 for line in instance.patch.splitlines()
                  if line[:1] in "+-" and not line.startswith(("+++", "---")))
    functions = len({name.strip() for name in instance.qualname.split(",")})
    frame = failing_frame(instance)
    fix_lines = fix_site(instance.fix_patch)
    distance = min(abs(frame - line) for line in fix_lines) if frame is not None and fix_lines else None
    estimate = (1.0 + 1.2 * math.log2(1 + changed) + 1.5 * (functions - 1)
                + 1.5 * math.log2(1 + (UNREACHED if distance is None else distance)) / math.log2(1 + UNREACHED)
                + 1.5 * (len(instance.parts) > 1) - 0.4 * math.log2(1 + len(instance.FAIL_TO_PASS)) / 3)
    return Difficulty(lines_changed=changed, functions_touched=functions, fail_to_pass=len(instance.FAIL_TO_PASS),
                      frame_distance=distance, modifier=instance.modifier,
                      estimate=round(min(10.0, max(0.0, estimate)), 2))
