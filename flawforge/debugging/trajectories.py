"""Agent trajectories in OpenAI's tool-call format, their tool results real: the writer makes each call on the task
folder (tools.TaskTools) as it writes it, and records what came back.

The agent runs the tests and sees them fail; opens the buggy file at the failing frame (or, where the traceback
stops in the test, searches for the function the failure goes through and reads it there); reads on to where the
bug is if that is further; edits the file (one edit per place of a combined bug, each the fix's hunk with enough
lines around it to occur once); runs the tests again and sees them pass. The reasoning between the calls comes
from the facts (explain.py), worded per instance.
"""
from __future__ import annotations

import json

from flawforge.debugging.conversation import SYSTEM, TESTS_FILE, excerpts, problem_statement
from flawforge.debugging.difficulty import failing_frame
from flawforge.debugging.explain import evidence, what_is_wrong
from flawforge.debugging.patches import apply_patch, split_hunks, task_id
from flawforge.debugging.phrasing import counted, pick
from flawforge.debugging.statements import Failure
from flawforge.debugging.tools import ALL_PASS, READ_LINES, TOOLS, TaskTools
from flawforge.proto.debugging import FunctionCall, Instance, ToolCall, Trajectory, TrajectoryMessage

WRITER = "deterministic"
AROUND = 12  # lines read above a frame or a bug


class Session:
    """The messages so far, and the tools the calls run on."""

    def __init__(self, tools: TaskTools):
        self.tools = tools
        self.messages: list[TrajectoryMessage] = []
        self.last: str = ""

    def say(self, role: str, content: str) -> None:
        self.messages.append(TrajectoryMessage(role=role, content=content))

    def call(self, reasoning: str, name: str, **arguments) -> str:
        """An assistant turn with one tool call, made on the task folder; its result as the tool message."""
        self.calls_as_written(reasoning, [(name, json.dumps(arguments, sort_keys=True))])
        return self.last

    def calls_as_written(self, reasoning: str, calls: list[tuple[str, str]]) -> None:
        """An assistant turn with its calls (a tool's name, the arguments as JSON text, as an agent wrote them), made
        on the task folder in order; each result as a tool message after the turn. Calls are numbered across the
        session: call_1, call_2..."""
        first = sum(len(m.tool_calls or []) for m in self.messages) + 1
        tool_calls = [ToolCall(id=f"call_{first + n}", function=FunctionCall(name=name, arguments=text))
                      for n, (name, text) in enumerate(calls)]
        self.messages.append(TrajectoryMessage(role="assistant", content=reasoning or None, tool_calls=tool_calls))
        for tool_call in tool_calls:
            self.last = self.tools.call(tool_call.function.name, tool_call.function.arguments)
            self.messages.append(TrajectoryMessage(role="tool", tool_call_id=tool_call.id, content=self.last))


def unique_edit(text: str, hunk: str) -> tuple[str, str]:
    """(old, new) for the fix's hunk: its buggy-side lines and its fixed-side lines, with lines of the file around
    them added until the old text occurs once in `text`."""
    old = [line[1:] for line in hunk.splitlines(keepends=True)[2:] if line[:1] in (" ", "-")]
    new = [line[1:] for line in hunk.splitlines(keepends=True)[2:] if line[:1] in (" ", "+")]
    lines = text.splitlines(keepends=True)
    start = int(hunk.split("@@ -", 1)[1].split(",")[0].split(" ")[0]) - 1 if old else 0
    before, after = start, start + len(old)
    while "".join(old) and text.count("".join(old)) > 1 and (before > 0 or after < len(lines)):
        if before > 0:
            before -= 1
            old.insert(0, lines[before])
            new.insert(0, lines[before])
        if after < len(lines):
            old.append(lines[after])
            new.append(lines[after])
            after += 1
    return "".join(old), "".join(new)


def write_trajectory(instance: Instance, clean: str, failures: list[Failure], tools: TaskTools) -> Trajectory:
    """The trajectory of an agent fixing the instance's task, every call made on `tools` (a fresh task folder)."""
    key = f"{instance.instance_id}:trajectory"
    buggy = apply_patch(clean, instance.patch)
    session = Session(tools)
    session.say("system", SYSTEM)
    session.say("user", f"{problem_statement(instance)}\n\n" + pick(key, "ask", [
        f"The task folder holds the project; `{TESTS_FILE}` lists the tests that must pass. Please fix the bug.",
        "Please find the bug and fix it. The tests to make pass are listed in tests.txt.",
        "Can you fix this? The relevant tests are in tests.txt; change the library, not the tests."]))
    session.call(pick(key, "start", ["Let me run the tests first.", "First, I'll reproduce the failure.",
                                     "I'll start by running the listed tests.", ""]), "run_tests")
    first = failures[0] if failures else None
    frame = failing_frame(instance)
    sites = excerpts(instance, buggy)
    function = instance.qualname.split(",")[0].strip().rsplit(".", 1)[-1]
    shows = evidence(first, key)
    if frame is not None:
        session.call(f"{shows} " + pick(key, "open-frame", [
            f"The traceback goes into `{instance.path}` at line {frame}; let me read it there.",
            f"The deepest frame in the library is `{instance.path}`, line {frame}. Reading around it.",
            f"Let me open `{instance.path}` where the traceback points (line {frame})."]),
                     "read_file", path=instance.path, start_line=max(1, frame - AROUND), end_line=frame + AROUND)
        shown = range(max(1, frame - AROUND), frame + AROUND + 1)
    else:
        found = session.call(f"{shows} " + pick(key, "search", [
            f"The traceback stops in the test, so let me find `{function}`.",
            f"Nothing in the traceback points into the library; I'll search for `{function}`.",
            f"Where is `{function}` defined?"]), "search", pattern=rf"def {function}\b")
        line = next((int(row.split(":")[1]) for row in found.splitlines()
                     if row.startswith(f"{instance.path}:")), sites[0][0].lines[0])
        session.call(pick(key, "open-found", [f"Reading `{function}` in `{instance.path}`.",
                                              f"Let me read `{function}`.", ""]),
                     "read_file", path=instance.path, start_line=line, end_line=line + READ_LINES - 1)
        shown = range(line, line + READ_LINES)
    for number, (site, _) in enumerate(sites):
        if not all(n in shown for n in site.lines):
            start = max(1, site.lines[0] - AROUND)
            session.call(pick(key, f"read-on{number}", [
                f"The values come out of `{instance.qualname}`; the part that computes them is further on.",
                "Let me read on to the code that produces this.", f"Reading further in `{instance.path}`."]),
                         "read_file", path=instance.path, start_line=start, end_line=site.lines[-1] + AROUND)
            shown = range(start, site.lines[-1] + AROUND + 1)
    # One edit a hunk of the fix, the last first: an edit never moves the lines of the ones still to make.
    for number, hunk in reversed(list(enumerate(split_hunks(instance.fix_patch)))):
        old, new = unique_edit(tools.files[instance.path].decode("utf-8"), hunk)
        session.call(what_is_wrong(hunk, f"{key}:{number}") + " " + pick(key, f"edit{number}", [
            "Fixing it.", "Let me correct that.", "I'll change it.", "Editing the file."]),
                     "edit_file", path=instance.path, old_str=old, new_str=new)
    report = session.call(pick(key, "rerun", ["Now the tests again.", "Let me check that the tests pass now.",
                                              "Running the tests to confirm.", ""]), "run_tests")
    resolved = report.endswith(ALL_PASS)
    session.say("assistant", pick(key, "done", [
        f"Fixed: the change to `{instance.path}` makes all {len(instance.FAIL_TO_PASS) + len(instance.PASS_TO_PASS)} "
        f"listed tests pass.",
        f"Done. {counted(len(instance.FAIL_TO_PASS), 'failing test', 'pass')} now, and the others still do.",
        f"The bug was in `{instance.qualname}`; with the edit every listed test passes."]) if resolved else
        "The tests still fail after the edit.")
    return Trajectory(instance_id=instance.instance_id, task_id=task_id(instance.instance_id), tools=TOOLS,
                      messages=session.messages, resolved=resolved, writer=WRITER)


def replay(trajectory: Trajectory, tools: TaskTools) -> list[str]:
    """Makes the trajectory's calls again, in order, on `tools` (a fresh task folder); the calls whose result now
    differs from the recorded one."""
    recorded = {m.tool_call_id: m.content for m in trajectory.messages if m.role == "tool"}
    differing = []
    for message in trajectory.messages:
        for call in message.tool_calls or []:
            if tools.call(call.function.name, call.function.arguments) != recorded.get(call.id):
                differing.append(f"{call.id} {call.function.name}")
    return differing
