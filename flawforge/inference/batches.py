"""The OpenAI Batch API: files and batches kept in the blob store, so a restart loses nothing, and
the run of one batch.

A batch runs its requests one after another. Results are saved in parts of a few requests, so a
worker that restarts mid-batch resumes after the last saved part. A line that cannot be parsed,
or a request that fails, becomes a line of the error file while the rest completes; cancelling
and expiry are checked before every request.
"""
from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Callable

from pydantic import ValidationError

from flawforge.blobstore import BlobStore
from flawforge.errors import BlobNotFound
from flawforge.inference.errors import RequestError
from flawforge.proto.inference import (
    Batch, BatchCreate, BatchError, BatchErrors, BatchLineError, BatchLineResponse, BatchOutputLine,
    BatchRequestLine, BatchStatus, BatchUsage, FileDeleted, FileObject, RequestCounts,
)

log = logging.getLogger(__name__)

FILES = "inference/files"
BATCHES = "inference/batches"
WINDOW_S = {"24h": 24 * 3600}
PART_SIZE = 8  # requests per saved part: the most a restarted worker redoes
ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,128}")

Executor = Callable[[str, dict], dict]  # (endpoint, request body) -> response body; raises RequestError


def _check_id(value: str, what: str, param: str) -> str:
    if not ID_PATTERN.fullmatch(value):
        raise RequestError(404, f"No such {what}: {value!r}", param=param, code=f"{what}_not_found")
    return value


class FileStore:
    def __init__(self, store: BlobStore):
        self.store = store

    def create(self, filename: str, purpose: str, data: bytes, now: int, file_id: str | None = None) -> FileObject:
        file = FileObject(id=file_id or f"file-{uuid.uuid4().hex}", bytes=len(data), created_at=now,
                          filename=filename, purpose=purpose)
        self.store.put(f"{FILES}/{file.id}/content", data)
        self.store.put(f"{FILES}/{file.id}/meta.json", file.model_dump_json().encode(), "application/json")
        return file

    def get(self, file_id: str) -> FileObject:
        try:
            return FileObject.model_validate_json(self.store.get(f"{FILES}/{_check_id(file_id, 'file', 'file_id')}"
                                                                 "/meta.json"))
        except BlobNotFound:
            raise RequestError(404, f"No such file: {file_id!r}", param="file_id", code="file_not_found") from None

    def content(self, file_id: str) -> bytes:
        self.get(file_id)
        return self.store.get(f"{FILES}/{file_id}/content")

    def list(self, purpose: str | None = None) -> list[FileObject]:
        files = [FileObject.model_validate_json(self.store.get(key)) for key in self.store.list(f"{FILES}/")
                 if key.endswith("/meta.json")]
        return sorted((f for f in files if purpose in (None, f.purpose)), key=lambda f: (-f.created_at, f.id))

    def delete(self, file_id: str) -> FileDeleted:
        self.get(file_id)
        self.store.delete(f"{FILES}/{file_id}/meta.json")
        self.store.delete(f"{FILES}/{file_id}/content")
        return FileDeleted(id=file_id, deleted=True)


class BatchStore:
    """Batch records are written by their creator and then by the worker alone; a cancel request is
    a separate marker, so it cannot be lost to a concurrent write of the record."""

    def __init__(self, store: BlobStore):
        self.store = store

    @staticmethod
    def _key(batch_id: str, name: str) -> str:
        return f"{BATCHES}/{_check_id(batch_id, 'batch', 'batch_id')}/{name}"

    def create(self, req: BatchCreate, now: int, created_by: str | None = None) -> Batch:
        batch = Batch(id=f"batch_{uuid.uuid4().hex}", endpoint=req.endpoint, input_file_id=req.input_file_id,
                      completion_window=req.completion_window, status=BatchStatus.validating, created_at=now,
                      expires_at=now + WINDOW_S[req.completion_window], metadata=req.metadata, created_by=created_by)
        self.save(batch)
        return batch

    def save(self, batch: Batch) -> None:
        self.store.put(self._key(batch.id, "batch.json"), batch.model_dump_json().encode(), "application/json")

    def get(self, batch_id: str) -> Batch:
        try:
            batch = Batch.model_validate_json(self.store.get(self._key(batch_id, "batch.json")))
        except BlobNotFound:
            raise RequestError(404, f"No such batch: {batch_id!r}", param="batch_id",
                               code="batch_not_found") from None
        cancelling_at = self.cancel_requested_at(batch_id)
        if cancelling_at is not None and not batch.status.finished:
            batch.status, batch.cancelling_at = BatchStatus.cancelling, cancelling_at
        return batch

    def list(self) -> list[Batch]:
        ids = [key.split("/")[2] for key in self.store.list(f"{BATCHES}/") if key.endswith("/batch.json")]
        return sorted((self.get(i) for i in ids), key=lambda b: (-b.created_at, b.id))

    def request_cancel(self, batch_id: str, now: int) -> Batch:
        batch = self.get(batch_id)
        if batch.status.finished:
            raise RequestError(409, f"Cannot cancel a batch with status {batch.status.value!r}.", param="batch_id",
                               code="batch_finished")
        self.store.put_if_absent(self._key(batch_id, "cancel"), str(now).encode())
        return self.get(batch_id)

    def cancel_requested_at(self, batch_id: str) -> int | None:
        try:
            return int(self.store.get(self._key(batch_id, "cancel")))
        except BlobNotFound:
            return None

    def part(self, batch_id: str, index: int) -> list[dict] | None:
        try:
            return self.store.get_json(self._key(batch_id, f"parts/{index:06d}.json"))
        except BlobNotFound:
            return None

    def put_part(self, batch_id: str, index: int, lines: list[dict]) -> None:
        self.store.put_json(self._key(batch_id, f"parts/{index:06d}.json"), lines)


def _line_error(line: int, custom_id: str | None, code: str, message: str) -> dict:
    record = BatchOutputLine(id=f"batch_req_{uuid.uuid4().hex}", custom_id=custom_id,
                             error=BatchLineError(code=code, message=message))
    return {"line": line, "ok": False, "record": record.model_dump(mode="json")}


def parse_input(data: bytes, endpoint: str) -> tuple[list[tuple[int, BatchRequestLine]], list[dict]]:
    """The valid request lines (with their 1-based line numbers) and an error line for each bad one."""
    requests, rejected, seen = [], [], set()
    for number, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            rejected.append(_line_error(number, None, "invalid_json", f"line {number} is not valid JSON: {exc}"))
            continue
        custom_id = obj.get("custom_id") if isinstance(obj, dict) and isinstance(obj.get("custom_id"), str) else None
        try:
            request = BatchRequestLine.model_validate(obj)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            where = ".".join(map(str, err["loc"])) or "line"
            rejected.append(_line_error(number, custom_id, "invalid_request", f"line {number}: {where}: {err['msg']}"))
            continue
        if request.url != endpoint:
            rejected.append(_line_error(number, custom_id, "mismatched_endpoint",
                                        f"line {number}: url {request.url} differs from the batch's endpoint {endpoint}"))
        elif request.custom_id in seen:
            rejected.append(_line_error(number, custom_id, "duplicate_custom_id",
                                        f"line {number}: custom_id {request.custom_id!r} was used before"))
        else:
            seen.add(request.custom_id)
            requests.append((number, request))
    return requests, rejected


def _run_line(number: int, request: BatchRequestLine, execute: Executor) -> dict:
    request_id = f"req_{uuid.uuid4().hex}"
    try:
        response = BatchLineResponse(status_code=200, request_id=request_id, body=execute(request.url, request.body))
    except RequestError as exc:
        response = BatchLineResponse(status_code=exc.http_status, request_id=request_id, body=exc.body())
    except Exception as exc:  # one broken request must not take the batch down with it
        log.exception("batch request %s failed", request.custom_id)
        response = BatchLineResponse(status_code=500, request_id=request_id,
                                     body=RequestError(500, f"internal error: {type(exc).__name__}: {exc}").body())
    record = BatchOutputLine(id=f"batch_req_{uuid.uuid4().hex}", custom_id=request.custom_id, response=response)
    return {"line": number, "ok": response.status_code == 200, "record": record.model_dump(mode="json")}


def _jsonl(lines: list[dict]) -> bytes:
    return b"".join(json.dumps(line["record"]).encode() + b"\n" for line in sorted(lines, key=lambda x: x["line"]))


def run_batch(batches: BatchStore, files: FileStore, batch_id: str, execute: Executor,
              clock: Callable[[], float] = time.time) -> Batch:
    """Runs a batch to one of its final statuses; a batch already finished is returned as it is."""
    batch = batches.get(batch_id)
    if batch.status.finished:
        return batch
    try:
        data = files.content(batch.input_file_id)
    except RequestError as exc:
        data, missing = b"", exc.message
    else:
        missing = None
    requests, rejected = parse_input(data, batch.endpoint)
    if not requests:
        first = (BatchError(code="file_not_found", message=missing, param="input_file_id") if missing else
                 BatchError(code="empty_batch", message="the input file has no valid request line",
                            param="input_file_id"))
        batch.errors = BatchErrors(data=[first] + [
            BatchError(code=r["record"]["error"]["code"], message=r["record"]["error"]["message"], line=r["line"])
            for r in rejected])
        batch.request_counts = _counts(len(rejected), rejected)
        batch.status, batch.failed_at = BatchStatus.failed, int(clock())
        batches.save(batch)
        return batch
    if batch.status == BatchStatus.validating:
        batch.status, batch.in_progress_at = BatchStatus.in_progress, int(clock())
    done: list[dict] = list(rejected)
    ending = None
    for index, start in enumerate(range(0, len(requests), PART_SIZE)):
        part = batches.part(batch_id, index)
        if part is None:
            part = []
            for number, request in requests[start:start + PART_SIZE]:
                ending = _ending(batches, batch, clock)
                if ending:
                    break
                part.append(_run_line(number, request, execute))
            if not ending:
                batches.put_part(batch_id, index, part)
        done += part
        _tally(batch, len(requests) + len(rejected), done)
        batches.save(batch)
        if ending:
            break
    if ending == BatchStatus.expired:
        finished = {line["line"] for line in done}
        done += [_line_error(number, request.custom_id, "batch_expired", "the batch expired before this request ran")
                 for number, request in requests if number not in finished]
    return _finalize(batches, files, batch, done, ending or BatchStatus.completed, clock)


def _ending(batches: BatchStore, batch: Batch, clock: Callable[[], float]) -> BatchStatus | None:
    if batches.cancel_requested_at(batch.id) is not None:
        return BatchStatus.cancelled
    if clock() >= batch.expires_at:
        return BatchStatus.expired
    return None


def _counts(total: int, done: list[dict]) -> RequestCounts:
    completed = sum(1 for line in done if line["ok"])
    return RequestCounts(total=total, completed=completed, failed=len(done) - completed)


def _tally(batch: Batch, total: int, done: list[dict]) -> None:
    """Request counts, token usage and the answering model of the lines done so far."""
    batch.request_counts = _counts(total, done)
    bodies = [line["record"]["response"]["body"] for line in done if line["ok"]]
    prompt = sum(body.get("usage", {}).get("prompt_tokens", 0) for body in bodies)
    completion = sum(body.get("usage", {}).get("completion_tokens", 0) for body in bodies)
    batch.usage = BatchUsage(input_tokens=prompt, output_tokens=completion, total_tokens=prompt + completion)
    batch.model = next((body["model"] for body in bodies if body.get("model")), batch.model)


def _finalize(batches: BatchStore, files: FileStore, batch: Batch, done: list[dict], status: BatchStatus,
              clock: Callable[[], float]) -> Batch:
    if status == BatchStatus.completed:
        batch.status, batch.finalizing_at = BatchStatus.finalizing, int(clock())
        batches.save(batch)
    now = int(clock())
    for ok, suffix, field in ((True, "output", "output_file_id"), (False, "errors", "error_file_id")):
        lines = [line for line in done if line["ok"] == ok]
        if lines:
            file = files.create(f"{batch.id}_{suffix}.jsonl", "batch_output", _jsonl(lines), now,
                                file_id=f"file-{batch.id}-{suffix}")
            setattr(batch, field, file.id)
    _tally(batch, batch.request_counts.total, done)
    batch.status = status
    setattr(batch, f"{status.value}_at", now)
    batches.save(batch)
    return batches.get(batch.id)
