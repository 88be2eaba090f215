"""Rewrites a program so that each assignment to a variable reports itself as it happens.

After every statement that binds names (=, +=, annotated =, for/with targets, :=) a call
`RECORDER(line, "name", name)` is inserted, so one execution yields the whole trace in
order. Only the called function's own body is rewritten (or the module's top level when
no function is called); nested functions, lambdas and classes are left alone.
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
    def __init__(self, recorder: str):
        self.recorder = recorder
        self.walrus = _WalrusRecorder(recorder)

    def block(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in body:
            out.extend(self.statement(stmt))
        return out

    def statement(self, stmt: ast.stmt) -> list[ast.stmt]:
        if isinstance(stmt, SCOPES):
            return [stmt]
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


def instrument(tree: ast.Module, func: str | None, recorder: str) -> ast.Module:
    """Instruments `func`'s body (every top-level def of that name) or, if func is None, the module."""
    instrumenter = _Instrumenter(recorder)
    if func is None:
        tree.body = instrumenter.block(tree.body)
    else:
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func:
                node.body = instrumenter.block(node.body)
    return ast.fix_missing_locations(tree)
