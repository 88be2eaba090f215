"""Difficulty tiers of GSM8K problems, by the original project's rules on the solution text.

tier5: symbolic solutions ("Let x ..."); otherwise by whether the solution has decimals
and computational division: tier1 neither, tier2 decimals only, tier3 division only, tier4 both.
"""
from __future__ import annotations

import re
from typing import Iterable

TIERS = ("tier1", "tier2", "tier3", "tier4", "tier5")

_DIVISION = re.compile(r"/\s*\d")
# The original's pattern is (?<!\d)\.\d+|\d+\.\d+: it matches exactly where a '.' precedes a digit (a
# digit before the '.' or none), so searching for that alone gives the same answer without backtracking.
_DECIMAL = re.compile(r"\.\d")
_SYMBOLIC = re.compile(r"^Let [a-zA-Z] ", re.MULTILINE)


def has_computational_division(solution: str) -> bool:
    return bool(_DIVISION.search(solution))


def has_float(solution: str) -> bool:
    return bool(_DECIMAL.search(solution))


def is_symbolic(solution: str) -> bool:
    return bool(_SYMBOLIC.search(solution))


def tier_of(solution: str) -> str:
    if is_symbolic(solution):
        return "tier5"
    decimal, division = has_float(solution), has_computational_division(solution)
    return ("tier1", "tier2", "tier3", "tier4")[2 * division + decimal]


def tiers_by_index(solutions: Iterable[str]) -> dict[str, list[int]]:
    """The mutually disjoint tiers of a dataset: tier name -> sorted problem indices."""
    tiers: dict[str, list[int]] = {tier: [] for tier in TIERS}
    for index, solution in enumerate(solutions):
        tiers[tier_of(solution)].append(index)
    return tiers
