"""Issue-style problem statements: a bug report as a library's user would write it, from the facts alone.

The facts are the failing test's own code (the user's reproduction: the test function's whole
statements up to the one holding the line that failed, read from the file the function is in), its
parameters, and what the run reported
there: the values an assertion compared, the exception raised, or the exception that was not.
Nothing of the library's side goes in (no traceback frame of it, no line of the patch, no word
of the modifier), so a statement never names the buggy line or the fix; `leaks` checks that of
any statement, the deterministic writer's and a model's alike. The deterministic writer draws
its title, opening and wording from several phrasings, chosen per instance (phrasing.pick). A
model writes one through the gateway (StatementReply) where the run names a model; a reply that
leaks, or states none of the facts, is not used.
"""
from __future__ import annotations

import ast
import functools
import re
import textwrap
from dataclasses import dataclass, replace

from flawforge.debugging.failures import FRAME
from flawforge.debugging.modifiers.base import first_line
from flawforge.debugging.phrasing import counted, pick
from flawforge.debugging.syntax import parse
from flawforge.proto.debugging import Instance, StatementReply
from flawforge.proto.llm import ChatMessage, ChatRequest

SECTION = re.compile(r"^(?P<test>\S+::\S+?): (?P<outcome>failed|error)$", re.MULTILINE)
EXCEPTION = re.compile(r"^(?P<name>[A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|Interrupt)|Failed|AssertionError)"
                       r"(?::\s?(?P<message>.*))?$")
# A readable failure's first line: the exception as Python prints it (`re.error: ...`, `decimal.InvalidOperation`).
RAISED = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")
TRACEBACK_HEADER = "Traceback, most recent call last"
COMPARISONS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
               ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}
# The test's code shown: whole statements, at most this many lines where they fit (statements._shown).
CODE_LINES = 12
# Where those leave a name of the test undefined, the statements the failing one needs, at most this many lines
# (statements._needed).
NEEDED_LINES = 24
VALUE_CHARS = 300
OTHER_TESTS = 3
# A changed line of the fix shorter than this ('else:', 'pass') is no evidence of a leak.
LEAK_MIN_CHARS = 6


@dataclass(frozen=True)
class Failure:
    """What one failing test shows a user."""

    test: str                   # the test id
    parameters: str | None      # the id's [...] part
    code: str                   # the test's statements up to the one holding the failing line, whole, dedented
    line: str                   # the failing line of the test, stripped
    exception: str              # the exception's name (AssertionError, Failed, TypeError, ...)
    message: str                # its message's first line
    actual: str | None = None   # what came back, where the assertion compared a call's result with a value
    expected: str | None = None
    subject: str | None = None  # the expression whose value was wrong, or that raised

    @property
    def not_raised(self) -> str | None:
        """The exception a `pytest.raises` expected and did not see, or None."""
        return self.message.split("DID NOT RAISE", 1)[1].strip() if (
            self.exception == "Failed" and "DID NOT RAISE" in self.message) else None

    @property
    def said(self) -> str:
        """The exception as the output names it, with its message."""
        return f"{self.exception}: {self.message}" if self.message else self.exception

    @property
    def raised(self) -> bool:
        """The test stopped on an exception other than its own check's."""
        return bool(self.exception) and self.exception != "AssertionError" and self.not_raised is None


def sections(failing_output: str) -> dict[str, str]:
    """Each failing test's part of an instance's failing output, by test id."""
    found = list(SECTION.finditer(failing_output))
    return {m.group("test"): failing_output[m.end():found[n + 1].start() if n + 1 < len(found) else None].strip("\n")
            for n, m in enumerate(found)}


def _frames(text: str) -> list[tuple[str, int, str, str]]:
    """(path, line, function, code line) of each frame of a readable failure, outermost first."""
    lines = text.splitlines()
    frames = []
    for n, line in enumerate(lines):
        match = FRAME.match(line)
        if match:
            code = lines[n + 1].strip() if n + 1 < len(lines) and not FRAME.match(lines[n + 1]) else ""
            frames.append((match.group("path"), int(match.group("line")), match.group("name"), code))
    return frames


@functools.lru_cache(maxsize=32)
def _functions(source: str) -> dict[str, list[ast.AST]]:
    """A test file's functions by name (none where it does not parse): parsed once for all its failing tests, which
    only read the trees."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return {}
    functions: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.setdefault(node.name, []).append(node)
    return functions


def _test_code(source: str | None, function: str, line: int) -> tuple[str, ast.stmt | None, ast.AST | None]:
    """The test function's code up to the statement holding `line` (see _shown), that statement and the function;
    ('', None, None) where the file does not parse or has no such function."""
    lines = (source or "").splitlines()
    for node in _functions(source or "").get(function, ()):
        if node.lineno <= line <= node.end_lineno:
            body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                                 and isinstance(s.value.value, str))]
            holding = [s for s in ast.walk(node) if isinstance(s, ast.stmt) and s is not node
                       and s.lineno <= line <= s.end_lineno]
            # The statement the frame points at: one that starts on the line (a `with pytest.raises` that did not
            # see its exception), else the innermost simple statement around it.
            failing = next((s for s in holding if s.lineno == line), None) or next(
                (s for s in reversed(holding) if not isinstance(s, COMPOUND)), None)
            code = _shown(lines, body, failing, line) if body else ""
            local = set().union(*map(_bound, node.body))  # the names the test's statements bind
            if code and failing is not None and _undefined(code, local):
                needed = _needed(lines, node, failing, local)
                code = needed if needed is not None and not _undefined(needed, local) else code
            return code, failing, node
    return "", None, None


def _shown(lines: list[str], body: list[ast.stmt], failing: ast.stmt | None, line: int) -> str:
    """Whole statements of the test that a reader can run: the one of its body holding `line` (whole where it fits
    in CODE_LINES lines, else the failing statement alone) and as many whole statements before it as fit, dedented.
    Code that would not compile as a function's body (a `continue` cut from its loop) shrinks to the failing
    statement, then to the line."""
    def text(first: int, last: int) -> str:
        return textwrap.dedent("\n".join(lines[first - 1:last]))

    top = next((s for s in body if s.lineno <= line <= s.end_lineno), None)
    alone = (failing.lineno, failing.end_lineno) if failing is not None else (line, line)
    if top is not None and top.end_lineno - top.lineno < CODE_LINES:
        first, last = top.lineno, top.end_lineno
        for statement in reversed(body[:body.index(top)]):
            if last - statement.lineno >= CODE_LINES:
                break
            first = statement.lineno
    else:
        first, last = alone
    for span in ((first, last), alone, (line, line)):
        code = text(*span)
        if _compiles(code):
            return code
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def _bound(node: ast.AST) -> set[str]:
    """The names a statement binds (assigned, deleted, imported, defined, caught), nested blocks included."""
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.alias):
            names.add((n.asname or n.name).partition(".")[0])
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
    return names


def _read(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _base(expr: ast.expr) -> str | None:
    """The name an expression reaches through (`x` of `x.a[1].b()`, `x` of `*x`)."""
    while isinstance(expr, (ast.Attribute, ast.Subscript, ast.Call, ast.Starred)):
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _changes(statement: ast.stmt, names: set[str], local: set[str]) -> bool:
    """Whether the statement may change what one of `names` holds (a method called on it, it passed to a call, an
    attribute or item of it assigned) or decide whether later statements run (continue, break, return, raise). A
    name the test does not bind (`local`) is mostly a module: a function called from it (`pkg.parse(...)`) changes
    nothing, a method of something it holds (`pkg.REGISTRY.add(...)`) may."""
    for n in ast.walk(statement):
        if isinstance(n, (ast.Continue, ast.Break, ast.Return, ast.Raise)):
            return True
        method = isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and _base(n.func) in names and (
            _base(n.func) in local or isinstance(n.func.value, (ast.Attribute, ast.Subscript, ast.Call)))
        if method or isinstance(n, ast.Call) and any(
                _base(argument) in names for argument in [*n.args, *(k.value for k in n.keywords)]
                if not isinstance(argument, ast.Call)):  # a call's result passed on is its own (walked) call
            return True
        if isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, (ast.Store, ast.Del)) \
                and _base(n) in names:
            return True
    return False


def _undefined(code: str, local: set[str]) -> set[str]:
    """The names `code` reads that the test function's statements bind (`local`) and `code` does not (its
    parameters, the fixtures, are not the code's to define)."""
    try:
        tree = parse("def _():\n" + textwrap.indent(code, "    "))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    return (_read(tree) & local) - _bound(tree.body[0])


BLOCKS = (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.If, ast.Try)


def _needed(lines: list[str], function: ast.AST, failing: ast.stmt, local: set[str]) -> str | None:
    """The failing statement with the statements of the test before it that it needs: those that bind a name it
    reads, change what one holds or decide whether it runs, and what those need in turn, with the headers of the
    blocks it is in (`for k, v in ...:`), dedented; None where that is over NEEDED_LINES lines, or the failing
    statement is in a block's `else`, handler or `finally`."""
    path, block = [], function.body
    while True:
        holding = next((s for s in block if s.lineno <= failing.lineno and failing.end_lineno <= s.end_lineno), None)
        if holding is None:
            return None
        path.append((block, block.index(holding)))
        if holding is failing:
            break
        inner = holding.body if isinstance(holding, BLOCKS) else []
        if not inner or not (inner[0].lineno <= failing.lineno <= inner[-1].end_lineno) \
                or inner[0].lineno == holding.lineno:
            return None
        block = inner
    spans, names = [(failing.lineno, failing.end_lineno)], _read(failing)
    for depth in range(len(path) - 1, -1, -1):
        block, index = path[depth]
        if depth < len(path) - 1:  # the header of the block the statements so far are in
            header = block[index]
            spans.append((header.lineno, header.body[0].lineno - 1))
            parts = [getattr(header, field) for field in ("target", "iter", "test") if hasattr(header, field)]
            parts += getattr(header, "items", [])
            if isinstance(header, ast.Try):  # its handlers, else and finally with it: a `try` alone does not compile
                spans.append((header.body[-1].end_lineno + 1, header.end_lineno))
                parts += [*header.handlers, *header.orelse, *header.finalbody]
            names = (names - set().union(*map(_bound, parts))) | set().union(*map(_read, parts))
        chosen, names = _needed_before(block[:index], names, local)
        spans += [(first_line(s), s.end_lineno) for s in chosen]
    shown = sorted(spans)
    if sum(last - first + 1 for first, last in shown) > NEEDED_LINES:
        return None
    code = textwrap.dedent("\n".join(line for first, last in shown for line in lines[first - 1:last]))
    return code if _compiles(code) else None


SIMPLE = (ast.Assign, ast.AnnAssign, ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _needed_before(before: list[ast.stmt], names: set[str], local: set[str]) -> tuple[list[ast.stmt], set[str]]:
    """Of the statements `before` a statement reading `names`, the ones it needs (see _needed), and the names those
    read in turn that none of them binds. A name a chosen statement binds may hold part of what is needed
    (`p = SubElement(el, 'p')`), so what changes it after that statement is needed too: chosen again until nothing
    is added."""
    bound, read = [_bound(s) for s in before], [_read(s) for s in before]
    chosen: set[int] = set()
    while True:
        wanted, added = set(names), False
        for index in range(len(before) - 1, -1, -1):
            statement = before[index]
            parts = set().union(*(bound[i] for i in chosen if i < index))
            if index in chosen or bound[index] & wanted or _changes(statement, wanted | parts, local):
                added |= index not in chosen
                chosen.add(index)
                simple = isinstance(statement, SIMPLE)
                wanted = ((wanted - bound[index]) if simple else wanted) | read[index]
        if not added:
            return [before[i] for i in sorted(chosen)], wanted


def _compiles(code: str) -> bool:
    """Whether `code` compiles as the body of a function (a test's `return`, `yield` or `await` included)."""
    for header in ("def _():\n", "async def _():\n"):
        try:
            compile(header + textwrap.indent(code, "    "), "<test>", "exec")  # compiled only, never run
            return True
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
    return False


COMPOUND = (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.If, ast.While, ast.Try)


def _calls(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) for n in ast.walk(node))


def _compared(statement: ast.stmt | None) -> tuple[ast.expr, ast.expr, str] | None:
    """The two sides of the statement's comparison (`assert a == b`, `self.assertEqual(a, b)`), with the operator."""
    if isinstance(statement, ast.Assert) and isinstance(statement.test, ast.Compare) \
            and len(statement.test.ops) == 1:
        return statement.test.left, statement.test.comparators[0], COMPARISONS[type(statement.test.ops[0])]
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) \
            and isinstance(statement.value.func, ast.Attribute) and len(statement.value.args) >= 2 \
            and statement.value.func.attr in ("assertEqual", "assertEquals", "assertListEqual", "assertDictEqual",
                                              "assertTupleEqual", "assertSetEqual", "assertMultiLineEqual"):
        return statement.value.args[0], statement.value.args[1], "=="
    return None


def _values(message: str, operator: str) -> tuple[str | None, str | None] | None:
    """The two values an assertion message compares (`assert 'a' == 'b'`, unittest's `'a' != 'b'`); a side that
    pytest shows as an expression of values (`(a + b)`) rather than one value is None."""
    text = message[len("assert "):] if message.startswith("assert ") else message
    try:
        tree = parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None
    if not (isinstance(tree, ast.Compare) and len(tree.ops) == 1
            and COMPARISONS[type(tree.ops[0])] in (operator, "!=" if operator == "==" else operator)):
        return None
    return tuple(None if isinstance(side, (ast.BinOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Lambda))
                 else ast.get_source_segment(text, side) for side in (tree.left, tree.comparators[0]))


def _origin(name: ast.expr, function: ast.AST | None, line: int) -> ast.expr:
    """Where a name compared in the failing line got its value: the call assigned to it earlier in the test
    (`result = parse(text)`), else the name itself."""
    if not isinstance(name, ast.Name) or function is None:
        return name
    assigned = [s.value for s in ast.walk(function) if isinstance(s, ast.Assign) and s.lineno < line
                and any(isinstance(t, ast.Name) and t.id == name.id for t in s.targets) and _calls(s.value)]
    return max(assigned, key=lambda value: value.lineno) if assigned else name


def _traced(side: ast.expr, function: ast.AST | None, line: int) -> ast.expr:
    """A compared side as what its value came from: a name, or an attribute or item of one (`result._datetime`),
    assigned from a call earlier in the test is that call (`result = a - b` is not one, and stays the name); a name
    that says it is the expectation (`expected`) stays what it says."""
    if _is_expected(side):
        return side
    root = side
    while isinstance(root, (ast.Attribute, ast.Subscript)):
        root = root.value
    origin = _origin(root, function, line)
    return origin if origin is not root else side


def _is_expected(node: ast.expr) -> bool:
    """A side of a comparison that states what is expected: a literal, or a name that says so."""
    if isinstance(node, (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set)) and not _calls(node):
        return True
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return bool(re.search(r"expect|want|correct|result_should|^exp$", name, re.IGNORECASE))


def _calls_library(node: ast.expr, library: frozenset[str]) -> bool:
    """Whether the expression calls a function of the library (`lib.f(x)`, `f(x)` imported from it); a class of
    the library called (`Token('a')`, `pd.Series([1])`) builds a value, as an expected one is built."""
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        func, root = call.func, call.func
        while isinstance(root, ast.Attribute):
            root = root.value
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if isinstance(root, ast.Name) and root.id in library and name[:1].islower():
            return True
    return False


def _actual_is_left(left: ast.expr, right: ast.expr, library: frozenset[str]) -> bool | None:
    """Which side of a comparison holds what the library returned: the one that calls something, else the one that
    does not state an expectation (a literal, a name like `expected`), else the one that calls a function of the
    library, else the left (pytest's `assert actual == expected`) where neither calls anything. None where both
    sides compute a value alike (`a.capitalize() == b.capitalize()`): no side is known to be wrong."""
    if _calls(left) != _calls(right):
        return _calls(left)
    if _is_expected(left) != _is_expected(right):
        return _is_expected(right)
    if _calls_library(left, library) != _calls_library(right, library):
        return _calls_library(left, library)
    return None if _calls(left) else True


@functools.lru_cache(maxsize=32)
def library_names(test_source: str, packages: tuple[str, ...]) -> frozenset[str]:
    """The names a test file binds by importing the library's packages (`import pkg`, `from pkg.mod import f`)."""
    try:
        tree = parse(test_source)
    except (SyntaxError, ValueError, RecursionError):
        return frozenset()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names
                         if alias.name.split(".")[0] in packages)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in packages:
            names.update(alias.asname or alias.name for alias in node.names if alias.name != "*")
    return frozenset(names)


def packages_of(instance: Instance) -> tuple[str, ...]:
    """The library's top-level package or module the instance's bug is in, as its tests import it."""
    path = instance.path
    for root in sorted(instance.source_roots, key=len, reverse=True):
        if root and path.startswith(root.rstrip("/") + "/"):
            path = path[len(root.rstrip("/")) + 1:]
            break
    top = path.split("/", 1)[0]
    return (top.removesuffix(".py"),)


def failure_of(test: str, text: str, test_source: str | None, packages: tuple[str, ...] = (),
               source_path: str | None = None) -> Failure:
    """A failing test's facts, from its part of the failing output and the text of the file its function is in
    (`source_path`, where not the test's own file: a method of a mixin in a shared test module; `packages`: the
    library's top-level packages, which tell what came back from the library in a comparison)."""
    lines = [line for line in text.splitlines() if line.strip() and not SECTION.match(line)]
    # A traceback (failures.readable_failure) names its exception first, whatever its name; other texts are searched.
    match = RAISED.match(lines[0].strip()) if lines and TRACEBACK_HEADER in text else None
    if match is None:
        first = next((line for line in lines if EXCEPTION.match(line.strip())), "")
        match = EXCEPTION.match(first.strip())
    else:
        first = lines[0]
    exception, message = (match.group("name"), (match.group("message") or "").strip()) if match else ("", first)
    test_file = source_path or test.split("::", 1)[0]
    function = test.split("::")[-1].split("[", 1)[0]
    frames = [f for f in _frames(text) if f[0] == test_file or f[0].endswith("/" + test_file)]
    frame = next((f for f in frames if f[2] == function), frames[0] if frames else None)
    code, statement, test_function = _test_code(test_source, frame[2], frame[1]) if frame else ("", None, None)
    line = frame[3] if frame else ""
    facts = {"test": test, "parameters": test.split("[", 1)[1][:-1] if "[" in test else None, "code": code or line,
             "line": line, "exception": exception, "message": message.splitlines()[0] if message else ""}
    sides = _compared(statement)
    library = library_names(test_source or "", packages)
    left_actual = None if sides is None else _actual_is_left(
        *(_traced(side, test_function, statement.lineno) for side in sides[:2]), library)
    # What came back and what was expected: an equality's two sides only (`a != b`, `a < b` compare no expectation)
    if exception == "AssertionError" and left_actual is not None and sides[2] in ("==", "is"):
        left, right, operator = sides
        actual_node = left if left_actual else right
        values = _values(facts["message"], operator) or (None, None)
        actual, expected = values if left_actual else values[::-1]
        return Failure(**facts, actual=actual and actual[:VALUE_CHARS], expected=expected and expected[:VALUE_CHARS],
                       subject=ast.unparse(_origin(actual_node, test_function, statement.lineno)))
    if exception == "AssertionError" and sides is not None:  # neither side known to be what came back: the check
        checked = statement.test if isinstance(statement, ast.Assert) else statement.value
        return Failure(**facts, subject=ast.unparse(checked).splitlines()[0])
    if isinstance(statement, (ast.With, ast.AsyncWith)) and statement.body:
        statement = statement.body[0]  # `with pytest.raises(...)`: what ran inside it
    if statement is not None:
        calls = [n for n in ast.walk(statement) if isinstance(n, ast.Call)]
        shown = statement.test if isinstance(statement, ast.Assert) else statement
        return Failure(**facts, subject=ast.unparse(calls[0] if calls else shown).splitlines()[0])
    return Failure(**facts)


def failures_of(instance: Instance, test_sources: dict[str, str]) -> list[Failure]:
    """The facts of each failing test the output shows, in its order (test_sources: test file path -> text)."""
    packages = packages_of(instance)
    failures = []
    for test, text in sections(instance.failing_output).items():
        path = function_file(test, text)
        failures.append(failure_of(test, text, test_sources.get(path), packages, path))
    return failures


def function_file(test: str, text: str) -> str:
    """The file the test's function is in, as its failure's frames show it: the test's own file, or the one of a
    frame running a function of the test's name (a mixin's method that several test classes inherit)."""
    own, function = test.split("::", 1)[0], test.split("::")[-1].split("[", 1)[0]
    frames = _frames(text)
    if any(path == own and name == function for path, _, name, _ in frames):
        return own
    return next((path for path, _, name, _ in frames if name == function), own)


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _outcome(failure: Failure, key: str) -> str:
    """What happened, in one of several phrasings."""
    subject = f"`{_short(failure.subject)}`" if failure.subject else "the call"
    said = f"`{_short(failure.message, 300)}`" if failure.message else "an AssertionError"
    if failure.actual is None and failure.expected is not None:
        return pick(key, "outcome", [
            f"{subject} should give `{failure.expected}`, but the check fails: {said}.",
            f"Expected: `{failure.expected}`\nActual: the assertion fails with {said}",
            f"I expected `{failure.expected}`; instead the assertion fails: {said}."])
    if failure.expected is None and failure.actual is not None:
        return pick(key, "outcome", [
            f"{subject} gives `{failure.actual}`, which the check rejects: {said}.",
            f"I get `{failure.actual}`, and the assertion fails: {said}."])
    if failure.actual is not None:
        return pick(key, "outcome", [
            f"It returns `{failure.actual}`, but I expected `{failure.expected}`.",
            f"Expected: `{failure.expected}`\nActual: `{failure.actual}`",
            f"{subject} gives `{failure.actual}` where it should give `{failure.expected}`.",
            f"I get `{failure.actual}` back instead of `{failure.expected}`.",
            f"The result is `{failure.actual}`; the correct result would be `{failure.expected}`."])
    if failure.not_raised:
        error = failure.not_raised
        return pick(key, "outcome", [
            f"This should raise {error}, but nothing is raised.",
            f"No {error} is raised here, although the input is invalid.",
            f"I expected {error}; the call just returns.",
            f"Expected: {error} is raised\nActual: no exception"])
    if failure.raised:
        said = failure.said
        return pick(key, "outcome", [
            f"{subject} raises an exception instead of working:\n\n```\n{_short(said, 300)}\n```",
            f"It fails with `{_short(said, 300)}`.",
            f"Instead of a result I get\n\n```\n{_short(said, 300)}\n```",
            f"Running it raises `{_short(said, 300)}`; I expected it to succeed."])
    return pick(key, "outcome", [
        f"The check fails: {said}.",
        f"The assertion does not hold: {said}.",
        f"This assertion fails with {said}."])


def _title(failure: Failure, source: str, key: str) -> str:
    subject = f"`{_short(failure.subject, 60)}`" if failure.subject else f"{source}"
    exception = failure.exception.rsplit(".", 1)[-1]
    if failure.actual is not None and failure.expected is not None:
        return pick(key, "title", [
            f"{subject} returns {_short(failure.actual, 40)} instead of {_short(failure.expected, 40)}",
            f"Wrong result from {subject}",
            f"{subject} gives an incorrect value",
            f"Unexpected value {_short(failure.actual, 40)} from {subject}"])
    if failure.not_raised:
        error = failure.not_raised
        return pick(key, "title", [f"{subject} no longer raises {error}", f"Missing {error} from {subject}",
                                   f"Invalid input accepted by {subject}"])
    if failure.raised:
        return pick(key, "title", [f"{exception} from {subject}", f"{subject} raises {exception}",
                                   f"Crash ({exception}) in {subject}"])
    return pick(key, "title", [f"Assertion fails for {subject}", f"{subject} does not behave as documented",
                               f"Wrong behaviour of {subject}"])


def deterministic_statement(instance: Instance, failures: list[Failure]) -> str:
    """The bug report, from the first failing test's facts, worded by phrasings chosen for this instance. Where an
    exception's message or a value happens to hold a line the patch changes (typing's message on an @overload
    quotes the decorator), it is left out, then the values too, and at the last only the failing tests are named:
    the statement never quotes the bug."""
    first = failures[0] if failures else None
    for facts in ([first, replace(first, message=""), replace(first, message="", actual=None, expected=None)]
                  if first is not None else []):
        statement = _statement(instance, facts)
        if not leaks(statement, instance):
            return statement
    return (f"# Tests of {instance.source} {instance.version} fail\n\n{len(instance.FAIL_TO_PASS)} tests fail, "
            f"e.g. `{instance.FAIL_TO_PASS[0]}`.\n")


def _statement(instance: Instance, first: Failure) -> str:
    key = instance.instance_id
    version = f"{instance.source} {instance.version}"
    opening = pick(key, "opening", [
        f"With {version} (Python {instance.environment.python}), this does not work:",
        f"I ran into this with {version}:",
        f"Steps to reproduce, on {version}:",
        f"Here is a small reproduction on {version}:",
        f"Using {version}, the following fails:"])
    parameters = "" if first.parameters is None else pick(key, "parameters", [
        f"\n\n(This is `{first.test.split('::')[-1].split('[')[0]}` with the parameters `{first.parameters}`.)",
        f"\n\nThe parameters were `{first.parameters}`.",
        f"\n\nParameters of this case: `{first.parameters}`."])
    others = [t for t in instance.FAIL_TO_PASS if t != first.test]
    more = "" if not others else pick(key, "others", [
        f"\n\n{counted(len(others), 'other test', 'fail')} too, for example "
        + ", ".join(f"`{t}`" for t in others[:OTHER_TESTS]) + ".",
        f"\n\nThis is not the only case: {counted(len(others), 'more failing test')}, including "
        + ", ".join(f"`{t}`" for t in others[:OTHER_TESTS]) + ".",
        f"\n\nAlso failing ({len(others)}): " + ", ".join(f"`{t}`" for t in others[:OTHER_TESTS])
        + (" and more." if len(others) > OTHER_TESTS else ".")])
    # where the test's code was not found, the command that runs it (never an empty block)
    shown = (f"```python\n{first.code}\n```" if first.code.strip()
             else f"```\npython -m pytest '{first.test}'\n```")
    return (f"# {_title(first, instance.source, key)}\n\n{opening}\n\n{shown}{parameters}\n\n"
            f"{_outcome(first, key)}{more}\n")


def changed_lines_of(patch: str) -> list[str]:
    """The text of every line a patch removes or adds, stripped."""
    return [line[1:].strip() for line in patch.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---")) and line[1:].strip()]


def leaks(statement: str, instance: Instance) -> list[str]:
    """What of the bug or its fix the statement gives away: a line the patch changes (either side), the
    modifier's description of the change, or the modifier's name."""
    found = [f"quotes the changed line `{line}`" for line in sorted(set(changed_lines_of(instance.patch)))
             if len(line) >= LEAK_MIN_CHARS and line in statement]
    if instance.description and instance.description in statement:
        found.append("repeats the bug's description")
    if re.search(rf"\b{re.escape(instance.modifier)}\b", statement):
        found.append(f"names the modifier {instance.modifier}")
    return found


def facts_text(instance: Instance, failures: list[Failure]) -> str:
    """The facts a model may state, as text (no line of the library, no patch)."""
    first = failures[0]
    lines = [f"Library: {instance.source} {instance.version}, Python {instance.environment.python}.",
             f"The user's code (a test of the library):\n```python\n{first.code}\n```" if first.code.strip()
             else f"The user ran the library's test {first.test}."]
    if first.parameters:
        lines.append(f"Parameters: {first.parameters}")
    if first.actual is not None or first.expected is not None:
        lines.append(f"Actual value: {first.actual or '(not shown)'}\n"
                     f"Expected value: {first.expected or '(not shown)'}")
        lines.append(f"The failed check: {first.message}")
    else:
        lines.append(f"What happened: {first.exception}: {first.message}".rstrip(": "))
    lines.append(f"Failing tests: {len(instance.FAIL_TO_PASS)}; passing tests: {len(instance.PASS_TO_PASS)}.")
    return "\n".join(lines)


STATEMENT_SYSTEM = ("You write bug reports the way a user of a Python library files them: what they ran, what came "
                    "back, what they expected. You have not read the library's code.")


def statement_request(instance: Instance, failures: list[Failure], model: str) -> ChatRequest:
    """Asks a model for the bug report, giving it only what a user sees."""
    task = ("Write a GitHub issue for this problem as JSON with two fields. title: one line. body: the code that "
            "was run (in a python block), what came back and what was expected, in the user's words. Do not "
            "guess at the cause or a fix, and do not mention the library's internals.")
    return ChatRequest(model=model, messages=[ChatMessage(role="system", content=STATEMENT_SYSTEM),
                                              ChatMessage(role="user", content=f"{task}\n\n"
                                                                               f"{facts_text(instance, failures)}")],
                       max_tokens=768, temperature=0.0)


def reply_problems(reply: StatementReply, instance: Instance, failures: list[Failure]) -> list[str]:
    """Why a model's statement is not used: it leaks the bug or fix, or states none of the facts (the value that
    came back or was expected, the exception, the code that was run)."""
    text = f"# {reply.title}\n\n{reply.body}"
    problems = leaks(text, instance)
    first = failures[0]
    facts = [v for v in (first.actual, first.expected, first.exception if first.exception != "AssertionError" else None,
                         first.line) if v]
    if facts and not any(fact in text for fact in facts):
        problems.append("states none of the facts (the values, the exception or the code run)")
    return problems


def model_statement(reply: StatementReply) -> str:
    return f"# {reply.title.strip()}\n\n{reply.body.strip()}\n"
