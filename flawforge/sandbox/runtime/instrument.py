"""Rewrites a program so that each assignment to a variable reports itself as it happens.

After every statement that binds names (=, +=, annotated =, for/with targets, :=) a call
`RECORDER(line, "name", name)` is inserted, so one execution yields the whole trace in
order. Only the called function's own body is rewritten (or the module's top level when
no function is called); nested functions, lambdas and classes are left alone.

`instrument_source` splices the calls into the source text, on the same lines, and is
several times faster to build and compile than rewriting the tree (`instrument`), which
it falls back to where a splice cannot express the rewrite.
"""
import ast

SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def target_names(target: ast.expr) -> list[str]:
    """Variables bound by an assignment target, in the order Python binds them."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Starred):
        return target_names(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in target_names(element)]
    return []  # attributes and subscripts are not variables


class _WalrusRecorder(ast.NodeTransformer):
    """Wraps `(x := v)` into `RECORDER(line, "x", (x := v))`, which returns v."""

    def __init__(self, recorder: str):
        self.recorder = recorder

    def visit_NamedExpr(self, node: ast.NamedExpr) -> ast.expr:
        self.generic_visit(node)
        return ast.copy_location(_record_call(self.recorder, node.lineno, node.target.id, node), node)

    def visit_Lambda(self, node: ast.Lambda) -> ast.Lambda:
        return node  # its := binds inside the lambda, not in the traced scope


def _record_call(recorder: str, line: int, name: str, value: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Name(recorder, ast.Load()),
                    args=[ast.Constant(line), ast.Constant(name), value], keywords=[])


def _record_statements(recorder: str, line: int, names: list[str]) -> list[ast.stmt]:
    return [ast.Expr(_record_call(recorder, line, name, ast.Name(name, ast.Load()))) for name in names]


class _Instrumenter:
    def __init__(self, recorder: str, walrus: bool):
        self.recorder = recorder
        self.walrus = _WalrusRecorder(recorder) if walrus else None

    def block(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in body:
            out.extend(self.statement(stmt))
        return out

    def statement(self, stmt: ast.stmt) -> list[ast.stmt]:
        if isinstance(stmt, SCOPES):
            return [stmt]
        if self.walrus is not None:
            self._rewrite_expressions(stmt)
        for field in ("body", "orelse", "finalbody"):
            if isinstance(getattr(stmt, field, None), list):
                setattr(stmt, field, self.block(getattr(stmt, field)))
        for handler in getattr(stmt, "handlers", ()):
            handler.body = self.block(handler.body)
        for case in getattr(stmt, "cases", ()):
            case.body = self.block(case.body)

        names: list[str] = []
        if isinstance(stmt, ast.Assign):
            names = [name for target in stmt.targets for name in target_names(target)]
        elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
            if isinstance(stmt.target, ast.Name) and getattr(stmt, "value", True) is not None:
                names = [stmt.target.id]
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            stmt.body = _record_statements(self.recorder, stmt.lineno, target_names(stmt.target)) + stmt.body
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            bound = [n for item in stmt.items if item.optional_vars for n in target_names(item.optional_vars)]
            stmt.body = _record_statements(self.recorder, stmt.lineno, bound) + stmt.body
        return [stmt] + _record_statements(self.recorder, stmt.lineno, names)

    def _rewrite_expressions(self, stmt: ast.stmt) -> None:
        """Records := inside the statement's own expressions (not inside its nested blocks)."""
        for field, value in ast.iter_fields(stmt):
            if field in ("body", "orelse", "finalbody", "handlers", "cases"):
                continue
            if isinstance(value, ast.AST):
                setattr(stmt, field, self.walrus.visit(value))
            elif isinstance(value, list):
                setattr(stmt, field, [self.walrus.visit(v) if isinstance(v, ast.AST) else v for v in value])


def instrument(tree: ast.Module, func: str | None, recorder: str, *, walrus: bool = True) -> ast.Module:
    """Instruments `func`'s body (every top-level def of that name) or, if func is None, the module.

    walrus=False skips looking for := (a cost per expression) when the source has none.
    """
    instrumenter = _Instrumenter(recorder, walrus)
    if func is None:
        tree.body = instrumenter.block(tree.body)
    else:
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func:
                node.body = instrumenter.block(node.body)
    return ast.fix_missing_locations(tree)


SIMPLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Pass, ast.Return, ast.Raise, ast.Assert,
          ast.Delete, ast.Break, ast.Continue, ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal)


class NeedsTree(Exception):
    """The splice cannot express this program's rewrite; use the tree rewrite."""


def _call_text(recorder: str, line: int, names: list[str]) -> str:
    return "; ".join(f"{recorder}({line}, {name!r}, {name})" for name in names)


COMPOUND = (ast.If, ast.While, ast.Try, ast.TryStar, ast.Match)


def _splices(body: list[ast.stmt], recorder: str, out: list) -> None:
    """Collects (line, byte column, text) insertions for a block, recursively."""
    for stmt in body:
        if isinstance(stmt, SCOPES):
            continue
        if isinstance(stmt, ast.Assign):
            names = [name for target in stmt.targets for name in target_names(target)]
        elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
            bound = isinstance(stmt.target, ast.Name) and getattr(stmt, "value", True) is not None
            names = [stmt.target.id] if bound else []
        elif isinstance(stmt, SIMPLE):
            names = []
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
            names = []
            if isinstance(stmt, (ast.For, ast.AsyncFor)):
                bound = target_names(stmt.target)
            else:
                bound = [n for item in stmt.items if item.optional_vars for n in target_names(item.optional_vars)]
            first = stmt.body[0]
            if bound and not isinstance(first, SIMPLE):
                raise NeedsTree()  # "call; compound statement" is not Python
            if bound:
                out.append((first.lineno, first.col_offset, _call_text(recorder, stmt.lineno, bound) + "; "))
        elif isinstance(stmt, COMPOUND):
            names = []
        else:
            raise NeedsTree()
        if names:
            out.append((stmt.end_lineno, stmt.end_col_offset, "; " + _call_text(recorder, stmt.lineno, names)))
        if not isinstance(stmt, SIMPLE):
            for field in ("body", "orelse", "finalbody"):
                _splices(getattr(stmt, field, None) or [], recorder, out)
            for handler in getattr(stmt, "handlers", ()):
                _splices(handler.body, recorder, out)
            for case in getattr(stmt, "cases", ()):
                _splices(case.body, recorder, out)


def instrument_source(source: str, tree: ast.Module, func: str | None, recorder: str) -> str:
    """The source with recorder calls spliced in after each assignment; raises NeedsTree."""
    if ":=" in source:
        raise NeedsTree()  # := binds inside expressions: the tree rewrite wraps them
    if "\r" in source.replace("\r\n", "\n"):
        raise NeedsTree()  # lone CR line ends: lines as ast counts them differ from ours
    splices: list = []
    if func is None:
        _splices(tree.body, recorder, splices)
    else:
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func:
                _splices(node.body, recorder, splices)
    if not splices:
        return source
    lines = source.encode("utf-8").split(b"\n")
    for line, column, text in sorted(splices, key=lambda s: (s[0], s[1]), reverse=True):
        row = lines[line - 1]
        lines[line - 1] = row[:column] + text.encode("utf-8") + row[column:]
    return b"\n".join(lines).decode("utf-8")
