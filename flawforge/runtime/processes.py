"""Worker processes for CPU-bound handlers, each fed through its own pipe.

A service's consumer threads share one core under the interpreter lock, so CPU-bound work
(the mutator's generation) runs in processes. `concurrent.futures.ProcessPoolExecutor` hands
each call through a manager thread and a feeder thread, and while another thread of the service
is busy (the template-loader validating) each hand-off contends for the interpreter lock: on the
math job that cost the service 0.7 ms of CPU a call. Here the calling thread writes the call
into its process's pipe and reads the answer itself, with no thread in between (0.25 ms a call).

A process answers calls in the order they were sent, so several threads can share one: a
second call waits in the pipe and starts the moment the first ends.
"""
from __future__ import annotations

import atexit
import logging
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import multiprocessing.util
import signal
import threading
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable, Sequence

from flawforge.errors import FlawforgeError

log = logging.getLogger(__name__)

# Set when the interpreter starts exiting. Registered after multiprocessing's own exit handler (imported above),
# so it runs before that handler terminates the worker processes (atexit runs last in, first out): a call cut
# short then died of the exit, which is no failure to report.
_EXITING = threading.Event()
atexit.register(_EXITING.set)


def interpreter_exiting() -> bool:
    return _EXITING.is_set()


class WorkerProcessDied(FlawforgeError):
    """The process died before answering (killed, out of memory): the call's outcome is unknown."""


def _serve(connection, initializer: Callable[[], None] | None) -> None:
    """A worker process's loop: calls in, (succeeded, result or exception) out, until the pipe closes."""
    # Ctrl-C at a terminal reaches the whole process group: the service decides, and closes the pipe. The
    # process was born with SIGINT blocked (see _fork_server_running): one that came while it started up was
    # pending, and ignoring it discards it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if initializer is not None:
        initializer()
    while True:
        try:
            function, args = connection.recv()
        except (EOFError, OSError):  # the service closed the pipe, or went away
            return
        try:
            answer = (True, function(*args))
        except BaseException as exc:  # the caller decides what an exception means
            answer = (False, exc)
        try:
            payload = ForkingPickler.dumps(answer)
        except Exception as exc:  # the result or exception would not pickle: say so instead
            payload = ForkingPickler.dumps((False, FlawforgeError(
                f"{function.__name__} returned what cannot be sent back ({type(exc).__name__}: {exc}); "
                f"its outcome: {answer[1]!r}")))
        try:
            connection.send_bytes(payload)
        except OSError:  # the service went away
            return


class WorkerProcess:
    """One process and the pipe to it; calls from several threads are answered in the order they were sent."""

    def __init__(self, context, initializer: Callable[[], None] | None = None):
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, initializer), daemon=True)
        self.process.start()
        child.close()
        self._send_lock = threading.Lock()
        self._turn = threading.Condition()
        self._sent = self._answered = 0
        self.dead = False

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """function(*args) in the process (both picklable); its exception is raised here. Raises WorkerProcessDied."""
        request = ForkingPickler.dumps((function, args))  # what will not pickle fails here, before taking a turn
        failure: BaseException | None = None
        with self._send_lock:
            ticket = self._sent
            self._sent += 1
            try:
                self.connection.send_bytes(request)
            except BaseException as exc:  # the process is gone (its pipe closed), or the request was cut short
                self.dead, failure = True, exc
        with self._turn:
            self._turn.wait_for(lambda: self._answered == ticket)
        try:
            if failure is not None:
                if not isinstance(failure, (OSError, ValueError)):
                    raise failure
                raise EOFError
            succeeded, value = self.connection.recv()  # an answer sent before the process died still arrives
        except (EOFError, OSError):
            self.dead = True
            raise WorkerProcessDied(f"worker process {self.process.pid} died before answering "
                                    f"(exit code {self.process.exitcode})") from None
        finally:  # the next caller's turn, whatever happened to this call
            with self._turn:
                self._answered += 1
                self._turn.notify_all()
        if not succeeded:
            raise value
        return value

    def close(self) -> None:
        self.connection.close()  # the process's loop ends at EOF
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def _fork_server_running() -> None:
    """Starts the fork server, or starts it again if it died, with SIGINT blocked in the calling thread: a mask the
    server and the processes it forks inherit. A forked process restores Python's KeyboardInterrupt handler
    before `_serve` can ignore SIGINT, so a Ctrl-C arriving while it starts up would otherwise end it before it
    answers (multiprocessing's resource tracker starts the same way). Called before every process start: when
    the server is up, it only checks that it is. A Ctrl-C to the calling thread itself waits for the mask's
    restoration."""
    # The resource tracker first, as the fork server's start would do: starting it unblocks SIGINT and SIGTERM
    # in the calling thread.
    multiprocessing.resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, ())  # the mask as it is
    try:  # the block itself may raise KeyboardInterrupt for a Ctrl-C that came before it, once it has blocked
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class WorkerProcesses:
    """A fixed number of worker processes, started from a fork server that has imported `preload` (quick to
    start, and never forked from the service's threads). A process that died is replaced at its next call."""

    def __init__(self, count: int, preload: Sequence[str] = (), initializer: Callable[[], None] | None = None):
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(list(preload))
        self._initializer = initializer
        self._locks = [threading.Lock() for _ in range(count)]  # one a slot: a slot starting a process stalls no other
        self._processes: list[WorkerProcess | None] = [None] * count

    def process(self, slot: int) -> WorkerProcess:
        with self._locks[slot]:
            current = self._processes[slot]
            if current is None or current.dead:
                if current is not None:
                    log.warning("replacing worker process %d, which died", current.process.pid)
                    current.process.join(0)  # reaped; its pipe closes when the threads that used it let go
                _fork_server_running()
                current = self._processes[slot] = WorkerProcess(self._context, self._initializer)
            return current

    def call(self, slot: int, function: Callable[..., Any], *args: Any) -> Any:
        return self.process(slot).call(function, *args)

    def close(self) -> None:
        for slot, lock in enumerate(self._locks):
            with lock:
                process, self._processes[slot] = self._processes[slot], None
            if process is not None:
                process.close()
