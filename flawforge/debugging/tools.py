"""The tools an agent gets on a task folder, run for real: run_tests (the task's tests in the sandbox), read_file,
search and edit_file (on the folder's files, edits kept for the calls after them).

A trajectory's tool results are what these return when its calls are made in order on a fresh copy of the task
folder; replaying the calls on another fresh copy gives the same text (the test suite's outcomes and messages with
what differs between identical runs taken out: object addresses, the unit's work folder, timings). Results are
bounded, as an agent's tools would be.
"""
from __future__ import annotations

import gzip
import json
import re
from collections import Counter

from flawforge.debugging.conversation import RUN_TESTS_FILE, deterministic_tar
from flawforge.debugging.failures import readable_failure
from flawforge.debugging.phrasing import counted
from flawforge.debugging.verdict import normalized
from flawforge.inputs import UnsafeName, plain_name
from flawforge.proto.debugging import Instance
from flawforge.proto.sandbox import SandboxLimits

READ_LINES = 80           # lines read_file shows at most
SEARCH_MATCHES = 30
LISTED_OUTCOMES = 20      # failing tests named in run_tests' result
SHOWN_FAILURES = 2        # of which the messages are shown
FAILURE_BYTES = 1500
SEARCHED_SUFFIXES = (".py", ".md", ".txt", ".cfg", ".toml", ".ini", ".rst")
ALL_PASS = "All tests pass."  # how run_tests' result ends when no test failed: Trajectory.resolved reads it

TOOLS = [
    {"type": "function", "function": {
        "name": "run_tests", "description": "Run the task's tests (tests.txt) or the given test ids with pytest; "
                                            "returns each failing test and the first failures' messages.",
        "parameters": {"type": "object", "properties": {"tests": {"type": "array", "items": {"type": "string"},
                                                                  "description": "Test ids; all of tests.txt if "
                                                                                 "left out."}},
                       "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "read_file", "description": f"Read lines of a file of the task folder, numbered (at most "
                                            f"{READ_LINES} at once).",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "start_line": {"type": "integer", "minimum": 1},
            "end_line": {"type": "integer", "minimum": 1}}, "required": ["path"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the task folder's text files for a regular expression; returns "
                                         "path:line: text for each match.",
        "parameters": {"type": "object", "properties": {
            "pattern": {"type": "string"}, "path": {"type": "string", "description": "A folder or file to search "
                                                                                     "in; the whole task if left "
                                                                                     "out."}},
                       "required": ["pattern"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "edit_file", "description": "Replace the one occurrence of old_str in a file with new_str.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "old_str": {"type": "string"}, "new_str": {"type": "string"}},
                       "required": ["path", "old_str", "new_str"], "additionalProperties": False}}},
]


class TaskTools:
    """One agent's session on a task folder: `files` (path -> bytes, as tasks/<task id>/ holds them) with the
    edits made so far; run_tests runs in `runner` (the suite sandbox) against the instance's environment."""

    def __init__(self, instance: Instance, files: dict[str, bytes], runner, environment_path: str | None,
                 limits: SandboxLimits):
        self.instance = instance
        self.original = dict(files)
        self.files = dict(files)
        self.runner = runner
        self.environment_path = environment_path
        self.limits = limits
        self._archive: bytes | None = None

    def call(self, name: str, arguments: str) -> str:
        """The tool's result for a call as an agent makes it (arguments as JSON text)."""
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            return f"Error: the arguments are not JSON: {arguments[:200]}"
        tool = {"run_tests": self.run_tests, "read_file": self.read_file, "search": self.search,
                "edit_file": self.edit_file}.get(name)
        if tool is None:
            return f"Error: no tool named {name!r}"
        problem = argument_problem(name, args)
        if problem:
            return f"Error: {problem}"
        return tool(**args)

    def _path(self, path: str) -> str:
        try:
            return plain_name(path.strip().removeprefix("./"), "path")
        except UnsafeName as exc:
            raise LookupError(str(exc)) from None

    def _text(self, path: str) -> str:
        if path not in self.files:
            raise LookupError(f"no file {path}")
        return self.files[path].decode("utf-8", "replace")

    def run_tests(self, tests: list[str] | None = None) -> str:
        return test_report(self.suite_run(tests))

    def suite_run(self, tests: list[str] | None = None):
        """The sandbox's run of the tests (all of tests.txt if none are given) on the folder as edited so far."""
        arguments = list(tests) if tests else self.instance.arguments  # what tests.txt lists, in the gate's order
        if self._archive is None:  # the folder as it was handed over; edits go as an overlay
            self._archive = gzip.compress(deterministic_tar({f"task/{p}": d for p, d in self.original.items()}),
                                          mtime=0)
        overlay = {p: d.decode("utf-8") for p, d in self.files.items() if self.original.get(p) != d}
        return self.runner.run_suite(self._archive, overlay, source_roots=self.instance.source_roots,
                                     args=arguments, limits=self.limits,
                                     **({"environment": self.environment_path} if self.environment_path else {}))

    def read_file(self, path: str, start_line: int = 1, end_line: int | None = None) -> str:
        try:
            lines = self._text(self._path(path)).splitlines()
        except LookupError as exc:
            return f"Error: {exc}"
        start = max(1, int(start_line))
        end = min(len(lines), int(end_line) if end_line else start + READ_LINES - 1, start + READ_LINES - 1)
        if start > len(lines):
            return f"Error: {path} has {len(lines)} lines"
        shown = "\n".join(f"{n:4d} {lines[n - 1]}" for n in range(start, end + 1))
        return f"{path}, lines {start}-{end} of {len(lines)}:\n{shown}"

    def search(self, pattern: str, path: str = "") -> str:
        try:
            expression = re.compile(pattern)
        except re.error:
            expression = re.compile(re.escape(pattern))
        root = self._path(path) if path.strip() not in ("", ".") else ""
        matches = []
        for name in sorted(self.files):
            if root and name != root and not name.startswith(root.rstrip("/") + "/"):
                continue
            if not name.endswith(SEARCHED_SUFFIXES) or name == RUN_TESTS_FILE:
                continue
            for number, line in enumerate(self.files[name].decode("utf-8", "replace").splitlines(), 1):
                if expression.search(line):
                    matches.append(f"{name}:{number}: {line.strip()[:200]}")
        if not matches:
            return f"No match for {pattern!r}."
        more = len(matches) - SEARCH_MATCHES
        return "\n".join(matches[:SEARCH_MATCHES]) + (f"\n... and {more} more matches" if more > 0 else "")

    def edit_file(self, path: str, old_str: str, new_str: str) -> str:
        try:
            name = self._path(path)
            text = self._text(name)
        except LookupError as exc:
            return f"Error: {exc}"
        count = text.count(old_str) if old_str else 0
        if count != 1:
            return f"Error: old_str occurs {count} times in {name}; it must occur exactly once."
        self.files[name] = text.replace(old_str, new_str, 1).encode("utf-8")
        return (f"Edited {name}: {counted(len(old_str.splitlines()), 'line')} replaced by "
                f"{counted(len(new_str.splitlines()), 'line')}.")


# What each JSON type of the tools' parameters is in Python (a bool is not an integer here).
JSON_TYPES = {"string": (str,), "integer": (int,), "array": (list,)}


def argument_problem(name: str, args) -> str | None:
    """What is wrong with a call's arguments by its tool's definition (an agent's call is checked before it is
    made), or None."""
    parameters = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)
    if not isinstance(args, dict):
        return f"the arguments of {name} are not a JSON object"
    unknown = sorted(set(args) - set(parameters["properties"]))
    if unknown:
        taken = ", ".join(parameters["properties"])
        return f"{name} takes no argument {', '.join(map(repr, unknown))}; it takes {taken}"
    missing = [key for key in parameters.get("required", []) if key not in args]
    if missing:
        return f"{name} needs {', '.join(missing)}"
    for key, value in args.items():
        kind = parameters["properties"][key]["type"]
        items = parameters["properties"][key].get("items", {}).get("type")
        if (isinstance(value, bool) or not isinstance(value, JSON_TYPES[kind])
                or (items and not all(isinstance(item, JSON_TYPES[items]) for item in value))):
            return f"{name}'s {key} must be {'an' if kind[0] in 'aei' else 'a'} {kind}" + (
                f" of {items}s" if items else "")
    options = [test for test in args.get("tests") or [] if test.startswith("-")] if name == "run_tests" else []
    if options:  # pytest would take them as its options, and may run no test at all
        return f"run_tests takes test ids, not pytest's options ({', '.join(options)})"
    return None


def test_report(run) -> str:
    """A suite run as an agent's test tool shows it: the counts, the failing tests, the first failures' messages;
    only what is the same in every identical run."""
    if not run.whole():
        return f"The test run did not finish: {run.outcome}: {normalized(run.detail)[:500]}"
    counts = Counter(test.outcome for test in run.tests)
    summary = ", ".join(f"{counts[o]} {o}" for o in ("failed", "error", "passed", "skipped", "xfailed", "xpassed")
                        if counts[o])
    failing = [test for test in run.tests if test.outcome in ("failed", "error")]
    if not failing:
        return f"{summary}. {ALL_PASS}"
    listed = "\n".join(f"{t.outcome.upper()} {t.name}" for t in failing[:LISTED_OUTCOMES])
    more = f"\n... and {len(failing) - LISTED_OUTCOMES} more" if len(failing) > LISTED_OUTCOMES else ""
    messages = "\n\n".join(f"___ {t.name} ___\n{readable_failure(normalized(t.message), FAILURE_BYTES)}"
                           for t in failing[:SHOWN_FAILURES])
    return f"{summary}.\n{listed}{more}\n\n{messages}"
