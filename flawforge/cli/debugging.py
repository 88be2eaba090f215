"""`flawforge run debug-conversations`, and what `flawforge validate-conversation` and `flawforge export debug`
do."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Optional

import typer

from flawforge.cli.run import JobOptions, comma_list, field_option, job_command, run_pipeline
from flawforge.errors import FlawforgeError
from flawforge.pipelines.debug_conversations import DebugConversationsParams as Params


# A job's task folders and their solutions are one artifact file each; the CLI unpacks each into its folder.
UNPACKED = {"tasks.tar": "tasks", "solutions.tar": "solutions"}
MAX_SOLUTION_BYTES = 64 << 20


def _member_path(archive: Path, member: tarfile.TarInfo, top: str) -> str | None:
    """Where `member` goes below OUT/`top`: tasks/<id>/<path> or solutions/<id>.json, plain names only; None for
    a folder; FlawforgeError for anything else (a link, a device, a name out of place)."""
    from flawforge.inputs import plain_name

    name = plain_name(member.name.rstrip("/") if member.isdir() else member.name, f"{archive.name} member")
    parts = name.split("/")
    if member.isdir() and parts[0] == top:
        return None
    if not member.isfile():
        raise FlawforgeError(f"{archive}: member {name!r} is not a regular file")
    if parts[0] != top or (top == "tasks" and len(parts) < 3) or (
            top == "solutions" and (len(parts) != 2 or not name.endswith(".json"))):
        raise FlawforgeError(f"{archive}: member {name!r} is not under {top}/<id>"
                             f"{'/' if top == 'tasks' else '.json'}")
    return "/".join(parts[1:])


def unpack_tasks(out: Path) -> None:
    """OUT/tasks.tar and OUT/solutions.tar (job artifacts are one file each) become OUT/tasks/<task id>/... and
    OUT/solutions/<task id>.json. Every member is checked first, and each folder is written beside OUT and put in
    place whole: a bad archive leaves a one-line error and the earlier folder, never a file outside OUT."""
    import os
    import shutil
    import tempfile

    from flawforge.inputs import path_within

    for name, top in UNPACKED.items():
        archive = out / name
        if not archive.exists():
            continue
        try:
            with tarfile.open(archive) as tar:
                members = [(member, _member_path(archive, member, top)) for member in tar.getmembers()]
                staging = Path(tempfile.mkdtemp(prefix=f".{top}-", dir=out))
                try:
                    for member, path in members:
                        if path is None:
                            continue
                        target = path_within(staging, path, f"{archive.name} member")
                        target.parent.mkdir(parents=True, exist_ok=True)
                        mode = 0o444 if not member.mode & 0o222 else 0o644
                        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
                        with os.fdopen(fd, "wb") as written, tar.extractfile(member) as data:
                            shutil.copyfileobj(data, written)
                    if (out / top).exists():
                        shutil.rmtree(out / top)
                    staging.rename(out / top)
                finally:
                    shutil.rmtree(staging, ignore_errors=True)
        except (tarfile.TarError, OSError) as exc:
            raise FlawforgeError(f"cannot unpack {archive}: {exc}") from None
        archive.unlink()


def no_instance(out: Path, source: str) -> Optional[str]:
    """Why a run on `source`s ('library' or 'scenario') that succeeded emitted no instance (where it could use
    none of them, each one's reason), or None when it emitted some."""
    summary = json.loads((out / "summary.json").read_text())
    if summary["valid"]:
        return None
    if not summary["libraries"]:  # a catalog run: a libraries run without archives fails before it starts
        return "every catalog entry is claimed already, by earlier runs on the same blob store (--state)"
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines() if line.strip()]
    unusable = [r["detail"] for r in rejects if r["reason"] == "unusable_library"]
    if len(unusable) == summary["libraries"]:
        return f"nothing to inject bugs into: {'; '.join(unusable)}"
    reasons = ", ".join(f"{reason} ({n})" for reason, n in summary["rejects_by_reason"].items())
    return f"no valid bug in {summary['libraries']} {source}(s): {reasons} (details in rejects.jsonl)"


@job_command("debug-conversations")
def run_debug_conversations(
        libraries: Optional[Path] = field_option(Params, "libraries", "--libraries"),
        per_library: int = field_option(Params, "per_library", "--per-library"),
        tests_per_candidate: int = field_option(Params, "tests_per_candidate", "--tests-per-candidate"),
        modifiers: str = field_option(Params, "modifiers", syntax="Comma-separated."),
        catalog: Optional[str] = field_option(Params, "catalog", "--catalog"),
        count: int = field_option(Params, "count", "--count"),
        model: Optional[str] = field_option(Params, "model", "--model"),
        trajectories: bool = field_option(Params, "trajectories", "--trajectories/--no-trajectories"),
        retries: int = field_option(Params, "retries", "--retries"),
        seed: int = field_option(Params, "seed"),
        solver: Optional[str] = field_option(Params, "solver", "--solver"),
        solver_tries: int = field_option(Params, "solver_tries", "--solver-tries"),
        solver_turns: int = field_option(Params, "solver_turns", "--solver-turns"),
        state: Optional[Path] = typer.Option(None, "--state", help="Embedded: a folder kept across runs for the blob "
                                                                   "store (catalog claims, cached model replies), so "
                                                                   "runs sharing it never take the same entry; "
                                                                   "default OUT/.blobs."), *,
        job: JobOptions) -> None:
    """Bugs proven per test in real libraries (--libraries) or model-written scenarios (--catalog):
    OUT/instances.jsonl, conversations.jsonl, trajectories.jsonl, tasks/, rejects.jsonl, summary.json.

    Embedded, with --model or --solver and no FLAWFORGE_LLM_PROVIDERS, the local inference-server is started in this
    process.
    A run that emits no instance exits 1 saying why."""
    params = {"libraries": str(libraries.resolve()) if libraries else None, "per_library": per_library,
              "tests_per_candidate": tests_per_candidate, "modifiers": comma_list(modifiers),
              "catalog": catalog if catalog in (None, "default") else str(Path(catalog).resolve()), "count": count,
              "model": model, "trajectories": trajectories, "retries": retries, "seed": seed, "solver": solver,
              "solver_tries": solver_tries, "solver_turns": solver_turns}
    source = "scenario" if catalog else "library"
    try:
        run_pipeline("debug-conversations", params, job, nothing_done=lambda out: no_instance(out, source),
                     local_model="" if model or solver else None, state=state.resolve() if state else None)
    finally:
        unpack_tasks(job.out)
    typer.echo((job.out / "summary.json").read_text())


def _task_archive(folder: Path) -> bytes:
    """The task folder's regular files as a tar.gz (links are left out: the sandbox gets only what the folder
    holds)."""
    import io

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.is_symlink():
                tar.add(path, arcname=str(path.relative_to(folder)))
    return buffer.getvalue()


def read_solution(file: Path) -> tuple[dict, "Instance"]:
    """A solution file's record and its instance; FlawforgeError naming the file otherwise."""
    from flawforge.inputs import InputRefused, read_input
    from flawforge.proto.debugging import Instance

    try:
        record = json.loads(read_input(file, MAX_SOLUTION_BYTES).decode("utf-8"))
        return record, Instance.model_validate(record["instance"])
    except InputRefused as exc:
        raise FlawforgeError(f"cannot read {file}: {exc}") from None
    except OSError as exc:
        raise FlawforgeError(f"cannot read {file}: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise FlawforgeError(f"{file} is not a task's solution (solutions/<task id>.json, with 'instance' and "
                             f"'conversation'): {str(exc).splitlines()[0]}") from None


def validate_conversation(file: Path, task: Optional[Path], dump_dir: Optional[Path]) -> dict:
    """Re-runs a file-edit task's tests in the sandbox, with the bug and with the fix: `file` is the task's solution
    (OUT/solutions/<task id>.json), `task` its folder (default: OUT/tasks/<task id>, beside the solutions folder)."""
    from flawforge.debugging.generate import SUITE_LIMITS
    from flawforge.debugging.patches import apply_patch, task_id
    from flawforge.debugging.revalidate import revalidate
    from flawforge.inputs import path_within
    from flawforge.debugging.environments import EnvironmentBuilder
    from flawforge.sandbox.suites import suite_sandbox

    record, instance = read_solution(file)
    if task is None:
        named = record.get("task_id", task_id(instance.instance_id))
        task = path_within(file.parent.parent / "tasks", named, f"{file}: task id", single=True)
    if not task.is_dir():
        raise FlawforgeError(f"{file}: no task folder {task}")
    buggy_file = path_within(task, instance.path, f"{file}: path")
    if not buggy_file.is_file():
        raise FlawforgeError(f"{file}: the task folder {task} has no {instance.path}")
    buggy = buggy_file.read_text(encoding="utf-8")
    try:
        fixed = apply_patch(buggy, instance.fix_patch)
    except ValueError as exc:
        raise FlawforgeError(f"{file}: the fix does not apply to {instance.path}: {exc}") from None
    target = path_within(dump_dir, instance.instance_id, f"{file}: instance id", single=True) if dump_dir else None
    archive = _task_archive(task)
    tests = instance.arguments
    sandbox = suite_sandbox()
    environment = EnvironmentBuilder.from_settings().install(instance.environment)  # the recorded one, as built
    buggy_run = sandbox.run_suite(archive, source_roots=instance.source_roots, args=tests, limits=SUITE_LIMITS,
                                  environment=environment)
    fixed_run = sandbox.run_suite(archive, {instance.path: fixed}, source_roots=instance.source_roots, args=tests,
                                  limits=SUITE_LIMITS, environment=environment)
    if target is not None:
        target.mkdir(parents=True, exist_ok=True)
        name = buggy_file.name
        (target / f"buggy_{name}").write_text(buggy)
        (target / f"clean_{name}").write_text(fixed)
        (target / "fix.diff").write_text(instance.fix_patch)
        (target / "tests.txt").write_text("".join(t + "\n" for t in tests))
    return revalidate(instance, buggy_run, fixed_run).as_dict()


EXPORT_FORMATS = ("swe-bench", "hf")
HF_DATA = "data/train-00000-of-00001.parquet"


def _licence_of(task: Path) -> str:
    from flawforge.debugging.export import LICENCE_FILES, licence_name
    from flawforge.inputs import read_input

    found = sorted(p for p in task.iterdir() if LICENCE_FILES.match(p.name) and p.is_file() and not p.is_symlink()) \
        if task.is_dir() else []
    return licence_name(read_input(found[0], 1 << 20).decode("utf-8", "replace") if found else None)


def export_debug(run: Path, fmt: str, dest: Path) -> dict:
    """A debug-conversations run's folder (instances.jsonl, conversations.jsonl, tasks/) as a SWE-bench-style
    JSONL file (`dest`/swe-bench.jsonl) or a Hugging Face dataset folder (`dest`: parquet and README.md)."""
    from flawforge.debugging.export import dataset_card, hf_row, swe_bench_row
    from flawforge.debugging.patches import task_id
    from flawforge.inputs import InputRefused, path_within, read_input
    from flawforge.proto.debugging import Conversation, Instance

    if fmt not in EXPORT_FORMATS:
        raise FlawforgeError(f"--format {fmt!r}: choose one of {', '.join(EXPORT_FORMATS)}")

    def records(name: str, model) -> list:
        try:
            text = read_input(run / name).decode("utf-8")
        except (InputRefused, OSError) as exc:
            raise FlawforgeError(f"cannot read {run / name}: {getattr(exc, 'strerror', None) or exc}") from None
        try:
            return [model.model_validate_json(line) for line in text.splitlines() if line.strip()]
        except ValueError as exc:
            raise FlawforgeError(f"{run / name} is not a debug-conversations output: "
                                 f"{str(exc).splitlines()[0]}") from None

    instances = records("instances.jsonl", Instance)
    if fmt == "swe-bench":
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "swe-bench.jsonl").write_text("".join(json.dumps(swe_bench_row(i), ensure_ascii=False) + "\n"
                                                     for i in instances), encoding="utf-8")
        return {"format": fmt, "rows": len(instances), "file": str(dest / "swe-bench.jsonl")}
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise FlawforgeError("--format hf needs pyarrow: pip install 'flawforge[export]'") from None
    conversations = {c.instance_id: c for c in records("conversations.jsonl", Conversation)}
    licences = {}
    for instance in instances:
        if (instance.source, instance.version) not in licences:
            task = path_within(run / "tasks", task_id(instance.instance_id), "instance id", single=True)
            licences[instance.source, instance.version] = _licence_of(task)
    rows = [hf_row(i, conversations.get(i.instance_id), licences[i.source, i.version]) for i in instances]
    (dest / HF_DATA).parent.mkdir(parents=True, exist_ok=True)
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), dest / HF_DATA)
    (dest / "README.md").write_text(dataset_card(instances, licences, HF_DATA), encoding="utf-8")
    return {"format": fmt, "rows": len(rows), "folder": str(dest)}
