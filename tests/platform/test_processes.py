"""Worker processes fed through their own pipes (flawforge.runtime.processes), with real processes."""
from __future__ import annotations

import multiprocessing.forkserver
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flawforge.errors import FlawforgeError
from flawforge.runtime.processes import WorkerProcessDied, WorkerProcesses

REPO = Path(__file__).resolve().parents[2]
INITIALIZED = []


def initialize() -> None:
    INITIALIZED.append(os.getpid())


def echo(value):
    return value, os.getpid(), list(INITIALIZED)


def fail(message: str):
    raise ValueError(message)


def die(code: int):
    os._exit(code)


def die_after(seconds: float):
    time.sleep(seconds)
    os._exit(4)


def unsendable():
    return threading.Lock()


def arrive_slowly(seconds: float):
    time.sleep(seconds)
    return initialize


class SlowToArrive:
    """An initializer that takes a while to unpickle: a process receiving it is still starting up."""

    def __reduce__(self):
        return arrive_slowly, (0.5,)


@pytest.fixture
def processes():
    pool = WorkerProcesses(2, initializer=initialize)
    yield pool
    pool.close()


def test_threads_sharing_a_process_each_get_their_own_answers(processes):
    answers: dict[int, list] = {}

    def caller(thread: int) -> None:
        answers[thread] = [processes.call(thread % 2, echo, (thread, n)) for n in range(40)]

    threads = [threading.Thread(target=caller, args=(thread,)) for thread in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(answers) == list(range(6))
    pids = {}
    for thread, replies in answers.items():
        assert [value for value, _, _ in replies] == [(thread, n) for n in range(40)]
        pids.setdefault(thread % 2, set()).update(pid for _, pid, _ in replies)
    assert all(len(slot_pids) == 1 for slot_pids in pids.values())  # each slot is one process
    assert pids[0] != pids[1] and os.getpid() not in pids[0] | pids[1]
    assert all(initialized == [pid] for replies in answers.values() for _, pid, initialized in replies)


def test_an_exception_in_the_process_is_raised_to_the_caller_and_the_process_goes_on(processes):
    _, pid, _ = processes.call(0, echo, 1)
    with pytest.raises(ValueError, match="bad value 7"):
        processes.call(0, fail, "bad value 7")
    assert processes.call(0, echo, 2)[:2] == (2, pid)


def test_a_process_that_dies_is_reported_and_replaced_at_the_next_call(processes):
    _, pid, _ = processes.call(1, echo, 1)
    with pytest.raises(WorkerProcessDied, match=f"worker process {pid} died before answering"):
        processes.call(1, die, 3)
    value, new_pid, _ = processes.call(1, echo, 2)
    assert value == 2 and new_pid != pid


def ctrl_c_while_starting_up(pool: WorkerProcesses) -> tuple:
    """Starts the pool's process (its initializer a SlowToArrive), sends it SIGINT while it starts up, then asks
    it for an echo: (its pid, what it answered)."""
    pid = pool.process(0).process.pid
    time.sleep(0.2)  # forked, and still unpickling its initializer
    os.kill(pid, signal.SIGINT)
    return pid, pool.call(0, echo, "after")


def test_a_ctrl_c_that_reaches_a_process_while_it_starts_up_leaves_it_running():
    """Ctrl-C at a terminal reaches the whole process group, a worker still starting up included."""
    pool = WorkerProcesses(1, initializer=SlowToArrive())
    try:
        pid, answer = ctrl_c_while_starting_up(pool)
        assert answer == ("after", pid, [pid])
    finally:
        pool.close()


def test_a_fork_server_started_again_gives_processes_that_a_ctrl_c_while_starting_up_leaves_running():
    pool = WorkerProcesses(1, initializer=SlowToArrive())
    try:
        pool.call(0, echo, 1)
        server = multiprocessing.forkserver._forkserver._forkserver_pid
        os.kill(server, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while open(f"/proc/{server}/stat").read().rsplit(")", 1)[1].split()[0] != "Z" and time.monotonic() < deadline:
            time.sleep(0.02)  # dead, and left for multiprocessing to reap
        with pytest.raises(WorkerProcessDied):
            pool.call(0, die, 3)
        pid, answer = ctrl_c_while_starting_up(pool)
        assert multiprocessing.forkserver._forkserver._forkserver_pid != server  # started again
        assert answer == ("after", pid, [pid])
    finally:
        pool.close()


def test_a_result_that_cannot_be_sent_back_is_a_clear_error(processes):
    with pytest.raises(FlawforgeError, match="unsendable returned what cannot be sent back"):
        processes.call(0, unsendable)
    assert processes.call(0, echo, 3)[0] == 3


def test_an_argument_that_cannot_be_sent_fails_the_call_alone(processes):
    with pytest.raises((TypeError, pickle.PicklingError)):
        processes.call(0, echo, threading.Lock())
    assert processes.call(0, echo, 4)[0] == 4  # the slot did not wait for an answer that never comes


def test_calls_waiting_behind_a_process_that_dies_all_fail_and_none_hangs(processes):
    _, pid, _ = processes.call(0, echo, 0)
    outcomes: list = []

    def queued_call() -> None:
        try:
            outcomes.append(processes.process(0).call(echo, 1))
        except WorkerProcessDied as exc:
            outcomes.append(exc)

    dying = threading.Thread(target=queued_call)
    killer = threading.Thread(target=lambda: outcomes.append(_died(processes)))
    killer.start()
    time.sleep(0.2)  # the fatal call is in the pipe first
    waiting = [threading.Thread(target=queued_call) for _ in range(3)]
    for thread in [dying, *waiting]:
        thread.start()
    for thread in [killer, dying, *waiting]:
        thread.join(30)
        assert not thread.is_alive()
    assert len(outcomes) == 5 and all(isinstance(outcome, WorkerProcessDied) for outcome in outcomes)
    value, new_pid, _ = processes.call(0, echo, 5)
    assert value == 5 and new_pid != pid


def _died(processes) -> WorkerProcessDied | None:
    try:
        processes.call(0, die_after, 1.0)
    except WorkerProcessDied as exc:
        return exc
    return None


# A program whose interpreter exits while a thread waits on a worker process that is still starting (a job that
# failed before the mutator's processes were up). Its first exit handler runs last, after multiprocessing has
# terminated the process, and prints what the waiting thread saw.
EXIT_WHILE_STARTING = '''
import atexit, os, sys, threading, time

outcome = []
waiting = None


def report():
    waiting.join(30)
    print(outcome)


atexit.register(report)

from flawforge.runtime.processes import WorkerProcessDied, WorkerProcesses, interpreter_exiting


def starting():
    open(sys.argv[1], "w").close()
    time.sleep(60)


def wait_for_process():
    try:
        pool.call(0, os.getpid)
    except WorkerProcessDied:
        outcome.append(("died", interpreter_exiting()))


if __name__ == "__main__":
    assert not interpreter_exiting()
    pool = WorkerProcesses(1, initializer=starting)
    waiting = threading.Thread(target=wait_for_process, daemon=True)
    waiting.start()
    deadline = time.monotonic() + 60
    while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
        time.sleep(0.05)
'''


def test_a_call_cut_short_by_the_interpreter_exiting_is_told_apart_from_a_process_failing(tmp_path):
    script = tmp_path / "exit_while_starting.py"
    script.write_text(EXIT_WHILE_STARTING)
    started = tmp_path / "started"
    done = subprocess.run([sys.executable, str(script), str(started)], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert started.exists()
    assert done.stdout.strip() == "[('died', True)]"


# A program whose worker process starts from a fork server that takes a second to import its preloaded module
# (the mutator's preloads take a fraction of one): a Ctrl-C while it imports must leave the server and the
# program's worker alone.
SLOW_PRELOAD = '''
import os, time

open(os.environ["PRELOAD_STARTED"], "w").close()
time.sleep(1)
'''
CTRL_C_WHILE_PRELOADING = '''
import os, signal

from flawforge.runtime.processes import WorkerProcesses

if __name__ == "__main__":
    signal.signal(signal.SIGINT, lambda *_: None)  # the Ctrl-C is for the fork server, not this program
    pool = WorkerProcesses(1, preload=["slow_preload"])
    print(pool.call(0, os.getpid) != os.getpid())
    pool.close()
'''


def test_a_ctrl_c_while_the_fork_server_imports_its_preloads_leaves_it_serving(tmp_path):
    (tmp_path / "slow_preload.py").write_text(SLOW_PRELOAD)
    script = tmp_path / "ctrl_c_while_preloading.py"
    script.write_text(CTRL_C_WHILE_PRELOADING)
    started = tmp_path / "started"
    program = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=REPO, start_new_session=True,
                               env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}",
                                    "PRELOAD_STARTED": str(started)})
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert started.exists(), program.communicate()
    os.killpg(program.pid, signal.SIGINT)  # what a terminal does: the program, its fork server and its workers
    stdout, stderr = program.communicate(timeout=60)
    assert (program.returncode, stdout.strip(), stderr) == (0, "True", "")
