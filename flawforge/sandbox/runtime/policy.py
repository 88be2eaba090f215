"""The unit's audit hook: names the escape a program attempts and stops it there.

This layer classifies; the operating-system layers (namespaces, unprivileged uid,
resource limits) contain. Hooks cannot be removed once added, and each forbidden event
is reported on the result pipe before the operation fails with PermissionError, so a
program that swallows the error is still reported as `forbidden`.
"""
import os
import sys

PROCESS_EVENTS = frozenset({"os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                            "subprocess.Popen", "os.startfile", "webbrowser.open", "pty.spawn"})
SIGNAL_EVENTS = frozenset({"os.kill", "os.killpg", "signal.pthread_kill"})
LIMIT_EVENTS = frozenset({"resource.setrlimit", "resource.prlimit"})
INTROSPECTION_EVENTS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents",
                                  "sys._current_frames", "sys._current_exceptions"})
NETWORK_PREFIXES = ("socket.", "urllib.", "http.client.", "ftplib.", "smtplib.", "poplib.", "imaplib.",
                    "nntplib.", "telnetlib.", "syslog.")
DENIED_MODULES = frozenset({"ctypes", "_ctypes", "_posixsubprocess", "_testcapi", "_testinternalcapi",
                            "_xxsubinterpreters", "_xxinterpchannels", "_tkinter"})
# event -> (indices of its path arguments, whether they are written)
PATH_EVENTS = {
    "os.listdir": ((0,), False), "os.scandir": ((0,), False), "os.chdir": ((0,), False),
    "os.getxattr": ((0,), False), "os.listxattr": ((0,), False),
    "os.mkdir": ((0,), True), "os.remove": ((0,), True), "os.rmdir": ((0,), True),
    "os.rename": ((0, 1), True), "os.link": ((0, 1), True), "os.truncate": ((0,), True),
    "os.chmod": ((0,), True), "os.chown": ((0,), True), "os.utime": ((0,), True), "os.chflags": ((0,), True),
    "os.lchflags": ((0,), True), "os.lchmod": ((0,), True), "os.setxattr": ((0,), True),
    "os.removexattr": ((0,), True), "shutil.copyfile": ((1,), True), "shutil.copymode": ((1,), True),
    "shutil.copystat": ((1,), True), "shutil.copytree": ((1,), True), "shutil.rmtree": ((0,), True),
    "shutil.move": ((0, 1), True), "shutil.chown": ((0,), True), "tempfile.mkstemp": ((0,), True),
    "tempfile.mkdtemp": ((0,), True), "sqlite3.connect": ((0,), True),
}
WATCHED = PROCESS_EVENTS | SIGNAL_EVENTS | LIMIT_EVENTS | INTROSPECTION_EVENTS | set(PATH_EVENTS) | {
    "open", "import", "os.symlink"}
DEVICES = frozenset({"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
                     "/dev/stdin", "/dev/stdout", "/dev/stderr"})
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Paths:
    """Where a unit may read (its work dir, the Python library, configured extras) and write (its work dir)."""

    def __init__(self, workdir: str, read_roots: list[str], inherited: frozenset[int] = frozenset()):
        """Both already real paths (resolved once in the zygote, not in every unit); `inherited`: the file
        descriptors beyond the standard streams the unit started with (its result pipe)."""
        self.workdir = workdir
        self.read_roots = read_roots
        self.inherited = inherited

    @staticmethod
    def _inside(path: str, root: str) -> bool:
        return path == root or path.startswith(root.rstrip("/") + "/")

    def resolve(self, path) -> str | None:
        """Absolute real path, or None for a file descriptor or an in-memory name."""
        if isinstance(path, int):
            return None
        text = os.fsdecode(os.fspath(path))
        if text in DEVICES:
            return text
        return os.path.realpath(text)  # relative to the current directory, like the call itself

    def may_write(self, real: str) -> bool:
        return self._inside(real, self.workdir) or real in DEVICES

    def may_read(self, real: str) -> bool:
        return self.may_write(real) or any(self._inside(real, root) for root in self.read_roots)


def _writes(mode, flags) -> bool:
    if isinstance(mode, str) and mode:
        return any(c in mode for c in "wax+")
    return bool(isinstance(flags, int) and flags & WRITE_FLAGS)


def judge(event: str, args: tuple, paths: Paths) -> str | None:
    """Why the event is forbidden, or None if it is allowed."""
    if event in PROCESS_EVENTS:
        return "starts a process"
    if event in SIGNAL_EVENTS:
        return "sends a signal"
    if event in LIMIT_EVENTS:
        return "changes resource limits"
    if event in INTROSPECTION_EVENTS:
        return "walks the interpreter's objects"
    if event.startswith("ctypes."):
        return "calls foreign code through ctypes"
    if event.startswith(NETWORK_PREFIXES):
        return "uses the network"
    if event == "import":
        root = str(args[0]).partition(".")[0]
        return f"imports {root}" if root in DENIED_MODULES else None
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        if isinstance(path, int):
            # A descriptor the program made itself (mkstemp's, a pipe's) is its own to wrap in a file object.
            return "opens an inherited file descriptor" if path in paths.inherited else None
        real = paths.resolve(path)
        write = _writes(mode, flags)
        allowed = paths.may_write(real) if write else paths.may_read(real)
        return None if allowed else f"{'writes' if write else 'reads'} {real} outside its work dir"
    if event == "os.symlink":
        source, link = args[0], args[1]
        real_link = paths.resolve(link)
        target = os.path.join(os.path.dirname(real_link), os.fsdecode(os.fspath(source)))
        real_target = os.path.realpath(target)
        if not paths.may_write(real_link) or not paths.may_write(real_target):
            return f"links {real_link} to {real_target} outside its work dir"
        return None
    indices, write = PATH_EVENTS[event]
    for index in indices:
        if index >= len(args) or args[index] is None or isinstance(args[index], int):
            continue
        if event == "sqlite3.connect" and args[index] in (":memory:", "", b":memory:", b""):
            continue
        real = paths.resolve(args[index])
        if not (paths.may_write(real) if write else paths.may_read(real)):
            return f"{'changes' if write else 'reads'} {real} outside its work dir"
    return None


def open_descriptors(most: int) -> frozenset[int]:
    """The descriptors above the standard streams open now, up to `most`."""
    found = set()
    for fd in range(3, most):
        try:
            os.fstat(fd)
        except OSError:
            continue
        found.add(fd)
    return frozenset(found)


def install(paths: Paths, report) -> None:
    """Adds the hook; `report(event, reason)` is called once, for the first forbidden event."""
    state = {"busy": False, "reported": False}

    def hook(event: str, args: tuple) -> None:
        if event not in WATCHED and not event.startswith(("ctypes.", "socket.")) \
                and not event.startswith(NETWORK_PREFIXES):
            return
        if state["busy"]:  # our own path resolution may raise events
            return
        state["busy"] = True
        try:
            reason = judge(event, args, paths)
        except Exception as exc:  # an argument we cannot interpret is not allowed through
            reason = f"passes arguments the sandbox cannot check ({type(exc).__name__})"
        finally:
            state["busy"] = False
        if reason is None:
            return
        if not state["reported"]:
            state["reported"] = True
            report(event, reason)
        raise PermissionError(f"sandbox: {reason} ({event})")

    sys.addaudithook(hook)
