# A surviving mutant leaves signal.alarm pending (the library's guard re-arms instead of cancelling): in a batch
# the alarm went off in the next change's tests, an equivalent mutant that then looked like a real bug.
# Read by tests/sandbox/test_suite_batch_attacks.py: FILES is the library, CHANGES its mutants in batch order.
FILES = {
    "lib/__init__.py": "",
    "lib/core.py": '''import signal


class TooSlow(Exception):
    pass


def _expire(signum, frame):
    raise TooSlow("the budget ran out")


def guarded(fn, budget=5):
    signal.signal(signal.SIGALRM, _expire)
    signal.alarm(budget)
    try:
        return fn()
    finally:
        signal.alarm(0)


def add(a, b):
    return a + b
''',
    "tests/test_core.py": '''import time

from lib.core import add, guarded


def test_guarded():
    assert guarded(lambda: 3) == 3


def test_add_after_a_while():
    time.sleep(1.3)
    assert add(2, 3) == 5
''',
}
CHANGES = [
    {"qualname": "guarded", "old": "signal.alarm(0)", "new": "signal.alarm(1)",
     "tests": ["tests/test_core.py::test_guarded"]},
    {"qualname": "add", "old": "a + b", "new": "b + a", "tests": ["tests/test_core.py::test_add_after_a_while"]},
]
