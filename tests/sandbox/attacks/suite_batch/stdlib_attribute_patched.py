# A surviving mutant leaves time.time monkeypatched (its restore statement removed): in a batch the next
# change's tests saw a frozen clock, and a real bug survived.
FILES = {
    "lib/__init__.py": "",
    "lib/core.py": '''import time


def frozen(fn, at=100.0):
    saved = time.time
    time.time = lambda: at
    try:
        return fn()
    finally:
        time.time = saved


def elapsed_since(start):
    return time.time() - start
''',
    "tests/test_core.py": '''import time

from lib.core import elapsed_since, frozen


def test_frozen():
    assert frozen(lambda: time.time()) == 100.0


def test_elapsed():
    start = time.time()
    time.sleep(0.01)
    assert elapsed_since(start) >= 0
''',
}
CHANGES = [
    {"qualname": "frozen", "old": "time.time = saved", "new": "pass", "tests": ["tests/test_core.py::test_frozen"]},
    {"qualname": "elapsed_since", "old": "time.time() - start", "new": "start - time.time()",
     "tests": ["tests/test_core.py::test_elapsed"]},
]
