"""Which programs may run one after another in one unit, and the check that they left it clean.

A batch unit runs several programs in one process, each in fresh globals with a fresh
builtins dict. That is exact only for programs that cannot reach what they share: the
interpreter's modules, the runner's frames, finalizers that would run during a later
program, or a MemoryError the next one would not get. `reason_to_run_alone` admits a
program only if its syntax rules all of that out (plain arithmetic, as templates and
their mutants are); every other program runs in its own unit, as if not batched.
`SharedState` is the second line: a fingerprint of the objects an admitted program can
reach, compared after each program; a difference stops the batch there.
"""
import ast
import builtins
import math
import numbers
import sys
from fractions import Fraction
from operator import is_

# Builtins an admitted program may name; the others reach the interpreter's internals
# (getattr, vars, globals, type, open, __import__, ...).
SAFE_BUILTINS = frozenset({
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "complex", "dict",
    "divmod", "enumerate", "filter", "float", "format", "frozenset", "hash", "hex", "int", "isinstance",
    "issubclass", "iter", "len", "list", "map", "max", "min", "next", "oct", "ord", "pow", "print", "range",
    "repr", "reversed", "round", "set", "slice", "sorted", "str", "sum", "super", "tuple", "zip",
    "NotImplemented", "Ellipsis",
}) | frozenset(name for name, value in vars(builtins).items()
               if isinstance(value, type) and issubclass(value, BaseException))
# Exceptions a handler may catch: none that a MemoryError is, since a later program of a batch
# may run out of memory where it alone would not, and must not be able to hide it.
CATCHABLE = frozenset(name for name in SAFE_BUILTINS if isinstance(getattr(builtins, name, None), type)
                      and issubclass(getattr(builtins, name), BaseException)
                      and not issubclass(MemoryError, getattr(builtins, name)))
# Special names a program may define or read: its classes' arithmetic, text and construction.
SAFE_DUNDERS = frozenset(f"__{name}__" for name in (
    "name", "doc", "init", "new", "str", "repr", "format", "eq", "ne", "lt", "le", "gt", "ge", "hash", "bool",
    "int", "float", "index", "round", "neg", "pos", "abs", "len", "iter", "next", "getitem", "contains",
    *(f"{r}{op}" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow") for r in ("", "r"))))
# Attributes that lead to frames, code, tracebacks or the ABC registry.
UNSAFE_ATTRIBUTES = frozenset({"register", "mro"})
UNSAFE_ATTRIBUTE_PREFIXES = ("_", "f_", "tb_", "gi_", "cr_", "ag_", "co_")
BUILTIN_NAMES = frozenset(dir(builtins))
IMPORTABLE = {"fractions": frozenset({"Fraction"}), "math": None}  # None: the module itself and all it exports
REJECTED_NODES = (ast.With, ast.AsyncWith, ast.AsyncFunctionDef, ast.AsyncFor, ast.Await, ast.Yield,
                  ast.YieldFrom, ast.Match, ast.TryStar)


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _name_problem(name: str, binds: bool) -> str | None:
    if _is_dunder(name):
        return None if name in SAFE_DUNDERS else f"uses {name}"
    if name in BUILTIN_NAMES:
        if binds:  # e.g. ValueError = Exception, and `except ValueError` would hide a MemoryError
            return f"rebinds {name}"
        return None if name in SAFE_BUILTINS else f"uses {name}"
    return None


def _attribute_problem(name: str) -> str | None:
    if _is_dunder(name):
        return None if name in SAFE_DUNDERS else f"uses the attribute {name}"
    if name in UNSAFE_ATTRIBUTES or name.startswith(UNSAFE_ATTRIBUTE_PREFIXES):
        return f"uses the attribute {name}"
    return None


def _import_problem(node: ast.Import | ast.ImportFrom) -> str | None:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name not in IMPORTABLE or IMPORTABLE[alias.name] is not None:
                return f"imports {alias.name}"
        return None
    allowed = IMPORTABLE.get(node.module or "", frozenset()) if node.level == 0 else frozenset()
    for alias in node.names:
        if allowed is not None and alias.name not in allowed or alias.name.startswith("_"):
            return f"imports {alias.name} from {'.' * node.level}{node.module or ''}"
    return None


def _handler_problem(node: ast.ExceptHandler) -> str | None:
    types = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
    for caught in types:
        if not (isinstance(caught, ast.Name) and caught.id in CATCHABLE):
            return "catches broadly enough to hide a MemoryError"
    return None


def _check_name(node: ast.Name) -> str | None:
    name = node.id
    if name in BUILTIN_NAMES or name.startswith("__"):
        return _name_problem(name, binds=type(node.ctx) is not ast.Load)
    return None


def _check_bindings(*names: str) -> str | None:
    for name in names:
        if name in BUILTIN_NAMES or name.startswith("__"):
            problem = _name_problem(name, binds=True)
            if problem is not None:
                return problem
    return None


def _check_class(node: ast.ClassDef) -> str | None:
    return "gives a class keywords" if node.keywords else _check_bindings(node.name)


def _check_handler(node: ast.ExceptHandler) -> str | None:
    return _handler_problem(node) or (_check_bindings(node.name) if node.name else None)


def _check_keyword(node: ast.keyword) -> str | None:
    return _check_bindings(node.arg) if node.arg is not None else None


def _rejected(node: ast.AST) -> str:
    return f"uses {type(node).__name__}"


# What each kind of node must be checked for; other kinds need no check of their own.
CHECKS = {
    ast.Name: _check_name,
    ast.Attribute: lambda node: _attribute_problem(node.attr),
    ast.Import: _import_problem,
    ast.ImportFrom: _import_problem,
    ast.ExceptHandler: _check_handler,
    ast.ClassDef: _check_class,
    ast.FunctionDef: lambda node: _check_bindings(node.name),
    ast.arg: lambda node: _check_bindings(node.arg),
    ast.alias: lambda node: _check_bindings(node.asname or node.name.partition(".")[0]),
    ast.Global: lambda node: _check_bindings(*node.names),
    ast.Nonlocal: lambda node: _check_bindings(*node.names),
    ast.keyword: _check_keyword,
    **{kind: _rejected for kind in REJECTED_NODES},
}


def reason_to_run_alone(tree: ast.Module) -> str | None:
    """None if the program may share a unit with others; otherwise what it does that may not."""
    checks = CHECKS
    for node in ast.walk(tree):
        check = checks.get(type(node))
        if check is not None:
            problem = check(node)
            if problem is not None:
                return problem
    return None


class SharedState:
    """What an admitted program can reach and change, as it was before the first program.

    Admitted programs can name only the safe builtins, `math` and `Fraction`; an attribute
    they assign lands in one of these dicts, and an import in sys.modules. The comparison is
    by identity, in C: no id() calls (each is an audit event, a call of the unit's hook), and
    no __eq__ a program's class could answer."""

    def __init__(self):
        self.namespaces = (sys.modules, builtins.__dict__, math.__dict__, sys.modules["fractions"].__dict__,
                           numbers.__dict__, *(vars(cls) for cls in Fraction.__mro__ if cls is not object))
        self.taken = [(list(namespace), list(namespace.values())) for namespace in self.namespaces]

    def changed(self) -> bool:
        for namespace, (keys, values) in zip(self.namespaces, self.taken):
            if len(namespace) != len(keys) or not all(map(is_, namespace, keys)) \
                    or not all(map(is_, namespace.values(), values)):
                return True
        return False
