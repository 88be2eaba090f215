"""The deterministic conversation writer and the file-edit task bundle, from an instance's facts alone.

Every statement is taken from the instance: the failing test ids and output are the run's,
the line quoted is the one the patch changed, the fix is the reverse diff. Nothing is
invented, so the conversation cannot contradict the facts.
"""
from __future__ import annotations

import io
import json
import tarfile

from flawforge.debugging.modifiers import REGISTRY
from flawforge.debugging.patches import apply_patch, changed_lines
from flawforge.proto.debugging import SUITE_HASH_SEED, ChatMessage, Conversation, Instance

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


def write_conversation(instance: Instance, clean: str, *, inline: bool, code_path: str | None = None) -> Conversation:
    buggy = apply_patch(clean, instance.patch)
    line, excerpt = buggy_excerpt(instance, buggy)
    modifier = REGISTRY.get(instance.modifier)
    kind = modifier.explanation if modifier is not None else instance.description
    output = instance.failing_output[:OUTPUT_CHARS]
    where = code_path or instance.path
    user = (f"{problem_statement(instance)}\n\nThe code is in `{where}`."
            + (f"\n\n```python\n{buggy}\n```" if inline else "")
            + f"\n\nTest output:\n```\n{output}\n```")
    diagnosis = (f"The failing tests are {_tests(instance.FAIL_TO_PASS)}. They all run `{instance.qualname}` in "
                 f"`{where}`, and {len(instance.PASS_TO_PASS)} tests that pass show the rest of the module works. "
                 f"Looking at `{instance.qualname}` around line {line}:\n```python\n{excerpt}\n```\n"
                 f"This is the bug: {kind[0].lower() + kind[1:]}")
    fix = (f"The fix changes `{where}` back to what the code must do:\n```diff\n{instance.fix_patch}```\n"
           f"With it, the {len(instance.FAIL_TO_PASS)} failing test(s) pass and the other "
           f"{len(instance.PASS_TO_PASS)} still pass.")
    messages = [ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content=user),
                ChatMessage(role="assistant", content=diagnosis),
                ChatMessage(role="user", content="Please show the fix."),
                ChatMessage(role="assistant", content=fix)]
    return Conversation(instance_id=instance.instance_id, problem_statement=problem_statement(instance),
                        code_path=where, buggy_code=buggy if inline else None, failing_output=instance.failing_output,
                        fix_patch=instance.fix_patch, messages=messages, writer=WRITER)


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
