"""`flawforge run debug-conversations` and `flawforge validate-conversation`."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Optional

import typer

from flawforge.errors import FlawforgeError


def unpack_tasks(out: Path) -> None:
    """OUT/tasks.tar (a job artifact is one file) becomes OUT/tasks/<instance_id>/..."""
    archive = out / "tasks.tar"
    if archive.exists():
        with tarfile.open(archive) as tar:
            tar.extractall(out, filter="data")
        archive.unlink()


def no_scenario_instance(out: Path) -> Optional[str]:
    """Why a catalog run that succeeded emitted no instance, or None when it emitted some."""
    summary = json.loads((out / "summary.json").read_text())
    if summary["valid"]:
        return None
    if not summary["libraries"]:
        return "every catalog entry is claimed already, by earlier runs on the same blob store (--state)"
    reasons = ", ".join(f"{reason} ({n})" for reason, n in summary["rejects_by_reason"].items())
    return f"no valid bug in {summary['libraries']} scenario(s): {reasons} (details in rejects.jsonl)"


def run_debug_conversations(run_pipeline, params: dict, out: Path, stack: Optional[str], **options) -> None:
    """The job by `run_pipeline` (with its `options`); a catalog run that emits no instance exits 1 saying why."""
    try:
        run_pipeline("debug-conversations", params, out, stack,
                     nothing_done=no_scenario_instance if params.get("catalog") else None, **options)
    finally:
        unpack_tasks(out)
    typer.echo((out / "summary.json").read_text())


def _task_archive(folder: Path) -> bytes:
    import io

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.name != "conversation.json":
                tar.add(path, arcname=str(path.relative_to(folder)))
    return buffer.getvalue()


def validate_conversation(file: Path, dump_dir: Optional[Path]) -> dict:
    """Re-runs a file-edit task's tests in the sandbox, with the bug and with the fix."""
    from flawforge.debugging.patches import apply_patch
    from flawforge.debugging.revalidate import revalidate
    from flawforge.proto.debugging import Instance
    from flawforge.pipelines.debug_conversations import suite_sandbox
    from flawforge.debugging.generate import SUITE_LIMITS

    try:
        record = json.loads(file.read_text(encoding="utf-8"))
        instance = Instance.model_validate(record["instance"])
    except OSError as exc:
        raise FlawforgeError(f"cannot read {file}: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise FlawforgeError(f"{file} is not a task's conversation.json (with 'instance' and 'conversation'): "
                             f"{str(exc).splitlines()[0]}") from None
    folder = file.parent
    buggy_file = folder / instance.path
    if not buggy_file.is_file():
        raise FlawforgeError(f"{file}: the task folder has no {instance.path}")
    buggy = buggy_file.read_text(encoding="utf-8")
    try:
        fixed = apply_patch(buggy, instance.fix_patch)
    except ValueError as exc:
        raise FlawforgeError(f"{file}: the fix does not apply to {instance.path}: {exc}") from None
    archive = _task_archive(folder)
    tests = instance.FAIL_TO_PASS + instance.PASS_TO_PASS
    sandbox = suite_sandbox()
    buggy_run = sandbox.run_suite(archive, source_roots=instance.source_roots, args=tests, limits=SUITE_LIMITS)
    fixed_run = sandbox.run_suite(archive, {instance.path: fixed}, source_roots=instance.source_roots, args=tests,
                                  limits=SUITE_LIMITS)
    if dump_dir is not None:
        target = dump_dir / instance.instance_id
        target.mkdir(parents=True, exist_ok=True)
        name = Path(instance.path).name
        (target / f"buggy_{name}").write_text(buggy)
        (target / f"clean_{name}").write_text(fixed)
        (target / "fix.diff").write_text(instance.fix_patch)
        (target / "tests.txt").write_text("".join(t + "\n" for t in tests))
    return revalidate(instance, buggy_run, fixed_run).as_dict()
