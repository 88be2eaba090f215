"""The fork server: sets up the isolation layers once, then forks one process per unit.

Started by the service as a bare interpreter (`python -I -S`) with an empty environment,
it receives this code over its control socket, imports what programs commonly need,
enters fresh network, mount and PID namespaces (where the kernel allows), builds a
root filesystem holding only the system and Python libraries, and serves requests:
each unit is forked from this warm parent (fast), gets its own throwaway work dir,
resource limits and an unprivileged uid, and is killed with its process group at the
wall-clock deadline. The service gets back the unit's exit status, resource usage,
capped stdout/stderr and its report lines, uninterpreted. A batch unit runs several
programs one after another; each gets the whole wall-clock limit, counted from its
start marker in the report.

A unit's report is capped at its `result_bytes` however many programs it holds,
and never held here whole: it is passed on to the service in chunks of SPOOL_BYTES as it
arrives (["chunk", id] frames), which the service spools to a file.
"""
import ctypes
import fcntl
import gc
import importlib
import json
import math
import os
import platform
import resource
import selectors
import shutil
import signal
import socket
import stat
import sys
import time
from dataclasses import dataclass, field

from flawforge.sandbox.runtime import seccomp, unit, wire

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 38, 36
PIVOT_ROOT_SYSCALL = {"x86_64": 155, "aarch64": 41}
O_TMPFILE = getattr(os, "O_TMPFILE", 0)
NEW_ROOT = "/tmp"  # in the private mount namespace only: the host's /tmp is untouched
UNITS_DIR = "/tmp"  # inside the new root
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin")
DEVICES = ("null", "zero", "full", "random", "urandom")
FIRST_FREE_FD = 64
# Report bytes of one unit held here before they go to the service as a chunk.
SPOOL_BYTES = 1 << 16
# Not random (nor statistics, tempfile, which import it): its fork hook would reseed in every unit.
PRELOAD = ("fractions", "decimal", "math", "cmath", "itertools", "functools",
           "collections", "operator", "re", "string", "datetime", "json", "dataclasses", "typing", "enum",
           "heapq", "bisect", "copy", "numbers", "textwrap", "unittest", "inspect", "abc",
           "contextlib", "array", "struct", "hashlib", "base64", "pathlib", "io", "traceback", "tokenize")

libc = ctypes.CDLL(None, use_errno=True)


def _call(name: str, *args) -> None:
    if getattr(libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None) -> None:
    _call("mount", source and source.encode(), target.encode(), fstype and fstype.encode(), flags,
          data and data.encode())


class Isolation:
    """Enters what the kernel allows; `layers` maps each layer to None (active) or why it is missing."""

    def __init__(self, config: dict):
        self.config = config
        self.layers: dict[str, str | None] = {
            "process": None, "rlimits": None, "wall_timeout": None, "workdir": None,
            "empty_env": None if not os.environ else "the environment is not empty",
            "audit": None if config["audit"] else "disabled by configuration",
        }
        self.is_init = False

    def enter(self) -> None:
        """Namespaces first; a new PID namespace needs a fork, after which this process is its init."""
        self.in_user_ns = False
        if not self.config["namespaces"]:
            for layer in ("netns", "mountns", "pidns"):
                self.layers[layer] = "disabled by configuration"
        else:
            if os.geteuid() != 0:
                self._enter_user_namespace()
            self.layers["netns"] = self._unshare(CLONE_NEWNET)
            self.layers["mountns"] = self._unshare(CLONE_NEWNS)
            self.layers["pidns"] = (self._unshare(CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS)
                                    if self.layers["mountns"] is None else "needs the mount namespace")
        if self.layers["pidns"] is None:
            self._become_init()
        if self.layers["mountns"] is None:
            try:
                self._build_root()
            except OSError as exc:
                self.layers["mountns"] = f"could not build the sandbox root: {exc}"
                if self.layers["pidns"] is None:
                    self.layers["pidns"] = "needs the sandbox root (for its /proc)"
        if not self.is_init:
            try:  # orphans of units come back to us, to be killed
                _call("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
            except OSError:
                pass
        self.layers["uid"] = self._probe_uid()
        self.filter, self.layers["seccomp"] = seccomp.make_filter()
        if self.filter is not None:
            self.layers["seccomp"] = self._probe_seccomp()

    def _unshare(self, flags: int) -> str | None:
        try:
            _call("unshare", flags)
            return None
        except OSError as exc:
            return f"unshare refused: {exc.strerror}"

    def _enter_user_namespace(self) -> None:
        uid, gid = os.geteuid(), os.getegid()
        if self._unshare(CLONE_NEWUSER) is None:
            with open("/proc/self/setgroups", "w") as f:
                f.write("deny")
            with open("/proc/self/uid_map", "w") as f:
                f.write(f"0 {uid} 1")
            with open("/proc/self/gid_map", "w") as f:
                f.write(f"0 {gid} 1")
            self.in_user_ns = True

    def _become_init(self) -> None:
        child = os.fork()
        if child:  # stays outside, only to hold the namespace's init
            _, status = os.waitpid(child, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
        self.is_init = True
        _call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    def _build_root(self) -> None:
        """A read-only tmpfs root with the system and Python libraries bound read-only, then pivot into it."""
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        # Found and opened before the tmpfs covers NEW_ROOT: a read path below it (a checkout and its .venv
        # under /tmp) stays reachable through its descriptor.
        sources = [(path, os.readlink(path) if os.path.islink(path) else os.open(path, os.O_PATH))
                   for path in self.read_paths()]
        _mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
        for path, source in sources:
            self._bind(source, NEW_ROOT + path)
        os.makedirs(NEW_ROOT + "/dev", mode=0o755)
        for name in DEVICES:
            if os.path.exists(f"/dev/{name}"):
                open(f"{NEW_ROOT}/dev/{name}", "w").close()
                _mount(f"/dev/{name}", f"{NEW_ROOT}/dev/{name}", None, MS_BIND)
        os.makedirs(NEW_ROOT + "/proc", mode=0o555)
        for slot in range(self.config["slots"]):
            os.makedirs(f"{NEW_ROOT}{UNITS_DIR}/{slot}", mode=0o755)
        os.chdir(NEW_ROOT)
        number = PIVOT_ROOT_SYSCALL.get(platform.machine())
        if number is not None:
            _call("syscall", number, b".", b".")
            _call("umount2", b".", MNT_DETACH)
        else:
            os.chroot(".")
        os.chdir("/")
        # Units see only their own processes (hidepid); the zygote needs /proc to find strays.
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")
        if self.is_init:
            socket.sethostname("sandbox")
        _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)

    def read_paths(self) -> list[str]:
        """Host paths a unit sees (read-only): system libraries, the Python library, configured extras."""
        wanted = [p for p in SYSTEM_DIRS if os.path.lexists(p)]
        wanted += [sys.base_prefix] + [p for p in self.config["library_path"] if os.path.isdir(p)]
        wanted += [p for p in self.config["read_paths"] if os.path.exists(p)]
        chosen: list[str] = []
        for path in sorted({os.path.abspath(p) for p in wanted}, key=len):
            if not any(path == c or path.startswith(c + "/") for c in chosen):
                chosen.append(path)
        return chosen

    def _bind(self, source: str | int, target: str) -> None:
        """`source`: a symlink's target (text), made again at `target`, or a descriptor opened with O_PATH on
        what is bound there read-only."""
        if isinstance(source, str):
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            os.symlink(source, target)
            return
        if stat.S_ISDIR(os.fstat(source).st_mode):
            os.makedirs(target, mode=0o755, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            open(target, "w").close()
        try:
            _mount(f"/proc/self/fd/{source}", target, None, MS_BIND | MS_REC)
        finally:
            os.close(source)
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)

    def _probe_uid(self) -> str | None:
        """Units run as uid_base+slot; find out whether this process may switch to them."""
        if os.geteuid() != 0 or self.in_user_ns:
            return "not running as root: units keep the service's uid"
        library = [p for p in self.config["library_path"] if os.path.isdir(p)]
        probe = os.fork()
        if probe == 0:
            try:
                os.setgroups([])
                os.setresgid(self.config["uid_base"], self.config["uid_base"], self.config["uid_base"])
                os.setresuid(self.config["uid_base"], self.config["uid_base"], self.config["uid_base"])
            except BaseException:
                os._exit(1)
            # Without the sandbox root, the host's permissions may hide the Python library from it.
            os._exit(0 if all(os.access(p, os.R_OK | os.X_OK) for p in library) else 2)
        _, status = os.waitpid(probe, 0)
        return {0: None, 2: "an unprivileged uid cannot read the Python library here"}.get(
            os.waitstatus_to_exitcode(status), "setuid to an unprivileged uid failed")

    def _probe_seccomp(self) -> str | None:
        """Installs the filter in a child that then makes a denied call: it must die of SIGSYS."""
        probe = os.fork()
        if probe == 0:
            try:
                _call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
                self.filter.install()
                _call("unshare", 0)
            except BaseException:
                os._exit(1)
            os._exit(2)
        _, status = os.waitpid(probe, 0)
        return {-signal.SIGSYS: None, 1: "the kernel refused the filter"}.get(
            os.waitstatus_to_exitcode(status), "the filter did not stop a denied call")

    def active(self, layer: str) -> bool:
        return self.layers.get(layer) is None


class Workdirs:
    """A fresh, size-limited work dir per unit: a tmpfs per slot, or a host temp dir emptied after use.

    A slot's tmpfs is kept while units leave it as they found it (empty, same mode and owner, no
    extended attributes); anything else and it is unmounted, so the next unit gets a new one. Its
    times are reset after each unit: nothing a unit can set on it reaches the next one.
    """

    def __init__(self, isolation: Isolation):
        self.mounted = isolation.active("mountns")
        if self.mounted:
            self.root = UNITS_DIR
        else:
            self.root = os.path.realpath(f"/tmp/flawforge-sandbox-{os.urandom(8).hex()}")
            os.mkdir(self.root, 0o711)
        self.uid_base = isolation.config["uid_base"] if isolation.active("uid") else None
        self.ready: dict[int, tuple] = {}  # slot -> (size in MiB, stat of the pristine dir)

    def prepare(self, slot: int, limits: dict) -> str:
        path = f"{self.root}/{slot}"
        size = limits["workdir_mb"]
        kept = self.ready.get(slot)
        if kept is not None and kept[0] == size:
            return path
        if kept is not None:
            self._discard(slot, path)
        owner = self.uid_base + slot if self.uid_base is not None else os.geteuid()
        if self.mounted:
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV,
                   f"size={size}m,nr_inodes=4096,mode=0700,uid={owner},gid={owner}")
        else:
            os.makedirs(path, mode=0o700, exist_ok=True)
            os.chown(path, owner, owner)
        os.utime(path, ns=(0, 0))
        self.ready[slot] = (size, self._fingerprint(path))
        return path

    @staticmethod
    def _fingerprint(path: str) -> tuple:
        st = os.stat(path)
        return st.st_mode, st.st_uid, st.st_gid

    def full(self, path: str) -> bool:
        if not self.mounted:
            return False
        stat = os.statvfs(path)
        return stat.f_bavail * stat.f_frsize < 64 * 1024 or stat.f_favail == 0

    def release(self, slot: int, path: str) -> None:
        kept = self.ready.get(slot)
        try:
            pristine = kept is not None and not os.listdir(path) and self._fingerprint(path) == kept[1] \
                and not os.listxattr(path)
            if pristine:
                os.utime(path, ns=(0, 0))
        except OSError:
            pristine = False
        if not pristine:
            self._discard(slot, path)

    def close(self) -> None:
        if not self.mounted:  # a mounted root vanishes with the namespace
            shutil.rmtree(self.root, ignore_errors=True)

    def _discard(self, slot: int, path: str) -> None:
        self.ready.pop(slot, None)
        if self.mounted:
            _call("umount2", path.encode(), MNT_DETACH)
        else:
            shutil.rmtree(path, ignore_errors=True)


def _scratch_file(directory: str) -> int:
    """An unnamed file for the unit's stdout or stderr, counted in its work dir's size."""
    if O_TMPFILE:
        try:
            return os.open(directory, O_TMPFILE | os.O_RDWR, 0o600)
        except OSError:
            pass
    name = f"{directory}/.output-{os.urandom(8).hex()}"
    fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.unlink(name)
    return fd


@dataclass(slots=True)
class Unit:
    """A running unit, as the zygote tracks it from fork to report."""

    id: int                # the service's id of the request
    pid: int
    slot: int              # its uid and work dir
    workdir: str
    pipe: int              # read end of its result pipe
    out: int               # its stdout and stderr files
    err: int
    started: float         # time.monotonic() at fork
    deadline: float        # when it is killed; moved on as each program of a batch starts
    timeout: float         # the wall-clock limit, each program's
    result_cap: int        # report bytes it may still send (for the whole unit, all its programs)
    output_cap: int        # stdout and stderr bytes kept, each
    cpu_limit: int         # CPU seconds, each program's
    programs: int          # programs of a batch; 0 for other units
    expires: float         # the batch's whole wall-clock cap: no program's limit runs past it
    result: bytearray = field(default_factory=bytearray)  # report bytes not yet sent, under SPOOL_BYTES
    overflow: bool = False
    timed_out: bool = False
    cancelled: bool = False  # killed because its caller went away
    started_programs: int = 0
    marker_tail: bytes = b""  # the last bytes read, where a program marker may have begun


class Server:
    def __init__(self, sock: socket.socket, isolation: Isolation, config: dict):
        self.sock = sock
        self.isolation = isolation
        self.config = config
        self.workdirs = Workdirs(isolation)
        self.free_slots = list(range(config["slots"]))[::-1]
        self.units: dict[int, Unit] = {}
        self.by_pipe: dict[int, Unit] = {}
        self.inbox = b""
        self.devnull = os.open("/dev/null", os.O_RDWR)
        self.statm = os.open("/proc/self/statm", os.O_RDONLY)  # read in the child: its own after fork
        try:  # this process's children (it is single-threaded), to find strays after each unit
            self.children = os.open(f"/proc/{os.getpid()}/task/{os.getpid()}/children", os.O_RDONLY)
        except OSError:
            self.children = None
        self.page_size = os.sysconf("SC_PAGE_SIZE")
        self.hidden_modules = unit.hidden_modules()
        self.streams = unit.standard_streams()
        self.selector = selectors.DefaultSelector()
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.wake = wake_r
        self.selector.register(sock, selectors.EVENT_READ)
        self.selector.register(wake_r, selectors.EVENT_READ)

    # --- main loop -------------------------------------------------------------------------
    def serve(self) -> None:
        while True:
            now = time.monotonic()
            timeout = min((u.deadline for u in self.units.values() if not u.timed_out), default=None)
            events = self.selector.select(None if timeout is None else max(0.0, timeout - now))
            for key, _ in events:
                if key.fileobj is self.sock:
                    if not self._receive():
                        return
                elif key.fileobj == self.wake:
                    try:
                        os.read(self.wake, 4096)
                    except BlockingIOError:
                        pass
                else:
                    self._read_result(self.by_pipe[key.fileobj])
            now = time.monotonic()
            for u in list(self.units.values()):
                if not u.timed_out and now >= u.deadline:
                    u.timed_out = True
                    self._kill(u)
            self._reap()

    def _receive(self) -> bool:
        try:
            data = self.sock.recv(1 << 20, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return True
        if not data:
            return False
        self.inbox += data
        while len(self.inbox) >= 4:
            (size,) = wire.HEADER.unpack_from(self.inbox)
            if len(self.inbox) < 4 + size:
                break
            request, self.inbox = json.loads(self.inbox[4:4 + size]), self.inbox[4 + size:]
            if request.get("op") == "cancel":
                self._cancel(request["id"])
                continue
            try:
                self._start(request)
            except OSError as exc:  # e.g. fork refused: that unit fails, the server goes on
                self.sock.sendall(wire.pack({"op": "failed", "id": request["id"], "reason": str(exc)}) +
                                  wire.HEADER.pack(0))
        return True

    def _cancel(self, unit_id: int) -> None:
        for u in self.units.values():
            if u.id == unit_id:
                u.cancelled = True
                self._kill(u)

    # --- one unit --------------------------------------------------------------------------
    def _start(self, request: dict) -> None:
        limits = request["limits"]
        sections = wire.sections_of(request)
        programs = max(1, sections)
        slot = self.free_slots.pop()
        opened: list[int] = []
        workdir = None
        try:
            workdir = self.workdirs.prepare(slot, limits)
            opened += [_scratch_file(workdir), _scratch_file(workdir)]
            opened += os.pipe()
            out, err, read_fd, write_fd = opened
            started = time.monotonic()
            pid = os.fork()
        except OSError:
            for fd in opened:
                os.close(fd)
            if workdir is not None:
                self.workdirs.release(slot, workdir)
            self.free_slots.append(slot)
            raise
        if pid == 0:
            self._child(request, limits, self._cpu_limit(limits) * programs, slot, workdir, out, err, write_fd)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        expires = started + request.get("max_wall_s", math.inf)
        u = Unit(id=request["id"], pid=pid, slot=slot, workdir=workdir, pipe=read_fd, out=out, err=err,
                 started=started, deadline=min(expires, started + limits["timeout_s"]), timeout=limits["timeout_s"],
                 result_cap=limits["result_bytes"], output_cap=limits["output_bytes"],
                 cpu_limit=self._cpu_limit(limits), programs=sections, expires=expires)
        self.units[pid] = u
        self.by_pipe[read_fd] = u
        self.selector.register(read_fd, selectors.EVENT_READ)

    @staticmethod
    def _cpu_limit(limits: dict) -> int:
        return math.ceil(limits["timeout_s"]) + 1  # the wall clock normally fires first

    def _child(self, request, limits, cpu_limit, slot, workdir, out, err, result_fd) -> None:
        try:
            os.setsid()
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            # Move every fd the unit keeps out of the way first, so no dup2 clobbers another's source.
            keep = [fcntl.fcntl(fd, fcntl.F_DUPFD, FIRST_FREE_FD)
                    for fd in (self.devnull, out, err, result_fd, self.statm)]
            for target, fd in enumerate(keep):
                os.dup2(fd, target)
            self.statm = unit.RESULT_FD + 1
            os.closerange(unit.RESULT_FD + 2, os.sysconf("SC_OPEN_MAX"))
            os.chdir(workdir)
            mib = 1 << 20
            mapped = self.page_size * int(os.pread(self.statm, 64, 0).split()[0])  # memory_mb is on top of this
            for kind, value in ((resource.RLIMIT_CPU, cpu_limit), (resource.RLIMIT_CORE, 0),
                                (resource.RLIMIT_AS, mapped + limits["memory_mb"] * mib),
                                (resource.RLIMIT_FSIZE, limits["file_size_mb"] * mib),
                                (resource.RLIMIT_NOFILE, limits["open_files"]),
                                (resource.RLIMIT_MEMLOCK, 0), (resource.RLIMIT_MSGQUEUE, 0)):
                resource.setrlimit(kind, (value, value))
            _call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            if self.isolation.active("uid"):
                uid = self.config["uid_base"] + slot
                resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))  # its own process only: no fork
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
            os.close(self.statm)
            if self.isolation.active("seccomp"):
                self.isolation.filter.install()
            unit.run(request, unit.Interpreter(self.config["library_path"], self.hidden_modules, self.streams,
                                               self.config["standard_path"]),
                     self.config["unit_read_roots"], self.isolation.active("audit"))
        finally:
            os._exit(wire.RUNNER_FAILED)

    def _read_result(self, u: Unit) -> bool:
        """Takes what the unit wrote to its pipe, within its cap; False when there was nothing to read."""
        try:
            chunk = os.read(u.pipe, SPOOL_BYTES)
        except BlockingIOError:
            return False
        if not chunk:
            self.selector.unregister(u.pipe)
            del self.by_pipe[u.pipe]
            return False
        if u.overflow:
            return True
        if u.programs:
            self._count_programs(u, chunk)
        if len(chunk) > u.result_cap:  # what is past the cap is dropped: the unit is killed for it
            chunk = chunk[:u.result_cap]
            u.overflow = True
            self._kill(u)
        u.result_cap -= len(chunk)
        u.result += chunk
        if len(u.result) >= SPOOL_BYTES:
            self.sock.sendall(wire.pack({"op": "chunk", "id": u.id}) + wire.HEADER.pack(len(u.result)) + u.result)
            u.result.clear()
        return True

    @staticmethod
    def _count_programs(u: Unit, chunk: bytes) -> None:
        """A batch program started: it gets the whole wall-clock limit from now."""
        joined = u.marker_tail + chunk  # a marker may straddle two chunks
        seen = joined.count(wire.PROGRAM_MARKER)
        u.marker_tail = joined[1 - len(wire.PROGRAM_MARKER):]
        if seen and u.started_programs < u.programs:
            u.started_programs = min(u.programs, u.started_programs + seen)
            u.deadline = min(u.expires, time.monotonic() + u.timeout)

    @staticmethod
    def _kill(u: Unit, *, reaped: bool = False) -> None:
        # The group, and the process itself in case it has not called setsid yet (not once
        # reaped: its pid may be reused).
        for target in (-u.pid,) if reaped else (-u.pid, u.pid):
            try:
                os.kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _reap(self) -> None:
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            u = self.units.pop(pid, None)
            if u is not None:
                self._finish(u, status, usage)

    def _finish(self, u: Unit, status: int, usage) -> None:
        wall = time.monotonic() - u.started
        self._kill(u, reaped=True)
        self._kill_strays()
        while u.pipe in self.by_pipe and not u.overflow and self._read_result(u):
            pass
        if u.pipe in self.by_pipe:
            self.selector.unregister(u.pipe)
            del self.by_pipe[u.pipe]
        os.close(u.pipe)
        header = {"op": "done", "id": u.id, "exit": os.waitstatus_to_exitcode(status),
                  "cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall, "max_rss_kb": usage.ru_maxrss,
                  "timed_out": u.timed_out, "expired": u.timed_out and u.deadline >= u.expires,
                  "cancelled": u.cancelled, "result_overflow": u.overflow, "cpu_limit_s": u.cpu_limit,
                  "workdir_full": self.workdirs.full(u.workdir), "programs_started": u.started_programs}
        for name, fd in (("stdout", u.out), ("stderr", u.err)):
            size = os.fstat(fd).st_size
            header[name] = os.pread(fd, min(size, u.output_cap), 0).decode("utf-8", "replace")
            header[name + "_bytes"] = size
            os.close(fd)
        self.workdirs.release(u.slot, u.workdir)
        self.free_slots.append(u.slot)
        self.sock.sendall(wire.pack(header) + wire.HEADER.pack(len(u.result)) + u.result)

    def _kill_strays(self) -> None:
        """Processes a unit left behind were re-parented to us; none may outlive its unit."""
        if self.children is None:
            return
        try:
            children = [int(p) for p in os.pread(self.children, 1 << 16, 0).split()]
        except OSError:
            return
        for pid in children:
            if pid not in self.units:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def shutdown(self) -> None:
        for u in list(self.units.values()):
            self._kill(u)
        self.workdirs.close()


def main(fd: int, config: dict) -> None:
    sock = socket.socket(fileno=fd)
    os.environ.clear()  # started with none, but the interpreter may add some (locale coercion)
    # The standard library's folders: with an environment, a suite unit's sys.path holds these and not the host's
    # site-packages.
    config["standard_path"] = [p for p in sys.path if p and os.path.isabs(p)]
    sys.path.extend(config.get("preload_path", []))  # a sandbox's own trusted modules (a suite sandbox's pytest)
    for name in PRELOAD + tuple(config.get("preload", ())):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    config["library_path"] = [p for p in sys.path if p and os.path.isabs(p)]
    isolation = Isolation(config)
    isolation.enter()
    config["unit_read_roots"] = sorted({os.path.realpath(p) for p in
                                        [sys.base_prefix] + config["library_path"] + config["read_paths"]})
    server = Server(sock, isolation, config)
    sock.sendall(wire.pack({"op": "hello", "layers": isolation.layers, "pid": os.getpid()}))
    gc.collect()
    gc.freeze()  # the units' garbage collector then leaves the shared pages alone
    try:
        server.serve()
    finally:
        server.shutdown()
