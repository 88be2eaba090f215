"""Conversation writers (deterministic, and a model's turns checked against the facts) and the file-edit bundle.

The deterministic writer takes every statement from the instance: the failing test ids and
output are the run's, the line quoted is the one the patch changed, the fix is the reverse diff.
Nothing is invented, so the conversation cannot contradict the facts. A model writes only the
assistant's prose (ConversationReply); the excerpt and the diff are added from the instance,
and `contradictions` reads the prose for test ids, lines, files and functions that are not the
real ones: a reply with any is not used (the deterministic writer is, and the reason is kept).
"""
from __future__ import annotations

import ast
import functools
import io
import json
import re
import tarfile
from dataclasses import dataclass

from flawforge.debugging.explain import evidence, fix_outcome, what_is_wrong
from flawforge.debugging.failures import FRAME, cut
from flawforge.debugging.modifiers.base import first_line
from flawforge.debugging.phrasing import counted, order, pick
from flawforge.debugging.statements import Failure
from flawforge.debugging.syntax import parse
from flawforge.debugging.patches import apply_patch, changed_lines, fix_site, split_hunks, task_id
from flawforge.inputs import plain_name
from flawforge.proto.debugging import ChatMessage, Conversation, ConversationReply, Instance
from flawforge.proto.llm import ChatMessage as RequestMessage, ChatRequest

WRITER = "deterministic"
SYSTEM = ("You are a careful Python developer. You debug by reading the failing tests' output, finding the code "
          "it points to, and making the smallest change that makes the tests pass without breaking others.")
SHOWN_TESTS = 5
LISTED_TESTS = 50  # in a task's problem file; tests.txt lists them all
OUTPUT_BYTES = 3000
# The code a user turn shows: the function the fix goes in when it is this short, else this many lines either
# side of where the fix goes.
FUNCTION_LINES = 40
AROUND_LINES = 8
# What a task folder adds to the project (its own files of these names are replaced).
PROBLEM_FILE, ENVIRONMENT_FILE = "PROBLEM.md", "environment.txt"
TESTS_FILE, RUN_TESTS_FILE = "tests.txt", "run_tests.py"


def _tests(ids: list[str]) -> str:
    shown = ", ".join(f"`{t}`" for t in ids[:SHOWN_TESTS])
    return shown + (f" and {len(ids) - SHOWN_TESTS} more" if len(ids) > SHOWN_TESTS else "")


def failing_tests(instance: Instance) -> str:
    failing, passing = len(instance.FAIL_TO_PASS), len(instance.PASS_TO_PASS)
    fail = "1 test" if failing == 1 else f"{failing} tests"
    others = {0: "No other test is listed", 1: "The other listed test passes"}.get(
        passing, f"The other {passing} listed tests pass")
    return (f"{fail} of {instance.source} {instance.version} {'fails' if failing == 1 else 'fail'}: "
            f"{_tests(instance.FAIL_TO_PASS)}. {others}. Find the bug and fix it so that every test passes.")


def problem_statement(instance: Instance) -> str:
    """The instance's bug report (statements.py), or where it has none (a record from before statements) the
    failing tests."""
    return instance.problem_statement.strip() or failing_tests(instance)


def scenario_text(instance: Instance) -> str:
    """A catalog scenario's task and its solution's outline, as the model wrote them ('' for a library's bug)."""
    if instance.scenario is None:
        return ""
    steps = "\n".join(f"{n}. {step}" for n, step in enumerate(instance.scenario.outline, 1))
    return f"{instance.scenario.problem_statement.strip()}\n\nOutline of the solution:\n{steps}\n\n"


@dataclass(frozen=True)
class Site:
    """Where the fix goes in the buggy file, and the code around it."""

    lines: list[int]     # the lines the fix changes; for a fix that only adds lines, the two it goes between
    inserts: bool        # the fix only adds lines
    near: str            # a few numbered lines around `lines`
    region: tuple[int, int]  # the lines `function` quotes
    function: str        # the function around the fix (bounded), numbered

    @property
    def where(self) -> str:
        first, last = self.lines[0], self.lines[-1]
        if self.inserts and self.lines == [first, first + 1]:
            return f"between lines {first} and {last}"
        if self.inserts and len(self.lines) == 1:
            return f"{'before' if first == 1 else 'after'} line {first}"
        return f"line {first}" if first == last else f"lines {first}-{last}"


def _numbered(text: list[str], first: int, last: int) -> str:
    return "\n".join(f"{n:4d} {text[n - 1]}" for n in range(first, last + 1))


@functools.lru_cache(maxsize=16)
def _definitions(module: str) -> tuple[tuple[int, int], ...]:
    """The lines (decorators included) of every function and class of a module; none where it does not parse. One
    buggy module is read for its conversation, its trajectory and its task: parsed once."""
    try:
        tree = parse(module)
    except SyntaxError:
        return ()
    return tuple((first_line(node), node.end_lineno)
                 for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))


def _enclosing(buggy: str, first: int, last: int) -> tuple[int, int] | None:
    """The innermost function or class whose lines hold first..last (decorators included)."""
    best = None
    for start, end in _definitions(buggy):
        if start <= first and last <= end and (best is None or start >= best[0]):
            best = (start, end)
    return best


def buggy_excerpt(instance: Instance, buggy: str, fix_patch: str | None = None) -> Site:
    """Where the fix (`fix_patch`, by default the instance's) goes in the buggy file (`fix_site`, within the file)
    and the code around it."""
    fix_patch = instance.fix_patch if fix_patch is None else fix_patch
    text = buggy.splitlines()
    lines = [n for n in fix_site(fix_patch) if 1 <= n <= len(text)] or [len(text) or 1]
    first, last = lines[0], lines[-1]
    region = _enclosing(buggy, first, last) or (1, len(text))
    if region[1] - region[0] + 1 > FUNCTION_LINES:
        region = (max(region[0], first - AROUND_LINES), min(region[1], last + AROUND_LINES))
    near = _numbered(text, max(1, first - 2), min(len(text), last + 2))
    return Site(lines, not changed_lines(fix_patch), near, region, _numbered(text, *region))


def excerpts(instance: Instance, buggy: str) -> list[tuple[Site, str]]:
    """(where, its part of the fix) for each part of the bug: one for a single bug, one per hunk of a combined
    bug's fix (its parts may lie far apart in the file)."""
    if not instance.parts:
        return [(buggy_excerpt(instance, buggy), instance.fix_patch)]
    return [(buggy_excerpt(instance, buggy, hunk), hunk) for hunk in split_hunks(instance.fix_patch)]


FOLLOW_UPS = ("Please show the fix.", "How do I fix it?", "Can you write the patch?", "What should the code be?",
              "Go ahead and fix it, please.", "Makes sense. What is the change?", "OK, show me the diff.",
              "And the fix?")


def _user_turn(instance: Instance, sites: list[Site], key: str) -> str:
    """The user's first turn: the report, the function(s) around the bug and the test output, in an order and with
    words chosen for the instance (a scenario's task always first)."""
    where = instance.path
    code = []
    for site in {s.region: s for s in sites}.values():
        intro = pick(key, "code-intro", [
            f"The code is in `{where}`; lines {site.region[0]}-{site.region[1]}:",
            f"Here is the relevant part of `{where}` (lines {site.region[0]}-{site.region[1]}):",
            f"`{where}`, lines {site.region[0]}-{site.region[1]}:",
            f"This is the code in `{where}` (lines {site.region[0]}-{site.region[1]}):"])
        code.append(f"{intro}\n```python\n{site.function}\n```")
    output = pick(key, "output-intro", ["Test output:", "The failing tests print:", "pytest says:",
                                        "Output of the failing tests:"])
    parts = ["\n\n".join(code), f"{output}\n```\n{cut(instance.failing_output, OUTPUT_BYTES)}\n```"]
    return "\n\n".join([f"{scenario_text(instance)}{problem_statement(instance)}",
                        *order(key, "user-parts", parts)])


def _diagnosis(instance: Instance, sites: list[tuple[Site, str]], failures: list[Failure], key: str) -> str:
    """The assistant's reading of the failure: what the test shows, where the code goes wrong and what is wrong
    there (each place, for a combined bug); the parts in an order chosen for the instance."""
    shows = evidence(failures[0] if failures else None, key)
    failing, passing = len(instance.FAIL_TO_PASS), len(instance.PASS_TO_PASS)
    scope = pick(key, "scope", [
        f"{counted(failing, 'test', 'fail')} ({_tests(instance.FAIL_TO_PASS)}); {counted(passing, 'other', 'pass')}, "
        f"so the rest of `{instance.path}` works.",
        f"The failures ({_tests(instance.FAIL_TO_PASS)}) all go through `{instance.qualname}`, while "
        f"{counted(passing, 'passing test', 'show')} the rest is fine.",
        f"{counted(failing, 'test', 'fail')}: {_tests(instance.FAIL_TO_PASS)}; {counted(passing, 'other', 'pass')}."])
    if len(sites) > 1:
        functions = ", ".join(f"`{name}`" for name in instance.qualname.split(", "))
        scope += " " + pick(key, "several", [
            f"There is more than one mistake: {len(sites)} places need fixing, in {functions}.",
            f"The failures do not come from one place: there are {len(sites)} separate mistakes ({functions}).",
            f"{len(sites)} separate spots are wrong, not one; they are in {functions}."])
    located = []
    for number, (site, hunk) in enumerate(sites):
        single = [f"The problem is in `{instance.qualname}`, {site.where}:",
                  f"It comes from `{instance.qualname}` in `{instance.path}`, {site.where}:",
                  f"The place to look is `{instance.qualname}`, {site.where} of `{instance.path}`:"]
        if _traced_into(instance):  # said only where the failing output shows a frame of the function
            single.append(f"Following the failure into `{instance.qualname}` leads to {site.where}:")
        location = pick(key, f"location{number}", single if len(sites) == 1 else [
            f"{site.where.capitalize()}:", f"{_at(site.where).capitalize()}:", f"Then {_at(site.where)}:",
            f"Also, {_at(site.where)}:"])
        located.append(f"{location}\n```python\n{site.near}\n```\n{what_is_wrong(hunk, f'{key}:{number}')}")
    return "\n\n".join(part for part in [*order(key, "diagnosis", [shows, scope]), *located] if part)


def _at(where: str) -> str:
    """'at line 5', 'between lines 3 and 4' (a place that starts with its own preposition keeps it)."""
    return where if where.startswith(("between ", "before ", "after ")) else f"at {where}"


def _traced_into(instance: Instance) -> bool:
    """Whether a traceback in the failing output passes through the buggy function (a frame of its module in it)."""
    function = instance.qualname.rsplit(".", 1)[-1]
    return any(frame and frame.group("name") == function and (frame.group("path") == instance.path or
                                                              frame.group("path").endswith("/" + instance.path))
               for frame in map(FRAME.match, instance.failing_output.splitlines()))


def _fix(instance: Instance, key: str) -> str:
    intro = pick(key, "fix-intro", [f"The fix, in `{instance.path}`:", "Here is the change:",
                                    f"This patch to `{instance.path}` fixes it:", "The corrected code:",
                                    "Change it like this:"])
    outcome = fix_outcome(len(instance.FAIL_TO_PASS), len(instance.PASS_TO_PASS), key)
    return f"{intro}\n```diff\n{instance.fix_patch}```\n{outcome}"


def write_conversation(instance: Instance, clean: str, *, reply: ConversationReply | None = None,
                       model: str | None = None, failures: list[Failure] = ()) -> Conversation:
    """The conversation, its assistant prose from `reply` (written by `model`, checked by the caller with
    `contradictions`) or, without one, the deterministic writer's, from the facts (`failures`: what the failing
    tests show, statements.failures_of). The user shows the function around the bug, never the whole module; the
    task's files hold the rest. The deterministic writer varies its words, the order of its parts and the
    conversation's shape (a follow-up question, or the diagnosis and fix in one turn) per instance."""
    buggy = apply_patch(clean, instance.patch)
    site = buggy_excerpt(instance, buggy)
    key = instance.instance_id
    system = ChatMessage(role="system", content=SYSTEM)
    if reply is None:
        sites = excerpts(instance, buggy)
        user = ChatMessage(role="user", content=_user_turn(instance, [s for s, _ in sites], key))
        diagnosis, fix = _diagnosis(instance, sites, list(failures), key), _fix(instance, key)
        if pick(key, "shape", ("two turns", "two turns", "one turn")) == "one turn":
            messages = [system, user, ChatMessage(role="assistant", content=f"{diagnosis}\n\n{fix}")]
        else:
            messages = [system, user, ChatMessage(role="assistant", content=diagnosis),
                        ChatMessage(role="user", content=pick(key, "follow-up", FOLLOW_UPS)),
                        ChatMessage(role="assistant", content=fix)]
    else:
        user = (f"{scenario_text(instance)}{problem_statement(instance)}\n\nThe code is in `{instance.path}`; lines "
                f"{site.region[0]}-{site.region[1]}:\n```python\n{site.function}\n```"
                f"\n\nTest output:\n```\n{cut(instance.failing_output, OUTPUT_BYTES)}\n```")
        diagnosis = (f"{reply.diagnosis.strip()}\n\nThe fix goes {site.where} of `{instance.path}`:\n```python\n"
                     f"{site.near}\n```")
        fix = f"{reply.fix_explanation.strip()}\n```diff\n{instance.fix_patch}```"
        messages = [system, ChatMessage(role="user", content=user), ChatMessage(role="assistant", content=diagnosis),
                    ChatMessage(role="user", content="Please show the fix."),
                    ChatMessage(role="assistant", content=fix)]
    return Conversation(instance_id=instance.instance_id, problem_statement=problem_statement(instance),
                        code_path=instance.path, fix_lines=site.lines, failing_output=instance.failing_output,
                        fix_patch=instance.fix_patch, messages=messages,
                        writer=WRITER if reply is None else model or "model")


def conversation_request(instance: Instance, clean: str, model: str) -> ChatRequest:
    """Asks a model for the assistant's prose of the conversation, giving it every fact it may state."""
    buggy = apply_patch(clean, instance.patch)
    site = buggy_excerpt(instance, buggy)
    facts = (f"Failing tests (they pass on the fixed code): {', '.join(instance.FAIL_TO_PASS[:SHOWN_TESTS])}"
             f"{' and more' if len(instance.FAIL_TO_PASS) > SHOWN_TESTS else ''}.\n"
             f"Tests that still pass: {len(instance.PASS_TO_PASS)}.\n"
             f"The bug is in `{instance.qualname}` of `{instance.path}`; the fix goes {site.where}:\n```python\n"
             f"{site.near}\n```\n"
             f"Test output:\n```\n{cut(instance.failing_output, OUTPUT_BYTES)}\n```\n"
             f"The fix:\n```diff\n{instance.fix_patch}```")
    task = ("Write the assistant's side of a debugging conversation about these facts, as JSON with two fields. "
            "diagnosis: how the failing tests' output leads to the bug (name the failing tests, the function and "
            "the line given, and what is wrong there). fix_explanation: what the fix changes and why the tests "
            "then pass. State no test, line, file or function other than the ones given; do not repeat the code "
            "or the diff, they are shown beside your text.")
    return ChatRequest(model=model, messages=[RequestMessage(role="system", content=SYSTEM),
                                              RequestMessage(role="user", content=f"{task}\n\n{facts}")],
                       max_tokens=1024, temperature=0.0)


TEST_STEM = re.compile(r"[\w./-]+\.py::[\w:]+")  # a test id up to its parameters, which may hold any character
LINE = re.compile(r"\blines? (\d+)(?:\s*(?:-|to|and)\s*(\d+))?", re.IGNORECASE)
PY_FILE = re.compile(r"[\w./-]+\.py\b")
CODE_NAME = re.compile(r"`([A-Za-z_][\w.]*)(?:\(\))?`")


def contradictions(reply: ConversationReply, instance: Instance, clean: str) -> list[str]:
    """What the reply states that the facts do not say: a test id that is not a failing one, a line other than
    where the fix goes (and their neighbours), a file other than the buggy one or a test file, a function of
    the buggy file named in backticks that is not the one with the bug. It must also name that function."""
    text = f"{reply.diagnosis}\n{reply.fix_explanation}"
    found = []
    failing = set(instance.FAIL_TO_PASS)
    for mention in TEST_STEM.finditer(text):
        named = text[mention.start():]
        if any(named.startswith(t) or t.startswith(mention.group()) for t in failing):
            continue
        passing = [t for t in instance.PASS_TO_PASS if named.startswith(t)]
        found.append(f"names test {max(passing, key=len)} as failing, which passes" if passing
                     else f"names unknown test {mention.group()}")
    changed = set(fix_site(instance.fix_patch))
    near = {n + d for n in changed for d in (-1, 0, 1)}
    for match in LINE.finditer(text):
        for number in filter(None, match.groups()):
            if int(number) not in near:
                found.append(f"points at line {number}, the bug is at line {min(changed)}")
    test_files = {t.split("::", 1)[0] for t in instance.FAIL_TO_PASS + instance.PASS_TO_PASS}
    known_files = {instance.path, instance.path.rsplit("/", 1)[-1], *test_files,
                   *(f.rsplit("/", 1)[-1] for f in test_files)}
    found += [f"names file {f}, the bug is in {instance.path}" for f in sorted(set(PY_FILE.findall(text)))
              if f not in known_files and not any(t.startswith(f) for t in failing)]
    function = instance.qualname.rsplit(".", 1)[-1]
    defined = set(re.findall(r"^\s*(?:async\s+)?def\s+(\w+)", clean, re.MULTILINE))
    found += [f"blames {name}, the bug is in {instance.qualname}"
              for name in sorted({m.rsplit(".", 1)[-1] for m in CODE_NAME.findall(text)})
              if name in defined and name != function and not re.search(rf"\b{name}\b", instance.failing_output)]
    if function not in text:
        found.append(f"does not name {instance.qualname}")
    return found


RUN_TESTS = '''"""Runs this task's tests and exits 0 when every test tests.txt lists passes (what else the run
reports, such as a collection error the library has without the bug too, does not count). Arguments go on to pytest
(e.g. -rA)."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOTS = {roots!r}
# pytest's arguments that run exactly the listed tests, in the order they were checked: a test file where every test
# of it is listed, else node ids.
ARGUMENTS = {arguments!r}


# A bug that allocates without bound fails its test with MemoryError, as in the sandbox that checked it, instead of
# taking the machine's memory: the tests' address space is capped (generously; a test needs far less).
MEMORY_LIMIT_BYTES = 4 << 30


def child_setup():
    """The tests' process: its address space capped, and without address-space randomisation (Linux), so that test
    ids built from hashes of objects such as None (their addresses) stay as in tests.txt."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    except (ImportError, ValueError, OSError):
        pass
    try:
        import ctypes

        personality = ctypes.CDLL(None).personality
        personality(personality(0xFFFFFFFF) | 0x0040000)
    except (OSError, AttributeError):
        pass


class Listed:
    """The pytest plugin that makes the exit status 0 only when every listed test passed (a failed subtest fails
    its test)."""

    def __init__(self, tests):
        self.tests, self.passed, self.failed = tests, set(), set()

    def pytest_runtest_logreport(self, report):
        if report.failed or report.skipped:
            self.failed.add(report.nodeid)
        elif report.when == "call":
            self.passed.add(report.nodeid)

    def pytest_sessionfinish(self, session):
        missing = [test for test in self.tests if test not in self.passed or test in self.failed]
        session.exitstatus = 1 if missing else 0
        if missing:
            print("run_tests.py: %d listed test(s) did not pass, e.g. %s" % (len(missing), missing[0]))


if __name__ == "__main__":
    if os.environ.get("RUN_TESTS_CHILD") == "1":  # pytest in this process, with the plugin
        import pytest

        with open(os.path.join(HERE, "tests.txt")) as listed:
            tests = [line.strip() for line in listed if line.strip()]
        sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-o", "addopts=", "--continue-on-collection-errors",
                              "--rootdir", HERE, *sys.argv[1:], *ARGUMENTS], plugins=[Listed(tests)]))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(os.path.join(HERE, r) for r in SOURCE_ROOTS),
               PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="{hash_seed}", RUN_TESTS_CHILD="1")
    sys.exit(subprocess.call([sys.executable, os.path.abspath(__file__), *sys.argv[1:]], cwd=HERE, env=env,
                             preexec_fn=child_setup if os.name == "posix" else None))
'''


def task_problem(instance: Instance) -> str:
    """A task's problem file: what fails and how it shows, where the code and the tests are, how to run them;
    nothing of the bug itself (its file, kind or fix)."""
    listed = "".join(f"- `{t}`\n" for t in instance.FAIL_TO_PASS[:LISTED_TESTS])
    more = len(instance.FAIL_TO_PASS) - LISTED_TESTS
    roots = ", ".join(f"`{r}/`" if r else "the task folder's top" for r in instance.source_roots)
    tests = ", ".join(f"`{t}`" for t in instance.test_paths)
    report = instance.problem_statement.strip()
    head = (f"{report}\n\n## The task\n\n{scenario_text(instance)}" if report
            else f"# {instance.source} {instance.version}: failing tests\n\n{scenario_text(instance)}")
    return (f"{head}{failing_tests(instance)} Change the library's code, not its tests.\n\n"
            f"The library's code is under {roots}; its tests are in {tests}. `python {RUN_TESTS_FILE}` runs the "
            f"tests listed in `{TESTS_FILE}` and exits 0 when all pass; it needs Python "
            f"{instance.environment.python} with the packages of `{ENVIRONMENT_FILE}` "
            f"(`pip install -r {ENVIRONMENT_FILE}`).\n\n"
            f"## Failing tests\n\n{listed}{f'- ... and {more} more (see {TESTS_FILE})' + chr(10) if more > 0 else ''}"
            f"\n## Test output\n\n```\n{instance.failing_output.rstrip()}\n```\n")


def environment_file(instance: Instance) -> str:
    """A pip requirements file of the packages the tests ran against."""
    environment = instance.environment
    return (f"# Python {environment.python}; pip install -r {ENVIRONMENT_FILE}\n"
            "# The listed tests were checked to give the same outcomes run as root and as another user, with "
            f"PYTHONHASHSEED={environment.hash_seed} and address-space randomisation "
            f"{'on' if environment.address_randomisation else 'off (run_tests.py sets both)'}.\n"
            + "".join(f"{package}\n" for package in instance.environment.packages))


def is_test_file(instance: Instance, path: str) -> bool:
    return (path in (TESTS_FILE, RUN_TESTS_FILE) or path.rsplit("/", 1)[-1] == "conftest.py"
            or any(path == t or path.startswith(t.rstrip("/") + "/") for t in instance.test_paths))


def task_files(instance: Instance, project: dict[str, bytes]) -> dict[str, bytes]:
    """A file-edit task, every path relative to the task folder: the project with the bug in it, tests.txt
    (FAIL_TO_PASS, then PASS_TO_PASS), run_tests.py (which runs them with the arguments the final gate ran), the
    problem file and environment.txt. Nothing of the answer (patch, fix, description, modifier, conversation). A name that is not a plain relative one is UnsafeName."""
    files = {plain_name(path, "project file"): data for path, data in project.items()}
    path = plain_name(instance.path, "the instance's path")
    files[path] = apply_patch(project[path].decode("utf-8"), instance.patch).encode("utf-8")
    files[TESTS_FILE] = "".join(t + "\n" for t in instance.FAIL_TO_PASS + instance.PASS_TO_PASS).encode()
    files[RUN_TESTS_FILE] = RUN_TESTS.format(roots=[r or "." for r in instance.source_roots],
                                             arguments=instance.arguments, hash_seed=instance.environment.hash_seed).encode()
    files[PROBLEM_FILE] = task_problem(instance).encode()
    files[ENVIRONMENT_FILE] = environment_file(instance).encode()
    return files


def solution_record(instance: Instance, conversation: Conversation) -> bytes:
    """solutions/<task id>.json: the answer to the task folder tasks/<task id>/ (the instance with its patch and
    fix, the conversation)."""
    record = {"task_id": task_id(instance.instance_id), "instance": instance.model_dump(mode="json"),
              "conversation": conversation.model_dump(mode="json")}
    return (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()


def deterministic_tar(entries: dict[str, bytes], read_only: frozenset[str] = frozenset()) -> bytes:
    """A tar of the entries (path -> bytes) whose bytes depend on nothing else (sorted, fixed times and owners);
    the `read_only` ones get mode 0o444, the others 0o644."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(entries):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(entries[name]), 0, 0o444 if name in read_only else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(entries[name]))
    return buffer.getvalue()
