"""A formalization template's code, read as a straight-line program, bound to its correct trace.

Templates define `solve()` as a sequence of assignments grouped by `# L<k>` / `# FA` comments,
one group per logical step of the solution. Mutations are found on the top-level assignments
of solve(); the values they need (each assignment's value and the variables visible before
it) come from one execution trace, so nothing is re-executed to discover them.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping, NamedTuple

from flawforge.math.arithmetic import Compiled, Evaluator, UnsafeExpression, call_name, compiled, evaluate, is_number
from flawforge.proto.values import TraceStep, TypedValue, identical

ENTRY_POINT = "solve"
FINAL_ANSWER_STEP = "FA"
_STEP_COMMENT = re.compile(r"^\s*#\s*(L\d+|FA)\b")
# Names that are functions or modules, never variables of the solution.
_NOT_VARIABLES = {"Fraction", "math", "int", "float", "round", "abs", "min", "max"}


class TemplateError(ValueError):
    """The template's code cannot be read as a solve() program; the message says why."""


@dataclass(frozen=True)
class Assignment:
    position: int          # index among solve()'s top-level assignments
    target: str
    node: ast.Assign
    step: str              # 'L<k>', 'FA', or '' outside any marked group
    reads: tuple[str, ...]  # variables the right-hand side reads, in source order, each once

    @property
    def value(self) -> ast.expr:
        return self.node.value

    @property
    def line(self) -> int:
        return self.node.lineno

    @property
    def is_input(self) -> bool:
        """A value taken from the question or world knowledge: it reads no variable."""
        return not self.reads

    @property
    def operation(self) -> str:
        """The operation that produced the value: '+', '-', '*', '/', '//', '%', '**', a function, or ''."""
        value = self.value
        if isinstance(value, ast.BinOp):
            return _OPERATOR_SYMBOLS.get(type(value.op), "")
        if isinstance(value, ast.Call):
            return call_name(value.func) or ""
        return ""


_OPERATOR_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
                     ast.Mod: "%", ast.Pow: "**"}
OPERATORS = {symbol: op for op, symbol in _OPERATOR_SYMBOLS.items()}


def operator_symbol(op: ast.operator) -> str:
    return _OPERATOR_SYMBOLS.get(type(op), "?")


def clone(node: ast.AST, renames: Mapping[str, str] | None = None) -> ast.AST:
    """A deep copy of a small expression tree, with the variables in `renames` renamed on the way
    (copy.deepcopy is ten times slower on these). Operator and context nodes, which carry no
    data, are shared."""
    kind = type(node)
    if kind is ast.Name:
        copied = ast.Name(id=renames.get(node.id, node.id) if renames else node.id, ctx=node.ctx)
    elif kind is ast.Constant:
        copied = ast.Constant(value=node.value, kind=node.kind)
    elif kind is ast.BinOp:
        copied = ast.BinOp(left=clone(node.left, renames), op=node.op, right=clone(node.right, renames))
    else:
        copied = kind()
        for name, value in ast.iter_fields(node):
            if isinstance(value, ast.AST):
                value = value if isinstance(value, _DATALESS) else clone(value, renames)
            elif isinstance(value, list):
                value = [clone(item, renames) if isinstance(item, ast.AST) else item for item in value]
            setattr(copied, name, value)
    for name in node._attributes:
        if hasattr(node, name):
            setattr(copied, name, getattr(node, name))
    return copied


_DATALESS = (ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.expr_context)


def expression_nodes(expression: ast.AST) -> list[ast.AST]:
    """Every node of an expression in ast.walk's order (breadth first), as a list: ast.walk's generic
    field iteration costs several times more on the small trees of templates, walked for every mutant."""
    nodes = [expression]
    for node in nodes:  # the list grows while it is read
        kind = type(node)
        if kind is ast.BinOp:
            nodes += (node.left, node.op, node.right)
        elif kind is ast.Name:
            context = getattr(node, "ctx", None)
            if context is not None:
                nodes.append(context)
        elif kind is not ast.Constant:
            nodes.extend(ast.iter_child_nodes(node))
    return nodes


def copy_at(expression: ast.expr, position: int) -> tuple[ast.expr, ast.AST]:
    """A deep copy of `expression` and, in it, the node at `position` in ast.walk order."""
    duplicate = clone(expression)
    return duplicate, expression_nodes(duplicate)[position]


def replace_node(expression: ast.expr, old: ast.AST, new: ast.expr) -> ast.expr:
    """`expression` with the node `old` (by identity) replaced by `new`, wherever it sits."""
    if expression is old:
        return new

    class Replacer(ast.NodeTransformer):
        def visit(self, node):
            return new if node is old else super().visit(node)

    return Replacer().visit(expression)


def variables_read(expression: ast.expr) -> tuple[str, ...]:
    """Variables read by an expression, in source order, without function and module names."""
    nodes = expression_nodes(expression)
    called = {id(node.func) for node in nodes if isinstance(node, ast.Call)}
    called |= {id(node.value) for node in nodes if isinstance(node, ast.Attribute)
               and isinstance(node.value, ast.Name) and node.value.id in _NOT_VARIABLES}
    names = [node for node in nodes if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
             and id(node) not in called and node.id not in _NOT_VARIABLES]
    names.sort(key=lambda node: (node.lineno, node.col_offset))
    return tuple(dict.fromkeys(node.id for node in names))


@dataclass(frozen=True)
class Program:
    source: str
    function: ast.FunctionDef
    assignments: tuple[Assignment, ...]
    logical_steps: tuple[dict, ...]
    input_names: frozenset[str]
    answer: Assignment | None  # the assignment to the variable solve() returns
    returned: ast.expr | None   # what solve() returns
    straight_line: bool         # only assignments, a docstring and a final return

    @classmethod
    def parse(cls, source: str, logical_steps: list[dict]) -> "Program":
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            raise TemplateError(f"code does not parse: {exc.msg} at line {exc.lineno}") from None
        functions = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == ENTRY_POINT]
        if not functions:
            raise TemplateError(f"code defines no {ENTRY_POINT}() function")
        function = functions[-1]
        step_of_line = _step_of_line(source)
        assignments = tuple(
            Assignment(position=position, target=node.targets[0].id, node=node,
                       step=step_of_line.get(node.lineno, ""), reads=variables_read(node.value))
            for position, node in enumerate(
                node for node in function.body
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)))
        if not assignments:
            raise TemplateError(f"{ENTRY_POINT}() assigns no variable")
        inputs = {a.target for a in assignments if a.is_input}
        for step in logical_steps:
            for key in ("question_inputs", "WK_inputs"):
                inputs.update(name for name in step.get(key) or [] if isinstance(name, str))
        returns = [node for node in function.body if isinstance(node, ast.Return)]
        returned = returns[-1].value if returns else None
        answer = None
        if isinstance(returned, ast.Name):
            answer = next((a for a in reversed(assignments) if a.target == returned.id), None)
        body = function.body
        straight_line = bool(returns) and body[-1] is returns[-1] and all(
            isinstance(node, (ast.Assign, ast.Pass)) or node is returns[-1]
            or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
            for node in body) and len(assignments) == sum(isinstance(node, ast.Assign) for node in body)
        return cls(source=source, function=function, assignments=assignments, logical_steps=tuple(logical_steps),
                   input_names=frozenset(inputs), answer=answer, returned=returned, straight_line=straight_line)

    def step_of(self, variable: str) -> str:
        """The logical step that computes a variable: its group in the code, else the step naming it."""
        assignment = next((a for a in reversed(self.assignments) if a.target == variable), None)
        if assignment is not None and assignment.step:
            return assignment.step
        return next((s.get("line_number", "") for s in self.logical_steps if s.get("output_variable") == variable), "")

    def aliases(self, variable: str) -> frozenset[str]:
        """The variable and every variable that is a plain copy of it, or it of them (`b = a`)."""
        group = {variable}
        grew = True
        while grew:
            grew = False
            for assignment in self.assignments:
                if isinstance(assignment.value, ast.Name):
                    pair = {assignment.target, assignment.value.id}
                    if pair & group and not pair <= group:
                        group |= pair
                        grew = True
        return frozenset(group)

    def with_value(self, assignment: Assignment, expression: ast.expr) -> str:
        """The source with one assignment's right-hand side replaced; every other line keeps its number."""
        value = assignment.value
        lines = self.source.splitlines(keepends=True)
        start, end = value.lineno - 1, value.end_lineno - 1
        text = ast.unparse(expression)
        if end > start:  # keep the line count: newlines inside parentheses are allowed
            text = f"({text}{chr(10) * (end - start)})"
        head = _prefix(lines[start], value.col_offset)
        tail = lines[end][_offset(lines[end], value.end_col_offset):]
        return "".join(lines[:start]) + head + text + tail + "".join(lines[end + 1:])


def _offset(line: str, utf8_offset: int) -> int:
    """ast column offsets count UTF-8 bytes; str slicing counts characters."""
    return len(line.encode("utf-8")[:utf8_offset].decode("utf-8", errors="ignore"))


def _prefix(line: str, utf8_offset: int) -> str:
    return line[:_offset(line, utf8_offset)]


def _step_of_line(source: str) -> dict[int, str]:
    steps, current = {}, ""
    for number, line in enumerate(source.splitlines(), start=1):
        match = _STEP_COMMENT.match(line)
        if match:
            current = match.group(1)
        steps[number] = current
    return steps


@dataclass(frozen=True)
class Site:
    """One assignment with its correct value and the variables visible just before it."""

    program: Program
    assignment: Assignment
    value: Any
    scope: Mapping[str, Any] = field(repr=False)

    @property
    def target(self) -> str:
        return self.assignment.target

    def numeric_scope(self) -> dict[str, Any]:
        return {name: value for name, value in self.scope.items() if is_number(value)}


class Prediction(NamedTuple):
    """A straight-line program's execution when one assignment computes something else (a tuple: one
    is made for every mutant)."""

    values: dict[str, Any]     # each variable's last value
    answer: Any                # what solve() returns
    start: int                 # position of the changed assignment
    assigned: tuple[Any, ...]  # the values assigned from `start` on, in execution order


@dataclass(frozen=True)
class BoundProgram:
    """A program with the values of its correct execution."""

    program: Program
    sites: tuple[Site, ...]
    final_values: Mapping[str, Any]  # each variable's last value
    answer: Any
    trace: tuple[TraceStep, ...] = ()

    @classmethod
    def bind(cls, program: Program, trace: list[TraceStep], answer: Any) -> "BoundProgram":
        by_line = {(a.line, a.target): a for a in program.assignments}
        pending: dict[str, list[Assignment]] = {}
        for assignment in program.assignments:
            pending.setdefault(assignment.target, []).append(assignment)
        scope: dict[str, Any] = {}
        sites, seen = [], set()
        for step in trace:
            value = step.value.to_python()
            # a tracer may report a statement's first or last line: fall back to source order
            assignment = by_line.get((step.line, step.name)) or next(
                (a for a in pending.get(step.name, ()) if a.position not in seen), None)
            if assignment is not None and assignment.position not in seen:
                seen.add(assignment.position)
                sites.append(Site(program=program, assignment=assignment, value=value, scope=dict(scope)))
            scope[step.name] = value
        return cls(program=program, sites=tuple(sites), final_values=scope, answer=answer, trace=tuple(trace))

    def predict(self, site: Site, value: Any) -> Prediction:
        """The execution when `site` computes `value` instead.

        Straight-line programs only: the assignments after the site are evaluated with the
        arithmetic interpreter. Raises Unpredictable, or UnsafeExpression when the arithmetic
        itself fails (e.g. a division by zero) or is not plain arithmetic.
        """
        program = self.program
        if not program.straight_line or program.returned is None:
            raise Unpredictable("the program is not straight-line code")
        values = dict(site.scope)
        values[site.target] = value
        assigned = [value]
        start = site.assignment.position
        for target, computed in self._compiled[start + 1:]:
            value = values[target] = computed(values)
            assigned.append(value)
        return Prediction(values=values, answer=self._compiled_answer(values), start=start, assigned=tuple(assigned))

    @cached_property
    def _compiled(self) -> tuple[tuple[str, Compiled], ...]:
        """Each assignment's target and its compiled right-hand side (predictions evaluate them for every mutant)."""
        return tuple((a.target, compiled(Evaluator, a.value)) for a in self.program.assignments)

    @cached_property
    def _compiled_answer(self) -> Compiled:
        return compiled(Evaluator, self.program.returned)

    def trace_of(self, prediction: Prediction) -> list[TraceStep]:
        """The trace the predicted execution records: the correct one up to the change, then the new values
        (a step whose value did not change is the correct step itself)."""
        steps = list(self.trace[:prediction.start])
        for step, site, value in zip(self.trace[prediction.start:], self.sites[prediction.start:],
                                     prediction.assigned):
            steps.append(step if identical(value, site.value) else
                         TraceStep(name=step.name, line=step.line, value=TypedValue.of(value)))
        return steps

    @property
    def predictable(self) -> bool:
        """Whether the arithmetic interpreter reproduces the traced execution exactly: every value, its
        type and its place in the trace."""
        assignments = self.program.assignments
        if not self.sites or not len(self.sites) == len(assignments) == len(self.trace):
            return False
        if any(step.name != a.target for step, a in zip(self.trace, assignments)):
            return False
        first = self.sites[0]
        try:
            prediction = self.predict(first, evaluate(first.assignment.value, first.scope))
        except (Unpredictable, UnsafeExpression):
            return False
        return identical(prediction.answer, self.answer) and all(
            identical(value, site.value) for value, site in zip(prediction.assigned, self.sites))


class Unpredictable(Exception):
    """The program's execution cannot be re-evaluated without running it."""


