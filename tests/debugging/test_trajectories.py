"""The agent's file tools on a task folder (read_file, search, edit_file: real operations on the folder's files,
with their errors), and the edit a trajectory makes: the fix's hunk, widened until it occurs once."""
from __future__ import annotations

import json

from flawforge.debugging.patches import split_hunks, unified_diff
from flawforge.debugging.tools import TOOLS, TaskTools
from flawforge.debugging.trajectories import unique_edit
from flawforge.proto.debugging import Environment, Instance
from flawforge.proto.sandbox import SandboxLimits

CLEAN = "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x + 1\n\n\ndef h(y):\n    return y * 2\n"
BUGGY = CLEAN.replace("def g(x):\n    return x + 1", "def g(x):\n    return x - 1")


def tools(files: dict[str, str]) -> TaskTools:
    instance = Instance(instance_id="m.1.op_change__00000000", source="m", version="1", modifier="op_change",
                        path="pkg/m.py", qualname="g", description="", patch="", fix_patch="",
                        FAIL_TO_PASS=["tests/test_m.py::test_g"], PASS_TO_PASS=["tests/test_m.py::test_f"],
                        failing_output="", source_roots=[""], test_paths=["tests"],
                        environment=Environment(python="3.11", packages=[]))
    return TaskTools(instance, {p: t.encode() for p, t in files.items()}, None, None, SandboxLimits())


def test_the_file_tools_work_on_the_folder_and_say_what_went_wrong():
    session = tools({"pkg/m.py": BUGGY, "tests/test_m.py": "from pkg.m import g\n", "tests.txt": "x\n"})
    assert {t["function"]["name"] for t in TOOLS} == {"run_tests", "read_file", "search", "edit_file"}
    assert session.call("read_file", json.dumps({"path": "pkg/m.py", "start_line": 5, "end_line": 6})) == \
        "pkg/m.py, lines 5-6 of 10:\n   5 def g(x):\n   6     return x - 1"
    assert session.call("search", json.dumps({"pattern": r"def g\b"})) == "pkg/m.py:5: def g(x):"
    assert session.call("search", json.dumps({"pattern": "g(", "path": "tests"})) == "No match for 'g('."
    assert session.call("search", json.dumps({"pattern": "import g"})) == "tests/test_m.py:1: from pkg.m import g"
    assert session.call("read_file", json.dumps({"path": "../etc/passwd"})).startswith("Error:")
    assert session.call("read_file", json.dumps({"path": "nope.py"})) == "Error: no file nope.py"
    assert session.call("edit_file", json.dumps({"path": "pkg/m.py", "old_str": "return", "new_str": "y"})) \
        == "Error: old_str occurs 3 times in pkg/m.py; it must occur exactly once."
    assert session.call("edit_file", json.dumps({"path": "pkg/m.py", "old_str": "x - 1", "new_str": "x + 1"})) \
        == "Edited pkg/m.py: 1 line replaced by 1 line."
    assert session.files["pkg/m.py"].decode() == CLEAN
    assert session.call("nope", "{}") == "Error: no tool named 'nope'"
    assert session.call("read_file", "{not json").startswith("Error: the arguments are not JSON")


def test_an_edit_is_the_fixs_hunk_widened_until_it_occurs_once():
    text = "a = 1\n" + "x = 0\n" * 8 + "b = 2\n" + "x = 0\n" * 8 + "c = 3\n"
    fixed = text.replace("b = 2\n", "b = 3\n")
    (hunk,) = split_hunks(unified_diff("m.py", text, fixed))
    old, new = unique_edit(text, hunk)
    assert text.count(old) == 1 and text.replace(old, new) == fixed
    twice = "y = 0\n" + "x = 0\n" * 3 + "x = 1\n" + "x = 0\n" * 3 + "y = 1\n" + "x = 0\n" * 3 + "x = 1\n" + "x = 0\n" * 3
    fixed = twice.replace("x = 1\n", "x = 2\n", 1)
    (hunk,) = split_hunks(unified_diff("m.py", twice, fixed))
    old, new = unique_edit(twice, hunk)
    assert twice.count(old) == 1 and twice.replace(old, new) == fixed
