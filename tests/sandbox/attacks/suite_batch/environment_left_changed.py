# A surviving mutant leaves os.environ changed (its restore statement removed): in a batch the next change's
# tests took the other branch, and a real bug there survived.
FILES = {
    "lib/__init__.py": "",
    "lib/core.py": '''import os


def with_mode(mode, fn):
    os.environ["LIB_MODE"] = mode
    try:
        return fn()
    finally:
        os.environ.pop("LIB_MODE", None)


def scale(x):
    if os.environ.get("LIB_MODE") == "fast":
        return x << 1
    return x * 2
''',
    "tests/test_core.py": '''from lib.core import scale, with_mode


def test_with_mode():
    assert with_mode("fast", lambda: 7) == 7


def test_scale():
    assert scale(5) == 10
''',
}
CHANGES = [
    {"qualname": "with_mode", "old": 'os.environ.pop("LIB_MODE", None)', "new": "pass",
     "tests": ["tests/test_core.py::test_with_mode"]},
    {"qualname": "scale", "old": "return x * 2", "new": "return x * 3", "tests": ["tests/test_core.py::test_scale"]},
]
