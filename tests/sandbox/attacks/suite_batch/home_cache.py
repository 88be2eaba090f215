# The library caches a table under ~/.cache (HOME is the work dir): in a batch the next change's tests read the
# table an earlier change's run wrote, and a real bug in building it survived.
FILES = {
    "lib/__init__.py": "",
    "lib/core.py": '''import json
import os


def _cache_path():
    return os.path.join(os.path.expanduser("~"), ".cache", "lib", "table.json")


def build_table():
    return [i * i for i in range(5)]


def table():
    path = _cache_path()
    if os.path.exists(path):
        with open(path) as cached:
            return json.load(cached)
    value = build_table()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as cached:
        json.dump(value, cached)
    return value


def largest():
    return max(table())
''',
    "tests/test_core.py": '''from lib.core import largest, table


def test_largest():
    assert largest() == 16


def test_table():
    assert table() == [0, 1, 4, 9, 16]
''',
}
CHANGES = [
    {"qualname": "largest", "old": "max(table())", "new": "max(list(table()))",
     "tests": ["tests/test_core.py::test_largest"]},
    {"qualname": "build_table", "old": "i * i", "new": "i + i", "tests": ["tests/test_core.py::test_table"]},
]
