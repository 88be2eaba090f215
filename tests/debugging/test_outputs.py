"""What the debug-conversations job hands out, on a small library run for real in the sandbox: task folders an agent
can work in without the answer, solutions beside them, conversations that point at where the fix goes, failing
output a reader can use, no path of this machine anywhere, standard exports; and names from data that never leave
their folder."""
from __future__ import annotations

import io
import json
import re
import stat
import sys
import tarfile
from pathlib import Path

import pytest

from flawforge.debugging.patches import apply_patch, changed_lines
from flawforge.proto.debugging import Conversation, Instance
from tests.debugging.test_suite_unit import archive as sdist

REPO = Path(__file__).resolve().parents[2]
MIT = ("MIT License\n\nPermission is hereby granted, free of charge, to any person obtaining a copy of this "
       "software, to deal in the Software without restriction.\n")
CORE = '''import json


def clamp(value, low, high):
    """value, kept between low and high."""
    if value < low:
        return low
    if value > high:
        return high
    return value


def settings(text):
    """Settings from JSON text, with defaults for what it leaves out."""
    found = json.loads(text)
    merged = {"width": 1, "height": 1}
    merged.update(found)
    return merged


def total(values):
    result = 0
    for value in values:
        result += value
    return result


def area(width, height):
    if width < 0 or height < 0:
        raise ValueError("negative size")
    size = width * height
    return size
'''
TESTS = '''import pytest

from shapes.core import area, clamp, settings, total


def test_clamp_low():
    assert clamp(-5, 0, 10) == 0


def test_clamp_high():
    assert clamp(50, 0, 10) == 10


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_settings_defaults():
    assert settings('{"width": 3}') == {"width": 3, "height": 1}


def test_settings_bad_json():
    with pytest.raises(ValueError):
        settings("{")


def test_total():
    assert total([1, 2, 3]) == 6


def test_total_empty():
    assert total([]) == 0


def test_area():
    assert area(2, 3) == 6


def test_area_negative():
    with pytest.raises(ValueError):
        area(-1, 2)
'''
PROJECT = {"shapes-1.0/shapes/__init__.py": "", "shapes-1.0/shapes/core.py": CORE,
           "shapes-1.0/tests/test_core.py": TESTS, "shapes-1.0/LICENSE": MIT}
MODIFIERS = ["ctrl_invert_if", "op_swap", "remove_assign", "remove_cond", "remove_loop"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """The job on the small library, its tasks and solutions unpacked as the CLI does."""
    from flawforge.cli.debugging import unpack_tasks
    from flawforge.cli.jobs_client import run_embedded
    from flawforge.settings import Settings

    root = tmp_path_factory.mktemp("outputs")
    (root / "libraries").mkdir()
    (root / "libraries" / "shapes-1.0.tar.gz").write_bytes(sdist(PROJECT))
    out = root / "out"
    run_embedded("debug-conversations", {"libraries": str(root / "libraries"), "per_library": 12, "seed": 1,
                                         "modifiers": MODIFIERS}, out,
                 Settings(bus="memory", blob_backend="local", blob_dir=str(root / "blobs")))
    unpack_tasks(out)
    return out


def instances_of(out: Path) -> list[Instance]:
    return [Instance.model_validate_json(line) for line in (out / "instances.jsonl").read_text().splitlines()]


def solutions_of(out: Path) -> dict[str, dict]:
    return {path.stem: json.loads(path.read_text()) for path in sorted((out / "solutions").iterdir())}


@pytest.mark.slow
def test_no_output_holds_a_path_of_this_machine(run, tmp_path_factory):
    needles = {str(REPO), sys.prefix, sys.base_prefix, "/root", str(Path.home()), "/tmp/",
               str(tmp_path_factory.getbasetemp())}
    files = [p for p in run.rglob("*") if p.is_file() and ".blobs" not in p.parts]
    assert {"instances.jsonl", "conversations.jsonl", "rejects.jsonl", "summary.json"} <= {p.name for p in files}
    assert any("tasks" in p.parts for p in files) and any("solutions" in p.parts for p in files)
    assert instances_of(run)
    for path in files:
        text = path.read_text(errors="replace")
        found = [needle for needle in needles if needle in text]
        assert not found, (path.relative_to(run), found)
    for instance in instances_of(run):  # the failing output is the exception first, without pytest's frames
        assert "_pytest" not in instance.failing_output and "pluggy" not in instance.failing_output
        assert re.match(r"\S+: (failed|error)\n(?!Traceback)\S", instance.failing_output), instance.failing_output


@pytest.mark.slow
def test_task_folders_hold_the_bug_and_the_tests_but_not_the_answer(run):
    solutions = solutions_of(run)
    assert sorted(solutions) == sorted(p.name for p in (run / "tasks").iterdir())
    for task_id, record in solutions.items():
        instance, folder = Instance.model_validate(record["instance"]), run / "tasks" / task_id
        assert instance.modifier not in task_id and Conversation.model_validate(record["conversation"])
        files = {str(p.relative_to(folder)): p for p in folder.rglob("*") if p.is_file()}
        assert {"PROBLEM.md", "environment.txt", "tests.txt", "run_tests.py", instance.path} <= set(files)
        assert (folder / instance.path).read_text() == apply_patch(CORE, instance.patch)
        environment = (folder / "environment.txt").read_text().splitlines()
        assert [line for line in environment if not line.startswith("#")] == instance.environment.packages
        # how the ids were checked: a plain rerun needs the same hash seed and no address-space randomisation
        assert (instance.environment.hash_seed, instance.environment.address_randomisation) == (0, False)
        assert any("PYTHONHASHSEED=0" in line and "randomisation off" in line for line in environment)
        for name, path in files.items():
            text = path.read_text()
            for secret in (instance.fix_patch, instance.patch, instance.description, instance.modifier,
                           instance.instance_id, '"conversation"'):
                assert secret not in text and secret not in name, (name, secret)
        assert instance.FAIL_TO_PASS[0] in (folder / "PROBLEM.md").read_text()
        for name in ("tests/test_core.py", "tests.txt", "run_tests.py"):
            assert stat.S_IMODE(files[name].stat().st_mode) == 0o444, name
        assert files[instance.path].stat().st_mode & stat.S_IWUSR


@pytest.mark.slow
def test_each_task_fails_with_the_bug_and_passes_with_the_fix_from_its_solution(run, tmp_path):
    from flawforge.cli.debugging import validate_conversation

    solutions = sorted((run / "solutions").iterdir())
    for solution in solutions:
        report = validate_conversation(solution, None, tmp_path / "dump")
        assert report["reproduced"], report
    assert len(list((tmp_path / "dump").iterdir())) == len(solutions)


@pytest.mark.slow
def test_conversations_point_at_where_the_fix_goes(run):
    """A fix that only adds lines (a removed assignment, loop or guard) names the two lines it goes between, the
    ones around its hunk's insertion in the buggy file; no conversation says line 1 unless the fix is there; the
    user shows the function, not the module."""
    conversations = {c.instance_id: c for c in (Conversation.model_validate_json(line) for line in
                                                (run / "conversations.jsonl").read_text().splitlines())}
    inserted = 0
    for instance in instances_of(run):
        conversation = conversations[instance.instance_id]
        text = "\n".join(m.content for m in conversation.messages)
        buggy = apply_patch(CORE, instance.patch).splitlines()
        if not changed_lines(instance.fix_patch):
            inserted += 1
            hunk = instance.fix_patch.splitlines()
            header = next(n for n, row in enumerate(hunk) if row.startswith("@@"))
            first_added = next(n for n in range(header + 1, len(hunk)) if hunk[n].startswith("+"))
            before = hunk[first_added - 1][1:]  # the context line the insertion follows
            line = int(re.match(r"@@ -(\d+)", hunk[header]).group(1)) + first_added - header - 2
            assert buggy[line - 1] == before
            assert conversation.fix_lines == [line, line + 1]
            assert f"between lines {line} and {line + 1}" in conversation.messages[2].content
        else:
            assert conversation.fix_lines == changed_lines(instance.fix_patch)
        if 1 not in conversation.fix_lines:
            assert not re.search(r"\bline 1\b", text), instance.instance_id
        assert "\n".join(buggy) not in conversation.messages[1].content
        assert f"def {instance.qualname.rsplit('.', 1)[-1]}(" in conversation.messages[1].content
    assert inserted, "no insert-only fix among the instances"


@pytest.mark.slow
def test_counts_agree_with_their_words_in_every_text(run):
    """'1 test fails', '3 tests fail', never '1 test(s)' or '1 others'; 'between lines 3 and 4', never 'at between'."""
    from flawforge.debugging.conversation import write_conversation
    from flawforge.debugging.explain import fix_outcome

    texts = [line for line in (run / "conversations.jsonl").read_text().splitlines()]
    texts += [i.problem_statement for i in instances_of(run)]
    for instance in instances_of(run):  # one failing test and one other, in every phrasing the writer picks from
        for variant in range(12):
            copy = instance.model_copy(update={"FAIL_TO_PASS": instance.FAIL_TO_PASS[:1],
                                               "PASS_TO_PASS": instance.PASS_TO_PASS[:1],
                                               "instance_id": f"{instance.instance_id}-{variant}"})
            texts += [m.content for m in write_conversation(copy, CORE).messages]
    texts += [fix_outcome(count, count, str(key)) for count in (1, 2) for key in range(12)]
    wrong = re.compile(r"\(s\)|\b1 (?:tests|others|failing tests|passing tests)\b|\b[Aa]t (?:between|before|after) ")
    assert not [match.group() for text in texts for match in [wrong.search(text)] if match]


@pytest.mark.slow
def test_a_conversation_follows_the_failure_into_the_function_only_where_a_traceback_does(run):
    """'Following the failure into f' is said only where the failing output has a frame of f; an assertion on its
    return value alone (no frame of it) is described otherwise."""
    from flawforge.debugging.conversation import write_conversation

    said = {}
    for instance in instances_of(run):
        if ", " in instance.qualname:  # a combined bug's places are named otherwise
            continue
        frame = f'  File "{instance.path}", line 3, in {instance.qualname.rsplit(".", 1)[-1]}\n    return x\n'
        for traced in (False, True):
            output = ("tests/test_core.py::test_x: failed\nAssertionError: assert 1 == 2\nTraceback, most recent call "
                      'last:\n  File "tests/test_core.py", line 9, in test_x\n    assert f() == 2\n'
                      + (frame if traced else ""))
            for variant in range(8):  # other ids: the writer picks its words by the instance's id
                copy = instance.model_copy(update={"failing_output": output,
                                                   "instance_id": f"{instance.instance_id}-{variant}"})
                text = "\n".join(m.content for m in write_conversation(copy, CORE).messages)
                said[traced] = said.get(traced, 0) + ("Following the failure into" in text)
    assert said[False] == 0 and said[True] > 0, said


@pytest.mark.slow
def test_swe_bench_and_hugging_face_exports(run, tmp_path):
    from flawforge.cli.debugging import export_debug

    instances = {i.instance_id: i for i in instances_of(run)}
    export_debug(run, "swe-bench", tmp_path / "swe")
    rows = [json.loads(line) for line in (tmp_path / "swe" / "swe-bench.jsonl").read_text().splitlines()]
    assert sorted(r["instance_id"] for r in rows) == sorted(instances)
    for row in rows:
        instance = instances[row["instance_id"]]
        assert row["patch"] == instance.fix_patch and row["test_patch"] == "" and row["repo"] == "shapes"
        assert json.loads(row["FAIL_TO_PASS"]) == instance.FAIL_TO_PASS
        assert json.loads(row["PASS_TO_PASS"]) == instance.PASS_TO_PASS
        assert row["environment"]["packages"] == instance.environment.packages
        assert instance.FAIL_TO_PASS[0] in row["problem_statement"] and instance.fix_patch not in row["problem_statement"]
    export_debug(run, "hf", tmp_path / "hf")
    card = (tmp_path / "hf" / "README.md").read_text()
    assert card.startswith("---\nconfigs:") and f"{len(instances)} instances from 1 sources" in card
    assert "| shapes | 1.0 | " in card and "| MIT |" in card
    try:
        import datasets
    except ImportError:
        import pyarrow.parquet

        loaded = pyarrow.parquet.read_table(next((tmp_path / "hf" / "data").glob("*.parquet"))).to_pylist()
    else:
        loaded = list(datasets.load_dataset("parquet", data_dir=str(tmp_path / "hf" / "data"), split="train"))
    assert sorted(r["instance_id"] for r in loaded) == sorted(instances)
    for row in loaded:
        instance = instances[row["instance_id"]]
        assert row["fix_patch"] == instance.fix_patch and list(row["FAIL_TO_PASS"]) == instance.FAIL_TO_PASS
        assert row["licence"] == "MIT" and row["messages"][0]["role"] == "system"


def test_failing_output_reads_from_the_exception_and_the_librarys_frames():
    """Real pytest messages from the suite unit: the exception line first, the test's and the library's frames,
    the standard library's as <stdlib>/..., none of pytest's or pluggy's, no path of this machine; a deep
    recursion is bounded and a long message is cut, saying so."""
    from flawforge.debugging.failures import readable_failure
    from flawforge.debugging.generate import SUITE_LIMITS
    from flawforge.sandbox.suites import suite_sandbox

    files = {"demo-1.0/pkg/calc.py": ("import json\n\n\ndef parse(text):\n    return json.loads(text)\n\n\n"
                                      "def deep(n):\n    return deep(n - 1) if n else 1 / 0\n\n\n"
                                      "def long():\n    raise ValueError('x' * 9000)\n"),
             "demo-1.0/tests/test_calc.py": ("from pkg.calc import deep, long, parse\n\n\ndef test_parse():\n"
                                             "    parse('{')\n\n\ndef test_deep():\n    deep(60)\n\n\n"
                                             "def test_long():\n    long()\n")}
    run = suite_sandbox().run_suite(sdist(files), args=["tests"], limits=SUITE_LIMITS)
    messages = {t.name.rsplit("::", 1)[1]: t.message for t in run.tests}
    assert set(messages) == {"test_parse", "test_deep", "test_long"} and "_pytest" in messages["test_parse"]
    parse = readable_failure(messages["test_parse"])
    assert parse.startswith("json.decoder.JSONDecodeError: Expecting property name")
    assert '  File "tests/test_calc.py", line 5, in test_parse' in parse
    assert '  File "pkg/calc.py", line 5, in parse' in parse and '  File "<stdlib>/json/decoder.py"' in parse
    for shown in map(readable_failure, messages.values()):
        assert "_pytest" not in shown and "pluggy" not in shown and "/tmp/" not in shown
        assert str(REPO) not in shown and sys.prefix not in shown and len(shown.encode()) <= 3 * 1024 + 100
    deep = readable_failure(messages["test_deep"])
    assert deep.startswith("ZeroDivisionError") and ("frames left out" in deep or "Previous line repeated" in deep)
    assert readable_failure(messages["test_long"]).endswith("bytes of output cut)")


def test_failing_output_leaves_out_unittests_and_the_sandboxs_frames_and_escapes_control_characters():
    """unittest's runner and assertion frames, and the sandbox's import guard, are no frames of the test or the
    library; a NUL an exception carries is written escaped, so the output stays a text file."""
    from flawforge.debugging.failures import readable_failure
    from flawforge.debugging.generate import SUITE_LIMITS
    from flawforge.sandbox.suites import suite_sandbox

    files = {"demo-1.0/pkg/calc.py": "def double(x):\n    return x * 3\n\n\ndef bad():\n    raise ValueError('a\\x00b')\n",
             "demo-1.0/tests/test_calc.py": ("import unittest\n\nfrom pkg.calc import bad, double\n\n\n"
                                             "class DoubleTest(unittest.TestCase):\n    def test_double(self):\n"
                                             "        self.assertEqual(double(2), 4)\n\n\n"
                                             "def test_bad():\n    bad()\n\n\ndef test_denied():\n"
                                             "    import _tkinter\n")}
    run = suite_sandbox().run_suite(sdist(files), args=["tests"], limits=SUITE_LIMITS)
    messages = {t.name.rsplit("::", 1)[1]: t.message for t in run.tests}
    assert "unittest/case.py" in messages["test_double"] and "\x00" in messages["test_bad"]
    assert "<flawforge.sandbox" in messages["test_denied"]
    double = readable_failure(messages["test_double"])
    assert double.startswith("AssertionError: 6 != 4") and "unittest" not in double
    assert '  File "tests/test_calc.py", line 8, in test_double' in double
    bad = readable_failure(messages["test_bad"])
    assert "\x00" not in bad and bad.startswith("ValueError: a\\x00b")
    denied = readable_failure(messages["test_denied"])
    assert "<flawforge" not in denied and '  File "tests/test_calc.py", line 16, in test_denied' in denied


def test_names_from_data_never_leave_their_folder(tmp_path):
    """A solution naming a task, a path or an instance id outside its folder, and task archives with a climbing or
    a linked member: one clear error each, nothing written outside, OUT as it was."""
    from flawforge.cli.debugging import unpack_tasks, validate_conversation
    from flawforge.errors import FlawforgeError
    from flawforge.inputs import UnsafeName, path_within, plain_name
    from flawforge.proto.debugging import Environment

    for bad in ("", "/etc/passwd", "../x", "a/../../x", "a\\b", "a\x00b", "./a", "a//b"):
        with pytest.raises(UnsafeName):
            plain_name(bad)
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "out").symlink_to("/etc")
    with pytest.raises(UnsafeName, match="leads out"):
        path_within(tmp_path / "folder", "out/hostname")
    assert path_within(tmp_path / "folder", "a/b.py") == (tmp_path / "folder" / "a" / "b.py").resolve()

    out = tmp_path / "out"
    (out / "solutions").mkdir(parents=True)
    (out / "tasks" / "t").mkdir(parents=True)
    (out / "tasks" / "t" / "m.py").write_text("x = 1\n")
    instance = Instance(instance_id="x", source="s", version="1", modifier="op_swap", path="m.py", qualname="f",
                        description="d", patch="", fix_patch="", FAIL_TO_PASS=["t::a"], PASS_TO_PASS=["t::b"],
                        failing_output="", source_roots=[""], test_paths=["tests"],
                        environment=Environment(python="3.11", packages=[]))
    cases = [({"task_id": "../../../x"}, {}, "task id"),
             ({"task_id": "t"}, {"path": "../../../../../etc/hostname"}, "path"),
             ({"task_id": "t"}, {"instance_id": "../../../x"}, "instance id")]
    for record, change, named in cases:
        solution = out / "solutions" / "s.json"
        solution.write_text(json.dumps({**record, "instance": instance.model_copy(update=change).model_dump(),
                                        "conversation": {}}))
        with pytest.raises(FlawforgeError, match=f"{named} .* is not a plain"):
            validate_conversation(solution, None, tmp_path / "dump")
    assert not (tmp_path / "dump").exists() and not (tmp_path / "x").exists()

    def tar_of(*members: tarfile.TarInfo) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for member in members:
                tar.addfile(member, io.BytesIO(b"replaced\n") if member.isfile() else None)
        return buffer.getvalue()

    def member(name: str, kind=tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.size = kind, target, len(b"replaced\n") if kind == tarfile.REGTYPE else 0
        return info

    (out / "instances.jsonl").write_text("kept\n")
    for members, message in (([member("tasks/t/m.py"), member("tasks/t/../../instances.jsonl")], "not a plain"),
                             ([member("tasks/t/link", tarfile.SYMTYPE, "/etc/hostname")], "not a regular file"),
                             ([member("solutions/../../../escape.json")], "not a plain"),
                             ([member("elsewhere/t/m.py")], "is not under tasks/")):
        (out / "tasks.tar").write_bytes(tar_of(*members))
        with pytest.raises(FlawforgeError, match=message):
            unpack_tasks(out)
        assert (out / "instances.jsonl").read_text() == "kept\n" and (out / "tasks" / "t" / "m.py").read_text() == \
            "x = 1\n"
        assert not (tmp_path / "escape.json").exists() and not list(out.glob(".tasks-*"))


def test_a_tasks_run_tests_caps_the_memory_its_tests_take(tmp_path):
    """A bug that allocates without bound fails its test with MemoryError under run_tests.py, as in the sandbox,
    instead of taking the machine's memory (calloc'ed pages are lazy: without the cap, this test would pass)."""
    import subprocess

    from flawforge.debugging.conversation import RUN_TESTS

    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_grow.py").write_text("def test_grow():\n    assert len(bytearray(8 << 30)) > 0\n")
    (tmp_path / "tests.txt").write_text("tests/test_grow.py::test_grow\n")
    (tmp_path / "run_tests.py").write_text(RUN_TESTS.format(roots=["."], arguments=["tests/test_grow.py"], hash_seed=0))
    done = subprocess.run([sys.executable, "run_tests.py", "-rA"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and "MemoryError" in done.stdout, done.stdout[-2000:]
