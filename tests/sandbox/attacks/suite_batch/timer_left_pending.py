# A surviving mutant leaves a setitimer timer running (the library's guard re-arms instead of cancelling): in a
# batch it fired in the next change's tests, an equivalent mutant that then looked like a real bug.
FILES = {
    "lib/__init__.py": "",
    "lib/core.py": '''import signal


class TooSlow(Exception):
    pass


def _expire(signum, frame):
    raise TooSlow("the budget ran out")


def guarded(fn, budget=5.0):
    signal.signal(signal.SIGALRM, _expire)
    signal.setitimer(signal.ITIMER_REAL, budget)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def add(a, b):
    return a + b
''',
    "tests/test_core.py": '''import time

from lib.core import add, guarded


def test_guarded():
    assert guarded(lambda: 3) == 3


def test_add_after_a_while():
    time.sleep(0.8)
    assert add(2, 3) == 5
''',
}
CHANGES = [
    {"qualname": "guarded", "old": "signal.setitimer(signal.ITIMER_REAL, 0)",
     "new": "signal.setitimer(signal.ITIMER_REAL, 0.4)", "tests": ["tests/test_core.py::test_guarded"]},
    {"qualname": "add", "old": "a + b", "new": "b + a", "tests": ["tests/test_core.py::test_add_after_a_while"]},
]
