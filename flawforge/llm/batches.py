"""The Batch API as a first-class way to call models.

A gateway batch is persisted in the blob store (`llm/batches/<id>/`): its rows, the provider
batches that carry them and each row's state. Cached rows are answered at once; the others go
to the provider as a JSONL file. Polling collects the output and error files; rows that failed
in a way a retry may fix (or that an expired batch never ran) are resubmitted alone, a bounded
number of times; a cancelled batch keeps what it finished.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict
from datetime import datetime, timezone

from pydantic import ValidationError

from flawforge.errors import BlobNotFound
from flawforge.llm import errors as llm_errors
from flawforge.llm.cache import canonical_json, fingerprint
from flawforge.llm.errors import (BatchNotFound, CallCancelled, LLMError, MalformedBatchLine, ProviderError,
                                  ReplayMiss)
from flawforge.llm.limits import CallScope
from flawforge.llm.openai_compat import CHAT_PATH, error_from_response, result_from_completion
from flawforge.proto.llm import (BatchRecord, BatchRow, BatchRowState, CallError, ChatRequest, ProviderBatch,
                                 RowResult)
from flawforge.runtime.json_body import InvalidJsonBody, parse_json

PREFIX = "llm/batches"
FINISHED = {"completed", "expired", "cancelled", "failed"}
_ERRORS_BY_CODE = {cls.code: cls for cls in vars(llm_errors).values()
                   if isinstance(cls, type) and issubclass(cls, LLMError)}


def error_of(error: CallError) -> LLMError:
    """The exception a row's recorded error stands for."""
    return _ERRORS_BY_CODE.get(error.code, LLMError)(error.message)


def call_error(exc: LLMError) -> CallError:
    return CallError(code=exc.code, message=str(exc))


def kept_reason(earlier: LLMError, later: LLMError) -> LLMError:
    """What a request failed of, when a retry or repair was then stopped (by the job's budget, say): the
    earlier reason, which says what was wrong, with the later one added."""
    kept = type(earlier)(f"{earlier} (not retried: {later})")
    kept.code = earlier.code
    return kept


def parse_batch_file(data: bytes) -> tuple[list[BatchRow], list[BatchRowState]]:
    """Rows of an OpenAI batch input file; each malformed line becomes a failed row naming the problem."""
    rows: list[BatchRow] = []
    bad: list[BatchRowState] = []
    seen: set[str] = set()
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        custom_id = f"line-{number}"
        try:
            obj = parse_json(line.encode())
            if not isinstance(obj, dict):
                raise MalformedBatchLine(f"line {number}: expected a JSON object")
            custom_id = str(obj.get("custom_id") or custom_id)
            if not obj.get("custom_id"):
                raise MalformedBatchLine(f"line {number}: custom_id is missing")
            if custom_id in seen:
                raise MalformedBatchLine(f"line {number}: custom_id {custom_id!r} is used twice")
            if obj.get("url", CHAT_PATH).removeprefix("/v1") != CHAT_PATH:
                raise MalformedBatchLine(f"line {number}: url must be /v1{CHAT_PATH}, not {obj.get('url')!r}")
            rows.append(BatchRow(custom_id=custom_id, request=ChatRequest.model_validate(obj.get("body")),
                                 line=number))
            seen.add(custom_id)
        except json.JSONDecodeError as exc:
            bad.append(_failed_row(custom_id, number,
                                   MalformedBatchLine(f"line {number}: not valid JSON: {exc.msg}")))
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            where = ".".join(map(str, ("body", *err["loc"])))
            bad.append(_failed_row(custom_id, number, MalformedBatchLine(f"line {number}: {where}: {err['msg']}")))
        except InvalidJsonBody as exc:
            bad.append(_failed_row(custom_id, number, MalformedBatchLine(f"line {number}: {exc}")))
        except MalformedBatchLine as exc:
            bad.append(_failed_row(custom_id if custom_id not in seen else f"line-{number}", number, exc))
    return rows, bad


def _failed_row(custom_id: str, line: int, exc: LLMError) -> BatchRowState:
    return BatchRowState(custom_id=custom_id, line=line, status="failed", error=call_error(exc))


def _now() -> datetime:
    return datetime.now(timezone.utc)


class BatchManager:
    def __init__(self, gateway):
        self.gateway = gateway
        self.store = gateway.store

    # --- persistence ----------------------------------------------------------------------
    def _record_key(self, batch_id: str) -> str:
        return f"{PREFIX}/{batch_id}/record.json"

    def _rows_key(self, batch_id: str) -> str:
        return f"{PREFIX}/{batch_id}/rows.jsonl"

    def get(self, batch_id: str) -> BatchRecord:
        if not batch_id.isalnum():
            raise BatchNotFound(f"no batch {batch_id!r}")
        try:
            return BatchRecord.model_validate_json(self.store.get(self._record_key(batch_id)))
        except BlobNotFound:
            raise BatchNotFound(f"no batch {batch_id!r}") from None

    def _save(self, record: BatchRecord) -> None:
        record.updated_at = _now()
        self.store.put(self._record_key(record.batch_id), record.model_dump_json().encode(), "application/json")

    def _requests(self, batch_id: str) -> dict[str, ChatRequest]:
        lines = self.store.get(self._rows_key(batch_id)).decode().splitlines()
        rows = [BatchRow.model_validate_json(line) for line in lines if line]
        return {row.custom_id: row.request for row in rows}

    # --- lifecycle ------------------------------------------------------------------------
    def submit(self, rows: list[BatchRow], scope: CallScope | None = None,
               rejected: list[BatchRowState] = (), created_by: str | None = None) -> BatchRecord:
        """Records the batch and sends its uncached rows; the same rows again resume the same batch
        (unless it was cancelled: then it starts over, its finished rows coming from the cache). A batch
        `created_by` a caller spends that caller's budget (`scope`'s), its retries included."""
        scope = scope or CallScope()
        fps = {row.custom_id: fingerprint(row.request) for row in rows}
        batch_id = hashlib.sha256(canonical_json(
            [sorted(fps.items()), sorted((r.custom_id, r.error.message) for r in rejected)])).hexdigest()[:32]
        try:
            existing = self.get(batch_id)
            if existing.state != "cancelled":
                return existing
        except BatchNotFound:
            pass
        states = list(rejected)
        for row in rows:
            state = BatchRowState(custom_id=row.custom_id, line=row.line, fingerprint=fps[row.custom_id])
            if self.gateway.cache.get(state.fingerprint) is not None:
                state.status = "succeeded"
            elif self.gateway.replay:
                state.status, state.error = "failed", call_error(ReplayMiss(
                    "replay mode: no cached response for this request; replay makes no model calls"))
            states.append(state)
        if all(state.line is not None for state in states):
            states.sort(key=lambda state: state.line)  # a file's rows, rejected or not, in the file's order
        now = _now()
        record = BatchRecord(batch_id=batch_id, created_by=created_by, state="in_progress", created_at=now,
                             updated_at=now, rows=states)
        self.store.put(self._rows_key(batch_id), "\n".join(r.model_dump_json() for r in rows).encode())
        self._send_pending(record, scope)
        self._finish_if_settled(record)
        self._save(record)
        return record

    def _send_pending(self, record: BatchRecord, scope: CallScope) -> None:
        pending = [row for row in record.rows if row.status == "pending"]
        if not pending:
            return
        requests = self._requests(record.batch_id)
        groups: dict[tuple[str, str], list[BatchRowState]] = defaultdict(list)
        for row in pending:
            try:
                provider, upstream = self.gateway.provider_for(requests[row.custom_id], scope)
                scope.budget.spend_request()
            except LLMError as exc:
                row.status = "failed"
                row.error = call_error(exc if row.error is None else kept_reason(error_of(row.error), exc))
                continue
            groups[(provider.name, upstream)].append(row)
        for (provider_name, upstream), group in groups.items():
            provider = self.gateway.providers[provider_name]
            lines = [json.dumps({"custom_id": row.custom_id, "method": "POST", "url": "/v1" + CHAT_PATH,
                                 "body": provider.chat_body(requests[row.custom_id], upstream)}) for row in group]
            try:
                file_id = provider.upload_batch_file(("\n".join(lines) + "\n").encode(), scope)
                info = provider.create_batch(file_id, scope)
            except LLMError as exc:
                for row in group:
                    row.status, row.error = "failed", call_error(exc)
                continue
            record.provider_batches.append(ProviderBatch(
                id=str(info["id"]), provider=provider_name, status=str(info.get("status", "validating")),
                input_file_id=file_id, custom_ids=[row.custom_id for row in group]))
            for row in group:
                row.status, row.attempts, row.provider_batch_id, row.error = "submitted", row.attempts + 1, \
                    str(info["id"]), None

    def advance(self, batch_id: str, scope: CallScope | None = None) -> BatchRecord:
        """One polling pass: collects finished provider batches and resubmits rows worth retrying."""
        scope = scope or CallScope()
        record = self.get(batch_id)
        if record.state != "in_progress":
            return record
        if self.gateway.replay:
            raise ReplayMiss(f"replay mode: batch {batch_id} is still running at its provider; replay makes no calls")
        for batch in record.provider_batches:
            if batch.collected:
                continue
            self._update(record, batch, self.gateway.providers[batch.provider].get_batch(batch.id, scope), scope)
        self._send_pending(record, scope)
        self._finish_if_settled(record)
        self._save(record)
        return record

    def _update(self, record: BatchRecord, batch: ProviderBatch, info: dict, scope: CallScope) -> None:
        """Takes in the provider's view of a batch; a finished one has its rows settled."""
        batch.status = str(info.get("status"))
        batch.output_file_id = info.get("output_file_id") or batch.output_file_id
        batch.error_file_id = info.get("error_file_id") or batch.error_file_id
        if batch.status in FINISHED:
            self._collect(record, batch, info, scope)
            batch.collected = True

    def _collect(self, record: BatchRecord, batch: ProviderBatch, info: dict, scope: CallScope) -> None:
        provider = self.gateway.providers[batch.provider]
        lines: dict[str, dict] = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                for line in provider.file_content(file_id, scope).decode(errors="replace").splitlines():
                    try:
                        obj = json.loads(line)
                        lines[str(obj["custom_id"])] = obj
                    except (ValueError, KeyError, TypeError):
                        continue  # an unreadable output line: its row counts as missing and is retried
        self.settle(record, batch, lines, info, scope)

    def settle(self, record: BatchRecord, batch: ProviderBatch, lines: dict[str, dict], info: dict,
               scope: CallScope) -> None:
        """Settles the rows of a finished provider batch from its output and error lines (by custom_id):
        answers go to the cache, transient failures back to pending for resubmission while attempts remain."""
        rows = {row.custom_id: row for row in record.rows}
        max_attempts = self.gateway.max_attempts
        for custom_id in batch.custom_ids:
            row = rows[custom_id]
            if row.status != "submitted" or row.provider_batch_id != batch.id:
                continue
            error = self._row_outcome(row, lines.get(custom_id), batch, info, scope)
            if error is None:
                row.status, row.error = "succeeded", None
            elif error.retryable and row.attempts < max_attempts:
                row.status, row.error = "pending", call_error(error)
            else:
                row.status, row.error = "failed", call_error(error)

    def _row_outcome(self, row: BatchRowState, line: dict | None, batch: ProviderBatch, info: dict,
                     scope: CallScope) -> LLMError | None:
        """None when the row's answer was stored, else what went wrong with it."""
        if line is None:
            if batch.status == "cancelled":
                return CallCancelled(f"provider batch {batch.id} was cancelled before this request ran")
            if batch.status == "expired":
                return ProviderError(f"provider batch {batch.id} expired before this request ran", retryable=True)
            if batch.status == "failed":
                problems = "; ".join(str(e.get("message")) for e in (info.get("errors") or {}).get("data", []))
                return ProviderError(f"provider batch {batch.id} failed: {problems or 'no reason given'}")
            return ProviderError(f"provider batch {batch.id} has no output for this request", retryable=True)
        response, error = line.get("response") or {}, line.get("error")
        status = int(response.get("status_code") or 0)
        if status == 200:
            try:
                result = result_from_completion(response.get("body"), row.fingerprint, batch.provider)
            except LLMError as exc:
                return exc
            scope.budget.spend_tokens(result.usage.total_tokens)
            self.gateway.cache.put(result, self.gateway.router.secrets)
            return None
        if status:
            return error_from_response(status, response.get("body"))
        return ProviderError(f"provider batch {batch.id}: {(error or {}).get('message') or 'request failed'}",
                             retryable=(error or {}).get("code") in ("batch_expired", "server_error"))

    def _finish_if_settled(self, record: BatchRecord) -> None:
        if all(row.status in ("succeeded", "failed") for row in record.rows):
            record.state = "completed"

    def wait(self, batch_id: str, scope: CallScope | None = None, poll_s: float | None = None) -> BatchRecord:
        """Polls until every row is settled; a cancelled job cancels the provider batches and stops."""
        scope = scope or CallScope()
        poll_s = self.gateway.batch_poll_s if poll_s is None else poll_s
        while True:
            try:
                scope.check()
            except CallCancelled:
                self.cancel(batch_id)
                raise
            record = self.advance(batch_id, scope)
            if record.state != "in_progress":
                return record
            time.sleep(poll_s)

    def cancel(self, batch_id: str) -> BatchRecord:
        """Cancels the provider batches still running; finished rows keep their answers."""
        record = self.get(batch_id)
        if record.state != "in_progress":
            return record
        scope = CallScope()
        for batch in record.provider_batches:
            if batch.collected:
                continue
            try:
                info = self.gateway.providers[batch.provider].cancel_batch(batch.id, scope)
            except LLMError:
                continue  # already finished or gone: nothing left to stop
            self._update(record, batch, info, scope)  # a batch cancelled at once yields its partial output
        for row in record.rows:
            if row.status in ("pending", "submitted"):
                row.status, row.error = "failed", call_error(CallCancelled("the batch was cancelled"))
        record.state = "cancelled"
        self._save(record)
        return record

    def results(self, batch_id: str) -> list[RowResult]:
        record = self.get(batch_id)
        results = []
        for row in record.rows:
            cached = self.gateway.cache.get(row.fingerprint) if row.status == "succeeded" else None
            if cached is not None:
                # Rows answered by this batch's provider calls are not cache hits, whatever the lookup says.
                results.append(RowResult(custom_id=row.custom_id,
                                         result=cached.model_copy(update={"cached": row.attempts == 0})))
            else:
                results.append(RowResult(custom_id=row.custom_id, error=row.error or CallError(
                    code="pending" if row.status != "succeeded" else "cache_miss",
                    message=f"row is {row.status}" if row.status != "succeeded" else "its answer left the cache")))
        return results

    def run(self, rows: list[BatchRow], scope: CallScope | None = None) -> list[RowResult]:
        """Submit, wait, and return one result per row in the order given."""
        record = self.submit(rows, scope)
        self.wait(record.batch_id, scope)
        by_id = {r.custom_id: r for r in self.results(record.batch_id)}
        return [by_id[row.custom_id] for row in rows]
