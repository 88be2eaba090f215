"""Conversation writers (deterministic, and a model's turns checked against the facts) and the file-edit bundle.

The deterministic writer takes every statement from the instance: the failing test ids and
output are the run's, the line quoted is the one the patch changed, the fix is the reverse diff.
Nothing is invented, so the conversation cannot contradict the facts. A model writes only the
assistant's prose (ConversationReply); the excerpt and the diff are added from the instance,
and `contradictions` reads the prose for test ids, lines, files and functions that are not the
real ones: a reply with any is not used (the deterministic writer is, and the reason is kept).
"""
from __future__ import annotations

import io
import json
import re
import tarfile

from flawforge.debugging.modifiers import REGISTRY
from flawforge.debugging.patches import apply_patch, changed_lines
from flawforge.proto.debugging import SUITE_HASH_SEED, ChatMessage, Conversation, ConversationReply, Instance
from flawforge.proto.llm import ChatMessage as RequestMessage, ChatRequest

WRITER = "deterministic"
SYSTEM = ("You are a careful Python developer. You debug by reading the failing tests' output, finding the code "
          "it points to, and making the smallest change that makes the tests pass without breaking others.")
SHOWN_TESTS = 5
OUTPUT_CHARS = 3000


def _tests(ids: list[str]) -> str:
    shown = ", ".join(f"`{t}`" for t in ids[:SHOWN_TESTS])
    return shown + (f" and {len(ids) - SHOWN_TESTS} more" if len(ids) > SHOWN_TESTS else "")


def problem_statement(instance: Instance) -> str:
    return (f"{len(instance.FAIL_TO_PASS)} test(s) of {instance.source} {instance.version} fail: "
            f"{_tests(instance.FAIL_TO_PASS)}. The other {len(instance.PASS_TO_PASS)} tests pass. "
            f"Find the bug and fix it so that every test passes.")


def buggy_excerpt(instance: Instance, buggy: str) -> tuple[int, str]:
    """The first line the fix changes in the buggy file, and the lines around it."""
    lines = changed_lines(instance.fix_patch) or [1]
    first = lines[0]
    text = buggy.splitlines()
    start, end = max(1, first - 2), min(len(text), max(lines) + 2)
    return first, "\n".join(f"{n:4d} {text[n - 1]}" for n in range(start, end + 1))


def write_conversation(instance: Instance, clean: str, *, inline: bool, code_path: str | None = None,
                       reply: ConversationReply | None = None, model: str | None = None) -> Conversation:
    """The conversation, its assistant prose from `reply` (written by `model`, checked by the caller with
    `contradictions`) or, without one, the deterministic writer's."""
    buggy = apply_patch(clean, instance.patch)
    line, excerpt = buggy_excerpt(instance, buggy)
    modifier = REGISTRY.get(instance.modifier)
    kind = modifier.explanation if modifier is not None else instance.description
    where = code_path or instance.path
    user = (f"{problem_statement(instance)}\n\nThe code is in `{where}`."
            + (f"\n\n```python\n{buggy}\n```" if inline else "")
            + f"\n\nTest output:\n```\n{instance.failing_output[:OUTPUT_CHARS]}\n```")
    if reply is None:
        diagnosis = (f"The failing tests are {_tests(instance.FAIL_TO_PASS)}. They all run `{instance.qualname}` in "
                     f"`{where}`, and {len(instance.PASS_TO_PASS)} tests that pass show the rest of the module "
                     f"works. Looking at `{instance.qualname}` around line {line}:\n```python\n{excerpt}\n```\n"
                     f"This is the bug: {kind[0].lower() + kind[1:]}")
        fix = (f"The fix changes `{where}` back to what the code must do:\n```diff\n{instance.fix_patch}```\n"
               f"With it, the {len(instance.FAIL_TO_PASS)} failing test(s) pass and the other "
               f"{len(instance.PASS_TO_PASS)} still pass.")
    else:
        diagnosis = f"{reply.diagnosis.strip()}\n\nLine {line} of `{where}`:\n```python\n{excerpt}\n```"
        fix = f"{reply.fix_explanation.strip()}\n```diff\n{instance.fix_patch}```"
    messages = [ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content=user),
                ChatMessage(role="assistant", content=diagnosis),
                ChatMessage(role="user", content="Please show the fix."),
                ChatMessage(role="assistant", content=fix)]
    return Conversation(instance_id=instance.instance_id, problem_statement=problem_statement(instance),
                        code_path=where, buggy_code=buggy if inline else None, failing_output=instance.failing_output,
                        fix_patch=instance.fix_patch, messages=messages,
                        writer=WRITER if reply is None else model or "model")


def conversation_request(instance: Instance, clean: str, model: str) -> ChatRequest:
    """Asks a model for the assistant's prose of the conversation, giving it every fact it may state."""
    buggy = apply_patch(clean, instance.patch)
    line, excerpt = buggy_excerpt(instance, buggy)
    facts = (f"Failing tests (they pass on the fixed code): {', '.join(instance.FAIL_TO_PASS[:SHOWN_TESTS])}"
             f"{' and more' if len(instance.FAIL_TO_PASS) > SHOWN_TESTS else ''}.\n"
             f"Tests that still pass: {len(instance.PASS_TO_PASS)}.\n"
             f"The bug is in `{instance.qualname}` of `{instance.path}`, line {line}:\n```python\n{excerpt}\n```\n"
             f"Test output:\n```\n{instance.failing_output[:OUTPUT_CHARS]}\n```\n"
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
    the ones the fix changes (and their neighbours), a file other than the buggy one or a test file, a function of
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
    changed = set(changed_lines(instance.fix_patch)) or {1}
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


RUN_TESTS = '''"""Runs this task's tests: exits 0 when every listed test passes."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOTS = {roots!r}


def fixed_addresses():
    """Test ids built from hashes of objects such as None (their addresses) stay as in tests.txt only without
    address-space randomisation (Linux)."""
    try:
        import ctypes

        personality = ctypes.CDLL(None).personality
    except (OSError, AttributeError):
        return None
    return lambda: personality(personality(0xFFFFFFFF) | 0x0040000)


if __name__ == "__main__":
    with open(os.path.join(HERE, "tests.txt")) as listed:
        tests = [line.strip() for line in listed if line.strip()]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(os.path.join(HERE, r) for r in SOURCE_ROOTS),
               PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="{hash_seed}")
    sys.exit(subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                              "--rootdir", HERE, *tests], cwd=HERE, env=env, preexec_fn=fixed_addresses()))
'''


def task_files(instance: Instance, project: dict[str, bytes], conversation: Conversation) -> dict[str, bytes]:
    """A file-edit task: the project with the bug in it, tests.txt (FAIL_TO_PASS, then PASS_TO_PASS),
    run_tests.py and conversation.json; every path relative to the task folder."""
    files = dict(project)
    files[instance.path] = apply_patch(project[instance.path].decode("utf-8"), instance.patch).encode("utf-8")
    files["tests.txt"] = "".join(t + "\n" for t in instance.FAIL_TO_PASS + instance.PASS_TO_PASS).encode()
    files["run_tests.py"] = RUN_TESTS.format(roots=[r or "." for r in instance.source_roots],
                                             hash_seed=SUITE_HASH_SEED).encode()
    record = {"instance": instance.model_dump(mode="json"), "conversation": conversation.model_dump(mode="json")}
    files["conversation.json"] = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()
    return files


def deterministic_tar(entries: dict[str, bytes]) -> bytes:
    """A tar of the entries (path -> bytes) whose bytes depend on nothing else (sorted, fixed times and owners)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(entries):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(entries[name]), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(entries[name]))
    return buffer.getvalue()
