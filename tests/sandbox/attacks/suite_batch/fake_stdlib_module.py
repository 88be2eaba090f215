# A surviving mutant leaves a fake sys.modules['json'] behind (its restore statement removed): in a batch the
# next change's tests imported the fake, and a real bug survived.
FILES = {
    "lib/__init__.py": "",
    "lib/core.py": '''import sys


class _Canned:
    def dumps(self, obj, **options):
        return '{"a": 2, "b": 1}'


def offline(fn):
    saved = sys.modules["json"]
    sys.modules["json"] = _Canned()
    try:
        return fn()
    finally:
        sys.modules["json"] = saved


def dump(obj):
    import json
    return json.dumps(obj, sort_keys=True)
''',
    "tests/test_core.py": '''from lib.core import dump, offline


def test_offline():
    assert offline(lambda: 3) == 3


def test_dump():
    assert dump({"b": 1, "a": 2}) == '{"a": 2, "b": 1}'
''',
}
CHANGES = [
    {"qualname": "offline", "old": 'sys.modules["json"] = saved', "new": "pass",
     "tests": ["tests/test_core.py::test_offline"]},
    {"qualname": "dump", "old": "sort_keys=True", "new": "sort_keys=False", "tests": ["tests/test_core.py::test_dump"]},
]
