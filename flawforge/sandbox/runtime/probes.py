"""Function-entry probes: which of a project's functions run, recorded by the functions themselves.

A suite unit taking coverage compiles each module of its coverage files with one call at the start of every function,
class body, lambda and generator expression, naming it "path::qualname" (the qualname its code object gets, but for a
definition a `global` statement names, which keeps its enclosing names); the file on disk is untouched and every line
keeps its number. A generator resumed in a later test is that test's only where the profiler ran (runtime.suite).
Only the project's own code pays for it: the C profiler's hook, which it replaces, ran on every call of pytest and of
the tests as well, and made the clean run with coverage take twice as long as the one without.
"""
from __future__ import annotations

import ast
import importlib.machinery

PROBE = "__flawforge_probe__"  # a builtin while coverage is taken: the set of keys run so far, its `add`


class _Probed(ast.NodeTransformer):
    """Adds the probes to one module's tree; `scopes` is the qualname so far, as (name, has_locals) pairs (a function
    or a lambda: what it defines is named "name.<locals>.inner"; a class or comprehension: "name.inner")."""

    def __init__(self, path: str):
        self.path = path
        self.scopes: list[tuple[str, bool]] = []

    def _key(self, name: str) -> str:
        prefix = "".join(f"{scope}.<locals>." if has_locals else f"{scope}." for scope, has_locals in self.scopes)
        return f"{self.path}::{prefix}{name}"

    def _probe(self, key: str) -> ast.Call:
        return ast.Call(ast.Name(PROBE, ast.Load()), [ast.Constant(key)], [])

    def _outer(self, nodes) -> None:
        """What a definition evaluates in the scope around it: decorators, defaults, annotations, bases."""
        for node in nodes:
            if node is not None:
                self.visit(node)

    def _inner(self, name: str, function: bool, body: list[ast.stmt]) -> list[ast.stmt]:
        self.scopes.append((name, function))
        try:
            body = [self.visit(statement) for statement in body]
        finally:
            self.scopes.pop()
        first = 1 if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str) else 0  # after a docstring, which must stay first
        call = self._probe(self._key(name))
        if not function:  # in a class body a name is first looked up in the class's namespace, which a metaclass
            # may make answer anything: the probe is called from a lambda, whose names skip the class
            call = ast.Call(ast.Lambda(ast.arguments([], [], None, [], [], None, []), call), [], [])
        probe = ast.copy_location(ast.Expr(call), body[0])
        return [*body[:first], probe, *body[first:]]

    def visit_FunctionDef(self, node):
        self._outer([*node.decorator_list, node.args, node.returns])
        node.body = self._inner(node.name, True, node.body)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self._outer([*node.decorator_list, *node.bases, *node.keywords])
        node.body = self._inner(node.name, False, node.body)
        return node

    def visit_arguments(self, node):
        # Only the defaults run where the function is defined; annotations may too (without the future import).
        self._outer([*node.defaults, *node.kw_defaults,
                     *(a.annotation for a in [*node.posonlyargs, *node.args, *node.kwonlyargs, node.vararg,
                                               node.kwarg] if a is not None)])
        return node

    def _expression_scope(self, node, name: str, probed_field: str | None):
        """A lambda or comprehension: its first iterable runs outside it, the rest inside (probed, where the
        expression is one that may run later than it is made: a lambda's body, a generator's element)."""
        if isinstance(node, ast.Lambda):
            self.visit(node.args)
        else:
            node.generators[0].iter = self.visit(node.generators[0].iter)
        self.scopes.append((name, isinstance(node, ast.Lambda)))  # only a function's and a lambda's say <locals>
        try:
            for field in ("body", "elt", "key", "value"):
                if hasattr(node, field):
                    setattr(node, field, self.visit(getattr(node, field)))
            for number, generator in enumerate(node.generators if hasattr(node, "generators") else ()):
                generator.target = self.visit(generator.target)
                if number:
                    generator.iter = self.visit(generator.iter)
                generator.ifs = [self.visit(condition) for condition in generator.ifs]
        finally:
            self.scopes.pop()
        if probed_field is not None:
            inner = getattr(node, probed_field)
            # The probe returns None: `None or x` is x.
            setattr(node, probed_field, ast.copy_location(ast.BoolOp(ast.Or(), [self._probe(self._key(name)), inner]),
                                                          inner))
        return node

    def visit_Lambda(self, node):
        return self._expression_scope(node, "<lambda>", "body")

    def visit_GeneratorExp(self, node):
        return self._expression_scope(node, "<genexpr>", "elt")

    def visit_ListComp(self, node):
        return self._expression_scope(node, "<listcomp>", None)

    def visit_SetComp(self, node):
        return self._expression_scope(node, "<setcomp>", None)

    def visit_DictComp(self, node):
        return self._expression_scope(node, "<dictcomp>", None)


def probed(tree: ast.Module, path: str) -> ast.Module:
    """`tree` (changed in place) with a probe at the start of each function, class body, lambda and generator
    expression, each naming itself "`path`::qualname"."""
    return ast.fix_missing_locations(_Probed(path).visit(tree))


class ProbedLoader(importlib.machinery.SourceFileLoader):
    """A project module's loader that compiles the probes in, from the source: never from cached bytecode, which
    has none."""

    def __init__(self, fullname: str, path: str, relative: str):
        super().__init__(fullname, path)
        self.relative = relative

    def get_code(self, fullname):
        source = self.get_data(self.path)
        return compile(probed(ast.parse(source, self.path), self.relative), self.path, "exec", dont_inherit=True)


class ProbingFinder:
    """Finds the project's modules as the path finder would, for them to load with their probes."""

    def __init__(self, root: str, files: list[str], source_roots: list[str]):
        self.prefix = root.rstrip("/") + "/"
        self.files = set(files)
        self.packages = {_top_package(file, source_roots) for file in files} - {None}

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] not in self.packages:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or type(spec.loader) is not importlib.machinery.SourceFileLoader or not spec.origin:
            return None
        relative = self.covered(spec.origin)
        if relative is None:
            return None
        spec.loader = ProbedLoader(fullname, spec.origin, relative)
        return spec

    def covered(self, filename) -> str | None:
        """The coverage file `filename` is, as a path in the project; None for any other."""
        if not isinstance(filename, str) or not filename.startswith(self.prefix):
            return None
        relative = filename[len(self.prefix):]
        return relative if relative in self.files else None


def _top_package(file: str, source_roots: list[str]) -> str | None:
    """The first name of the module `file` as imported from one of the source roots ('src/pkg/a.py' -> 'pkg')."""
    for root in source_roots:
        inside = file if not root else file[len(root) + 1:] if file.startswith(root.rstrip("/") + "/") else None
        if inside:
            return inside.split("/", 1)[0].removesuffix(".py")
    return None
