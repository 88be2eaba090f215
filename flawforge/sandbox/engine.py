"""The service side of the sandbox: starts the zygote, sends it units, waits for their results.

One `Sandbox` per process is enough: it is thread-safe and keeps up to `workers` units
running at once. If the zygote dies (it never should), the units it had are reported
`crashed` and the next call starts a new one.

A batch (`trace_batch`) runs its programs in batch units, many per process, which saves
a fork and a process set-up per program. Each result is still the program's result as if
it ran alone: programs that could notice the sharing run alone (see runtime.sharing), and
so does every program whose batch result could depend on it (see outcome.batch_results).
Single programs (`execute`) that wait for a slot because every slot is busy are run the
same way: the caller that gets the next slot takes the others waiting with the same call
and limits into one batch unit. An idle sandbox runs each at once, in a unit of its own.

A caller that stops wanting its results (an HTTP client that went away) sets its Cancellation: the units
it started are killed and it starts no more.
"""
from __future__ import annotations

import base64
import json
import logging
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from itertools import count
from typing import BinaryIO

from flawforge.errors import FlawforgeError, InvalidInput, Unavailable
from flawforge.proto.sandbox import (LAYERS, ExecutionResult, LayerReport, SandboxLimits, SuiteRunResult,
                                     TestRunResult)
from flawforge.runtime.metrics import SANDBOX_OUTCOMES
from flawforge.sandbox import outcome
from flawforge.sandbox.runtime import MODULES, wire
from flawforge.settings import Settings

log = logging.getLogger(__name__)

RUNTIME_PACKAGE = "flawforge.sandbox.runtime"
# Units run as uid_base + slot: unprivileged, one uid per concurrent unit. Each sandbox picks its
# own block, so units of two sandboxes on one host never share a uid.
UID_BLOCKS = range(100_000, 1 << 30, 64)
MAX_WORKERS = 64
START_TIMEOUT_S = 60
# A batch is split over several units only above this many programs each: below it, the extra
# forks cost more than running in parallel gains.
MIN_PROGRAMS_PER_UNIT = 16
# Most single programs waiting for a slot that one batch unit takes together.
MAX_COALESCED = 16
# How often a caller waiting for a slot looks whether it was cancelled, seconds.
CANCEL_POLL_S = 0.5
# Receives the runtime's source on its control socket: the zygote never needs the service's files.
BOOTSTRAP = """\
import json, sys, types
sock_fd = int(sys.argv[1])
def _read(n):
    import os
    data = b""
    while len(data) < n:
        chunk = os.read(sock_fd, n - len(data))
        if not chunk:
            raise SystemExit("sandbox bootstrap: control socket closed")
        data += chunk
    return data
_bundle = json.loads(_read(int.from_bytes(_read(4), "big")))
for _name in _bundle["packages"]:
    _module = types.ModuleType(_name)
    _module.__path__ = []
    sys.modules[_name] = _module
# The runtime resolves builtins in a private copy: a program replacing builtins.int or
# builtins.isinstance changes what it sees, not what reports on it.
_builtins = dict(__builtins__.__dict__)
for _name, _source in _bundle["modules"]:
    _module = types.ModuleType(_name)
    _module.__file__ = "<" + _name + ">"
    _module.__builtins__ = _builtins
    sys.modules[_name] = _module
    exec(compile(_source, _module.__file__, "exec"), _module.__dict__)
_main, _config = sys.modules[_bundle["main"]].main, _bundle["config"]
del _bundle, _module, _source, _read, _builtins
_main(sock_fd, _config)
"""


def usable_cpus() -> int:
    """CPUs this process may use: its affinity, and its cgroup's CPU quota where one is set (a container on a
    large node sees every core of the node, but may use only its quota)."""
    cpus = len(os.sched_getaffinity(0))
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()
        if quota != "max":
            cpus = min(cpus, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return cpus


def csv_setting(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


class SandboxUnavailable(Unavailable):
    """The sandbox could not start, or lacks an isolation layer the configuration requires."""

    code = "sandbox_unavailable"


class UnitsCancelled(FlawforgeError):
    """The caller's Cancellation was set: its units were killed, no result is coming."""

    code = "cancelled"


class Cancellation:
    """Set once by a caller (from any thread) that no longer wants the results of the sandbox calls it made within
    `Sandbox.cancelled_by(this)`: the units they started are killed, and they start no more."""

    def __init__(self):
        self._lock = threading.Lock()
        self.cancelled = False
        self._units: dict[int, "_Zygote"] = {}  # the caller's running units, by id

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            units, self._units = self._units, {}
        for unit_id, zygote in units.items():
            zygote.cancel(unit_id)

    def check(self) -> None:
        if self.cancelled:
            raise UnitsCancelled("the caller cancelled its sandbox units")

    def track(self, unit_id: int, zygote: "_Zygote") -> None:
        with self._lock:
            if not self.cancelled:
                self._units[unit_id] = zygote
                return
        zygote.cancel(unit_id)

    def forget(self, unit_id: int) -> None:
        with self._lock:
            self._units.pop(unit_id, None)


ADDR_NO_RANDOMIZE = 0x0040000


def _no_randomisation():
    """What the child runs before exec: no address-space randomisation for the program it becomes. The C
    function is looked up here, in the parent: a forked child of a threaded process must not load libraries."""
    import ctypes

    personality = ctypes.CDLL(None, use_errno=True).personality
    return lambda: personality(personality(0xFFFFFFFF) | ADDR_NO_RANDOMIZE)


class _Zygote:
    """One running fork server and the thread that reads its replies."""

    def __init__(self, config: dict, on_exit):
        service_end, zygote_end = None, None
        try:  # out of processes or descriptors: the platform's failure, like a server that never answers
            service_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            # A fixed hash seed can only come from the environment, which -I (-E) ignores: then -s -P, the rest
            # of -I, and an environment holding that one variable. Hashes of some objects (None's, in Python
            # 3.11) are their addresses: the same in every run only without address-space randomisation.
            seed = config.get("hash_seed")
            isolated, env = (["-I"], {}) if seed is None else (["-s", "-P"], {"PYTHONHASHSEED": str(seed)})
            self.process = subprocess.Popen(
                [sys.executable, *isolated, "-S", "-c", BOOTSTRAP, str(zygote_end.fileno())],
                env=env, cwd="/", stdin=subprocess.DEVNULL, pass_fds=(zygote_end.fileno(),), close_fds=True,
                start_new_session=True, preexec_fn=None if seed is None else _no_randomisation())
        except OSError as exc:
            for end in (service_end, zygote_end):
                if end is not None:
                    end.close()
            raise SandboxUnavailable(f"the sandbox did not start: {exc}") from None
        self.sock = service_end
        zygote_end.close()
        self.pending: dict[int, Future] = {}
        # Report chunks of running units, by id: spooled to a file, never gathered in memory.
        self.spools: dict[int, BinaryIO] = {}
        self.lock = threading.Lock()  # pending and alive; never held while blocked on the socket
        self.send_lock = threading.Lock()
        self.alive = True
        bundle = {"packages": ["flawforge", "flawforge.sandbox", RUNTIME_PACKAGE],
                  "modules": [[f"{RUNTIME_PACKAGE}.{m}", resources.files(RUNTIME_PACKAGE).joinpath(f"{m}.py").read_text()]
                              for m in MODULES],
                  "main": f"{RUNTIME_PACKAGE}.zygote", "config": config}
        self.sock.sendall(wire.pack(bundle))
        self.sock.settimeout(START_TIMEOUT_S)
        try:
            hello = json.loads(self._read_exact(self._read_size()))
        except (OSError, ValueError) as exc:
            self.close()
            raise SandboxUnavailable(f"the sandbox did not start: {exc}") from None
        self.sock.settimeout(None)
        self.layers: dict[str, str | None] = hello["layers"]
        self.on_exit = on_exit
        self.reader = threading.Thread(target=self._read_replies, name="sandbox-reader", daemon=True)
        self.reader.start()

    def _read_exact(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise ConnectionError("the sandbox's zygote exited")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _read_size(self) -> int:
        return wire.HEADER.unpack(self._read_exact(4))[0]

    def submit(self, unit_id: int, request: dict) -> Future:
        future: Future = Future()
        with self.lock:
            if not self.alive:
                raise ConnectionError("the sandbox's zygote exited")
            self.pending[unit_id] = future
        try:
            with self.send_lock:  # apart from `lock`: the reader must keep draining replies meanwhile
                self.sock.sendall(wire.pack(request))
        except OSError:
            with self.lock:
                self.pending.pop(unit_id, None)
            raise
        return future

    def cancel(self, unit_id: int) -> None:
        """Asks the zygote to kill the unit (nothing if it has ended); its report then says `cancelled`."""
        try:
            with self.send_lock:
                self.sock.sendall(wire.pack({"op": "cancel", "id": unit_id}))
        except OSError:  # the zygote is gone, and the unit with it
            pass

    def _read_replies(self) -> None:
        try:
            while True:
                header = json.loads(self._read_exact(self._read_size()))
                data = self._read_exact(self._read_size())
                if header["op"] == "chunk":
                    self.spools.setdefault(header["id"], tempfile.TemporaryFile()).write(data)
                    continue
                spool = self.spools.pop(header["id"], None)
                if spool is not None:  # the report is the spooled chunks and this last one, read back at once
                    with spool:
                        spool.write(data)
                        spool.seek(0)
                        data = spool.read()
                if header["op"] == "failed":
                    header["failed"] = header["reason"]
                with self.lock:
                    future = self.pending.pop(header["id"], None)
                if future is not None:
                    future.set_result((header, data))
        except (OSError, ValueError) as exc:
            if self.alive:
                log.error("sandbox zygote lost: %s", exc)
        with self.lock:
            self.alive = False
            pending, self.pending = self.pending, {}
        for spool in self.spools.values():
            spool.close()
        self.spools.clear()
        for future in pending.values():
            future.set_result(({"failed": "the sandbox's zygote exited during the unit"}, b""))
        self.on_exit(self)
        self.close()

    def close(self) -> None:
        with self.lock:
            self.alive = False
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.sock.close()


@dataclass(eq=False)
class _Waiting:
    """A single program waiting for a slot; `taken` once a unit runs it (perhaps another caller's)."""

    source: str
    future: Future = field(default_factory=Future)
    taken: bool = False


class Sandbox:
    """Runs untrusted Python in isolated, resource-limited processes forked from a warm parent.

    `limits` are the defaults; each call may pass its own. `workers` units run at once.
    `required_layers` are checked at start: a missing one raises SandboxUnavailable.
    `read_paths` are extra host paths units may read (e.g. a site-packages with numpy).
    `audit=False` or `namespaces=False` leave those layers out, as where they are unavailable.
    `max_batch_s` caps a batch unit's whole wall-clock time (each program still has its own limit).
    Code makes one with `Sandbox.from_settings`, never with the constructor.
    """

    @classmethod
    def from_settings(cls, settings: Settings | None = None, *, in_process: bool = False, **overrides):
        """The one way to make a sandbox: required layers, audit, read paths, worker count and default limits
        come from the settings (FLAWFORGE_SANDBOX_*); `overrides` (any constructor argument: limits, workers,
        required_layers, read_paths, audit, namespaces) replace single ones, e.g. a CLI running one unit asks
        for one worker.

        With FLAWFORGE_SANDBOX_URL set, and unless `in_process` (the trace-executor's own), the sandbox is
        that trace-executor's, over HTTP with FLAWFORGE_TOKEN (a RemoteSandbox: the same calls; limits and
        required layers apply, the rest is the service's)."""
        settings = settings or Settings()
        arguments = {
            "limits": SandboxLimits(timeout_s=settings.sandbox_timeout_s, memory_mb=settings.sandbox_memory_mb),
            "workers": settings.sandbox_workers or None,
            "required_layers": csv_setting(settings.sandbox_required_layers),
            "read_paths": csv_setting(settings.sandbox_read_paths),
            "audit": settings.sandbox_audit,
            "max_batch_s": settings.sandbox_max_request_s,
        }
        unknown = sorted(set(overrides) - set(arguments) - {"namespaces", "hash_seed", "preload"})
        if unknown:
            raise TypeError(f"unknown sandbox argument(s): {', '.join(unknown)}")
        arguments.update(overrides)
        if settings.sandbox_url and not in_process:
            from flawforge.sandbox.remote import RemoteSandbox

            return RemoteSandbox(settings.sandbox_url, settings.token, arguments["limits"],
                                 arguments["required_layers"], arguments["max_batch_s"])
        return cls(**arguments)

    def __init__(self, limits: SandboxLimits | None = None, *, workers: int | None = None,
                 required_layers: tuple[str, ...] | list[str] = (), read_paths: tuple[str, ...] | list[str] = (),
                 audit: bool = True, namespaces: bool = True, hash_seed: int | None = None,
                 preload: tuple[tuple[str, ...], str] | None = None, max_batch_s: float | None = None):
        unknown = sorted(set(required_layers) - set(LAYERS))
        if unknown:
            raise SandboxUnavailable(f"unknown isolation layer(s) {', '.join(unknown)}; known: {', '.join(LAYERS)}")
        self.limits = limits or SandboxLimits()
        self.max_batch_s = max_batch_s
        self._caller = threading.local()  # .cancellation: the Cancellation of the calling thread's calls
        self.workers = min(MAX_WORKERS, workers or 2 * usable_cpus())
        self.required_layers = tuple(required_layers)
        uid_base = random.choice(UID_BLOCKS)
        self.unit_uids = range(uid_base, uid_base + self.workers)
        self._config = {"slots": self.workers, "uid_base": uid_base, "audit": audit, "namespaces": namespaces,
                        "read_paths": [os.path.abspath(p) for p in read_paths], "hash_seed": hash_seed,
                        # (modules, folder): trusted modules the zygote imports once, from a folder units may read
                        "preload": list(preload[0]) if preload else [], "preload_path": [preload[1]] if preload else []}
        self._free_slots = self.workers
        self._slot_freed = threading.Condition()  # guards _free_slots and _waiting
        self._waiting: dict[tuple, list[_Waiting]] = {}  # single programs, by (call, trace, limits)
        self._ids = count(1)
        self._lock = threading.Lock()
        # Units started, by kind (wire.EXEC, BATCH, TESTS), and "alone": batch programs that ran in
        # their own unit. Tells how well batches share their units.
        self.counts: Counter = Counter()
        self.last_unit_ok = float("-inf")  # time.monotonic() when the zygote last reported a unit it ran
        self._closed = False
        self._zygote: _Zygote | None = None
        self._ensure_zygote()
        missing = {layer: why for layer, why in self.layer_report().missing.items() if layer in self.required_layers}
        if missing:
            self.close()
            raise SandboxUnavailable("required isolation layer(s) missing: " +
                                     "; ".join(f"{k}: {v}" for k, v in missing.items()))

    # --- lifecycle -------------------------------------------------------------------------
    def _ensure_zygote(self) -> _Zygote:
        with self._lock:
            if self._closed:
                raise SandboxUnavailable("the sandbox is closed")
            if self._zygote is None or not self._zygote.alive:
                self._zygote = _Zygote(self._config, self._forget)
                report = self.layer_report(self._zygote)
                log.info("sandbox started; active layers: %s", ", ".join(report.active))
                for layer, why in report.missing.items():
                    log.warning("sandbox layer %s missing: %s", layer, why)
            return self._zygote

    def _forget(self, zygote: _Zygote) -> None:
        with self._lock:
            if self._zygote is zygote:
                self._zygote = None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            zygote, self._zygote = self._zygote, None
        if zygote is not None:
            zygote.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def layer_report(self, zygote: _Zygote | None = None) -> LayerReport:
        zygote = zygote or self._ensure_zygote()
        return LayerReport(active=[k for k in LAYERS if zygote.layers.get(k, "unknown") is None],
                           missing={k: zygote.layers.get(k) or "unknown" for k in LAYERS
                                    if zygote.layers.get(k, "unknown") is not None},
                           required=list(self.required_layers))

    def zygote_pid(self) -> int | None:
        """Host pid of the process holding the sandbox (for health checks)."""
        zygote = self._zygote
        return zygote.process.pid if zygote is not None and zygote.process.poll() is None else None

    # --- units -------------------------------------------------------------------------------
    @contextmanager
    def cancelled_by(self, cancellation: Cancellation):
        """The calls this thread makes meanwhile start their units under `cancellation`: setting it kills them
        and makes the calls raise UnitsCancelled. (Single programs that share a unit with other callers' are not
        killed for it: they are bounded by their own timeout.)"""
        self._caller.cancellation = cancellation
        try:
            yield
        finally:
            self._caller.cancellation = None

    def _cancellation(self) -> Cancellation | None:
        return getattr(self._caller, "cancellation", None)

    def _give_slot(self) -> None:
        with self._slot_freed:
            self._free_slots += 1
            self._slot_freed.notify_all()

    def _submit(self, request: dict, limits: SandboxLimits, *, slot_taken: bool = False,
                own: bool = True) -> Future:
        """Sends a unit to the zygote once a slot is free (or on the slot the caller took); the slot is free
        again when the unit's report is in. An `own` unit (the caller's alone) dies with the caller's
        Cancellation."""
        request = {**request, "id": next(self._ids), "limits": limits.model_dump()}
        if self.max_batch_s is not None and wire.sections_of(request):
            request["max_wall_s"] = self.max_batch_s
        cancellation = self._cancellation() if own else None
        with self._lock:
            self.counts[request["unit"]] += 1
        if not slot_taken:
            with self._slot_freed:
                while self._free_slots == 0:
                    if cancellation is not None:
                        cancellation.check()
                    self._slot_freed.wait(CANCEL_POLL_S)
                self._free_slots -= 1
        try:
            if cancellation is not None:
                cancellation.check()
            try:
                zygote = self._ensure_zygote()
                future = zygote.submit(request["id"], request)
            except OSError:  # the zygote died since: once more, on a new one
                self._forget(self._zygote)
                zygote = self._ensure_zygote()
                future = zygote.submit(request["id"], request)
        except BaseException:
            self._give_slot()
            raise
        future.add_done_callback(lambda _: self._give_slot())
        if cancellation is not None:
            cancellation.track(request["id"], zygote)
            future.add_done_callback(lambda _: cancellation.forget(request["id"]))
        return future

    def _wait(self, future: Future, limits: SandboxLimits, programs: int = 1) -> tuple[dict, bytes]:
        header, data = future.result(timeout=programs * limits.timeout_s + START_TIMEOUT_S)
        if header.get("cancelled"):
            raise UnitsCancelled("the caller cancelled its sandbox units")
        if not header.get("failed"):
            self.last_unit_ok = time.monotonic()
        return header, data

    def execute(self, source: str, call: str | None = None, *, trace: bool = False,
                limits: SandboxLimits | None = None) -> ExecutionResult:
        """Runs a module, then calls `call` if given; with `trace`, records its assignments."""
        limits = limits or self.limits
        key = (call, trace, tuple(limits.__dict__.items()))
        entry = _Waiting(source)
        with self._slot_freed:
            waiting = self._waiting.setdefault(key, [])
            waiting.append(entry)
            while self._free_slots == 0 and not entry.taken:
                self._slot_freed.wait()
            group = None
            if not entry.taken:  # this caller has a slot: it runs its program and the others waiting like it
                self._free_slots -= 1
                group = [entry] + [other for other in waiting if other is not entry][:MAX_COALESCED - 1]
                for member in group:
                    member.taken = True
                waiting[:] = [other for other in waiting if not other.taken]
                if not waiting:
                    del self._waiting[key]
                if len(group) > 1:
                    self._slot_freed.notify_all()  # their callers wait for the result now, not for a slot
        if group is not None:
            self._run_taken(group, call, trace, limits)
        return _counted(entry.future.result())

    def _run_taken(self, group: list[_Waiting], call: str | None, trace: bool, limits: SandboxLimits) -> None:
        """Runs the programs on the slot already taken: one alone in an exec unit, several in a batch unit
        (those whose batch result could depend on the sharing then run alone); every one's future gets its
        result, or the error."""
        try:
            request = {"call": call, "trace": trace}
            if len(group) == 1:
                future = self._submit({**request, "unit": wire.EXEC, "source": group[0].source}, limits,
                                      slot_taken=True)
                results: list[ExecutionResult | None] = [outcome.execution_result(*self._wait(future, limits), limits)]
            else:
                with self._lock:
                    self.counts["coalesced"] += len(group)
                future = self._submit({**request, "unit": wire.BATCH, "sources": [m.source for m in group]}, limits,
                                      slot_taken=True, own=False)
                results = outcome.batch_results(*self._wait(future, limits, len(group)), limits, len(group))
                alone = {index: self._submit({**request, "unit": wire.EXEC, "source": group[index].source}, limits,
                                             own=False)
                         for index, result in enumerate(results) if result is None}
                for index, future in alone.items():
                    results[index] = outcome.execution_result(*self._wait(future, limits), limits)
        except BaseException as exc:
            for member in group:
                if not member.future.done():
                    member.future.set_exception(exc)
            return
        for member, result in zip(group, results):
            member.future.set_result(result)

    def trace_call(self, source: str, func: str = "solve", *, limits: SandboxLimits | None = None) -> ExecutionResult:
        """Calls `func` of the module in `source` and records every assignment it makes."""
        return self.execute(source, func, trace=True, limits=limits)

    def trace_batch(self, original: str, variants: list[str], func: str = "solve", *,
                    limits: SandboxLimits | None = None, parallel: bool = True) -> list[ExecutionResult]:
        """trace_call on the original and each variant; results in order, original first.

        The programs share batch units, split over the free slots when there are many and `parallel`
        (a caller whose cores are busy anyway passes False, and a sandbox whose slots are all taken by
        other callers gets no more: one unit, the fewest forks); what `trace_call` would give each of
        them is what it gets. A unit's report is capped as one program's: a unit whose report filled it before
        its last program hands the programs it did not reach to another unit."""
        limits = limits or self.limits
        if not variants:
            return [self.trace_call(original, func, limits=limits)]
        call = {"call": func, "trace": True}
        sources = [original, *variants]
        units = min(self._free_slots, len(sources) // MIN_PROGRAMS_PER_UNIT) if parallel else 1
        units = max(1, units)
        size = -(-len(sources) // units)
        parts = [range(start, min(start + size, len(sources))) for start in range(0, len(sources), size)]
        def submit(part: range) -> tuple[range, Future]:
            return part, self._submit({**call, "unit": wire.BATCH, "sources": sources[part.start:part.stop]}, limits)

        pending = [submit(part) for part in parts]
        results: list[ExecutionResult | None] = [None] * len(sources)
        while pending:
            following = []
            for part, future in pending:
                header, data = self._wait(future, limits, len(part))
                results[part.start:part.stop] = outcome.batch_results(header, data, limits, len(part))
                reached = outcome.sections_reached(data) if header.get("result_overflow") else len(part)
                if 0 < reached < len(part):
                    following.append(submit(range(part.start + reached, part.stop)))
            pending = following
        alone = {index: self._submit({**call, "unit": wire.EXEC, "source": sources[index]}, limits)
                 for index, result in enumerate(results) if result is None}
        with self._lock:
            self.counts["alone"] += len(alone)
        for index, future in alone.items():
            results[index] = outcome.execution_result(*self._wait(future, limits), limits)
        for result in results:
            _counted(result)
        return results

    def run_tests(self, module_source: str, test_source: str, module_name: str, *,
                  limits: SandboxLimits | None = None) -> TestRunResult:
        """Imports the module as `module_name`, runs the tests with unittest, reports each test's outcome."""
        limits = limits or self.limits
        future = self._submit({"unit": wire.TESTS, "module_source": module_source, "test_source": test_source,
                               "module_name": module_name}, limits)
        return _counted(outcome.suite_result(*self._wait(future, limits), limits))

    def run_suite(self, archive: bytes, overlay: dict[str, str] | None = None, *, source_roots: list[str] = ("",),
                  args: list[str] = (), coverage_files: list[str] | None = None,
                  limits: SandboxLimits | None = None, environment: str | None = None,
                  other_user: bool = False) -> SuiteRunResult:
        """Runs the pytest suite of the project in `archive` (tar.gz) with `overlay` written over it; each test's
        outcome by node id. With `coverage_files`, also which of their functions each test executed. pytest
        comes from pytest_path(), which the sandbox's read_paths must include. With `environment` (a folder of
        installed wheels under the read paths, as flawforge.debugging.environments builds), the project sees the
        standard library and that folder, not the host's site-packages. With `other_user`, the tests see another
        user than the unit's (runtime.suite.OtherUser)."""
        limits = limits or self.limits
        future = self._submit({"unit": wire.SUITE, "archive": base64.b64encode(archive).decode("ascii"),
                               "overlay": overlay or {}, "source_roots": list(source_roots), "args": list(args),
                               "coverage": coverage_files is not None, "coverage_files": coverage_files or [],
                               "other_user": other_user, **self._python_path(environment)}, limits)
        return _counted(outcome.project_suite_result(*self._wait(future, limits), limits))

    def _python_path(self, environment: str | None) -> dict:
        """What a suite unit imports from: pytest's folder, or the environment's (a folder the units may read)."""
        if environment is None:
            return {"python_path": [pytest_path()]}
        path = os.path.realpath(environment)
        readable = [os.path.realpath(p) for p in self._config["read_paths"]]
        if not os.path.isdir(path) or not any(path.startswith(root.rstrip("/") + "/") for root in readable):
            raise InvalidInput(f"environment {environment}: not a folder under the sandbox's read paths")
        return {"python_path": [pytest_path()], "environment": path}


def _counted(result):
    """Every result the sandbox hands out passes here: counted by outcome (flawforge_sandbox_units_total)."""
    SANDBOX_OUTCOMES.labels(result.outcome).inc()
    return result


def pytest_path() -> str:
    """The host folder pytest is imported from; a sandbox running suites must be allowed to read it
    (`read_paths`)."""
    import pytest

    return os.path.dirname(os.path.dirname(os.path.abspath(pytest.__file__)))
