"""Function-entry probes name what runs as Python's profiler does: the same "path::qualname" for every function,
method, class body, lambda and generator expression a module runs, and nothing for what does not run."""
from __future__ import annotations

import _lsprof
import ast
import builtins
import textwrap

import pytest

from flawforge.sandbox.runtime.probes import PROBE, probed

MODULE = textwrap.dedent('''
    """A module."""
    import functools


    def decorate(function):
        """Wraps."""
        @functools.wraps(function)
        def wrapper(*args, key=lambda value: value, **kwargs):
            return key(function(*args, **kwargs))
        return wrapper


    @decorate
    def double(x, scale=(lambda: 2)()):
        return x * scale


    class Shape:
        """A class."""
        sides = [n for n in range(3)]
        by_name = {name: len(name) for name in ("a", "bb")}

        class Inner:
            def size(self):
                return sum(part for part in (1, 2))

        def area(self):
            return self.Inner().size()

        async def later(self):
            return 1

        def unused(self):
            return lambda: 0


    def outer():
        def inner():
            return [lambda y: y + 1 for _ in range(1)][0](1)
        return inner()


    def generate():
        yield from (n * 2 for n in range(2))


    def run():
        return double(2), Shape().area(), outer(), list(generate()), sorted([3, 1], key=lambda n: -n)
''')
SKIPPED = ("<module>", "<listcomp>", "<setcomp>", "<dictcomp>")  # run only where their parent runs: not probed


def profiled(source: str) -> set[str]:
    """What the C profiler saw run (the oracle): module code run, then run()."""
    namespace = {}
    profiler = _lsprof.Profiler()
    profiler.enable(subcalls=False, builtins=False)
    exec(compile(source, "mod.py", "exec"), namespace)
    namespace["run"]()
    profiler.disable()
    return {f"mod.py::{entry.code.co_qualname}" for entry in profiler.getstats()
            if not isinstance(entry.code, str) and entry.code.co_filename == "mod.py"
            and entry.code.co_qualname.rpartition(".")[2] not in SKIPPED}


def with_probes(source: str) -> set[str]:
    keys = set()
    setattr(builtins, PROBE, keys.add)
    try:
        namespace = {}
        exec(compile(probed(ast.parse(source), "mod.py"), "mod.py", "exec"), namespace)
        namespace["run"]()
    finally:
        delattr(builtins, PROBE)
    return keys


def test_the_probes_name_what_the_profiler_sees_run():
    expected = profiled(MODULE)
    assert {"mod.py::decorate.<locals>.wrapper", "mod.py::decorate.<locals>.<lambda>", "mod.py::<lambda>",
            "mod.py::Shape.Inner.size", "mod.py::Shape.Inner.size.<locals>.<genexpr>",
            "mod.py::outer.<locals>.inner.<locals>.<listcomp>.<lambda>", "mod.py::Shape",
            "mod.py::Shape.Inner", "mod.py::generate.<locals>.<genexpr>", "mod.py::run.<locals>.<lambda>"} <= expected
    assert with_probes(MODULE) == expected
    assert not any("unused" in key or "later" in key for key in expected)


def test_a_probed_module_keeps_its_docstrings_lines_and_results():
    tree = probed(ast.parse(MODULE), "mod.py")
    namespace = {}
    setattr(builtins, PROBE, set().add)
    try:
        exec(compile(tree, "mod.py", "exec"), namespace)
        assert namespace["run"]() == (4, 3, 2, [0, 2], [3, 1])
    finally:
        delattr(builtins, PROBE)
    assert namespace["__doc__"] == "A module." and namespace["Shape"].__doc__ == "A class."
    assert namespace["decorate"].__doc__ == "Wraps."
    original = {(type(node).__name__, node.lineno) for node in ast.walk(ast.parse(MODULE)) if hasattr(node, "lineno")}
    assert original <= {(type(node).__name__, node.lineno) for node in ast.walk(tree) if hasattr(node, "lineno")}


@pytest.mark.parametrize("source", ["def f():\n    global g\n    g = 1\n", "async def f():\n    await g()\n",
                                    "def f(a, /, b=[x for x in (1,)], *c, d=1, **e):\n    pass\n"])
def test_what_compiles_without_probes_compiles_with_them(source):
    compile(probed(ast.parse(source), "m.py"), "m.py", "exec")


def test_a_class_whose_namespace_answers_every_name_runs_as_without_probes():
    """A metaclass's namespace may answer any name (an auto-numbering one): the probe in a class body is no name of
    it."""
    source = textwrap.dedent('''
        class Numbered(dict):
            def __missing__(self, name):
                if name == "__name__":  # what the class body itself reads, for __module__
                    raise KeyError(name)
                self[name] = len(self)
                return self[name]


        class Auto(type):
            @classmethod
            def __prepare__(cls, name, bases):
                return Numbered()

            def __new__(cls, name, bases, namespace):
                return super().__new__(cls, name, bases, dict(namespace))


        class Colour(metaclass=Auto):
            red
            green


        def run():
            return Colour.red, Colour.green, sorted(k for k in vars(Colour) if not k.startswith("__"))
    ''')
    namespace = {}
    exec(compile(source, "mod.py", "exec"), namespace)
    plain = namespace["run"]()
    assert plain[2] == ["green", "red"]
    assert "mod.py::Colour" in with_probes(source)
    setattr(builtins, PROBE, set().add)
    try:
        probed_namespace = {}
        exec(compile(probed(ast.parse(source), "mod.py"), "mod.py", "exec"), probed_namespace)
        assert probed_namespace["run"]() == plain
    finally:
        delattr(builtins, PROBE)
