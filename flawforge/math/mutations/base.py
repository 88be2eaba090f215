"""What a mutation is, and the registry that lists them.

A mutation is one kind of error. Each is a small class with a name, a family, a text that
explains it, an applicability rule (`applies`) and one `modify` method that turns a site
(an assignment with its correct values) into edits: a new right-hand side for that
assignment plus the change the solution text must make to say what the flawed
computation did (a flawforge.math.reconstruct.TextChange, defined beside the mutations that
make it). Defining a subclass with a `name` registers it.
"""
from __future__ import annotations

import ast
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cached_property
from fractions import Fraction
from typing import Any, ClassVar, Iterable, Mapping

from flawforge.math.arithmetic import Evaluator, compiled, evaluate
from flawforge.math.program import Site, clone
from flawforge.math.reconstruct import TextChange
from flawforge.proto.math import Family


# Not frozen (nor Substitution): one is made for every way of every mutation at every site, and a frozen
# dataclass's __init__ costs three times as much.
@dataclass
class Edit:
    """One way to apply a mutation at a site."""

    params: dict[str, Any]       # JSON-able; recorded on the candidate for audit
    expression: ast.expr         # the assignment's new right-hand side
    text: TextChange
    prior: float = 0.0           # how plausible a reviewer finds this edit, relative to the others

    def value_in(self, scope: Mapping[str, Any]) -> Any:
        """The new right-hand side's value over the variables in `scope`; raises UnsafeExpression."""
        return evaluate(self.expression, scope)

    def read_as(self) -> tuple[ast.expr, Mapping[str, str]]:
        """An expression and the renaming under which it reads what the new right-hand side reads."""
        return self.expression, {}


@dataclass
class Substitution:
    """An edit that makes the site's own expression read variable `new` where it reads `old`.

    A problem offers many of these and few become code, so the renamed expression is built only
    when asked for; the value is the site's own expression over a scope where `old` holds `new`'s
    value, which is what the renamed expression computes."""

    site: Site
    old: str
    new: str
    params: dict[str, Any]
    text: TextChange
    prior: float = 0.0

    @cached_property
    def expression(self) -> ast.expr:
        return clone(self.site.assignment.value, {self.old: self.new})

    def read_as(self) -> tuple[ast.expr, Mapping[str, str]]:
        """The site's own expression read with `old` renamed (the renamed expression is not built)."""
        return self.site.assignment.value, {self.old: self.new}

    def value_in(self, scope: Mapping[str, Any]) -> Any:
        renamed = dict(scope)
        renamed[self.old] = scope[self.new]
        return compiled(Evaluator, self.site.assignment.value)(renamed)  # one site, many substitutions


def literal(value: Any) -> ast.expr:
    """An expression that evaluates to `value` with its type: 7, 7.5, Fraction(3, 4)."""
    if isinstance(value, Fraction):
        return ast.Call(func=ast.Name(id="Fraction", ctx=ast.Load()),
                        args=[ast.Constant(value.numerator), ast.Constant(value.denominator)], keywords=[])
    if value < 0:
        return ast.UnaryOp(op=ast.USub(), operand=ast.Constant(-value))
    return ast.Constant(value)


REGISTRY: dict[str, "Mutation"] = {}


class Mutation(ABC):
    name: ClassVar[str] = ""
    family: ClassVar[Family]
    explanation: ClassVar[str]  # str.format template over the edit's params and `target`

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name"):
            if cls.name in REGISTRY:
                raise TypeError(f"mutation {cls.name!r} defined twice")
            REGISTRY[cls.name] = cls()

    @abstractmethod
    def applies(self, site: Site) -> bool:
        """Whether this error can happen at this site (by the value's type and its operation)."""

    @abstractmethod
    def modify(self, site: Site) -> Iterable[Edit | Substitution]:
        """Every way this error changes the site; called only where `applies` is true."""

    def edits(self, site: Site) -> list[Edit | Substitution]:
        return list(self.modify(site)) if self.applies(site) else []

    def explanation_values(self, site: Site, edit: Edit) -> dict[str, Any]:
        """What the explanation shows beyond the edit's params (worked out for candidates only)."""
        return {}

    def explain(self, site: Site, edit: Edit) -> str:
        return self.explanation.format(target=site.target, **edit.params, **self.explanation_values(site, edit))


def mutations_of(families: Iterable[str]) -> list[Mutation]:
    wanted = set(families)
    return [mutation for mutation in REGISTRY.values() if mutation.family in wanted]
