"""Difficulty features read off an instance: lines changed, functions touched, failing tests, the distance from the
traceback's deepest frame in the buggy file to the fix; the estimate orders a bug the traceback points at below one
it never reaches, and a single bug below a combined one."""
from __future__ import annotations

from flawforge.debugging.difficulty import difficulty_of
from flawforge.debugging.patches import unified_diff
from flawforge.proto.debugging import Environment, Instance

CLEAN = "".join(f"x{n} = {n}\n" for n in range(1, 41))


def instance(frame_line: int | None, lines: tuple[int, ...] = (30,), parts: list[str] = ()) -> Instance:
    buggy = CLEAN
    for line in lines:
        buggy = buggy.replace(f"x{line} = {line}\n", f"x{line} = 0\n")
    frames = ['  File "tests/test_m.py", line 3, in test_a', "    assert f() == 1"]
    if frame_line is not None:
        frames += [f'  File "pkg/m.py", line {frame_line}, in f', "    return g()"]
    output = "\n".join(["tests/test_m.py::test_a: failed", "AssertionError: assert 0 == 1",
                        "Traceback, most recent call last (pytest's own frames left out):", *frames])
    return Instance(instance_id="m.1.op_change__00000000", source="m", version="1", modifier="op_change",
                    path="pkg/m.py", qualname=", ".join(f"f{n}" for n in range(len(lines))), description="",
                    patch=unified_diff("pkg/m.py", CLEAN, buggy), fix_patch=unified_diff("pkg/m.py", buggy, CLEAN),
                    FAIL_TO_PASS=["tests/test_m.py::test_a"], PASS_TO_PASS=["tests/test_m.py::test_b"],
                    failing_output=output, source_roots=[""], test_paths=["tests"], parts=list(parts),
                    environment=Environment(python="3.11", packages=[]))


def test_features_and_the_order_of_estimates():
    near, far, unreached = (difficulty_of(instance(line)) for line in (29, 5, None))
    assert (near.frame_distance, far.frame_distance, unreached.frame_distance) == (1, 25, None)
    assert near.lines_changed == 2 and near.functions_touched == 1 and near.fail_to_pass == 1
    assert near.estimate < far.estimate < unreached.estimate
    combined = difficulty_of(instance(29, (10, 30), ["a", "b"]))
    assert combined.functions_touched == 2 and combined.lines_changed == 4 and combined.frame_distance == 1
    assert combined.estimate > near.estimate + 1.5
