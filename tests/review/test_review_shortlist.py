"""Shortlist selection on the original project's real accepted candidates."""
from __future__ import annotations

from collections import Counter

import pytest

from flawforge.review.lines import error_position, line_index
from flawforge.review.shortlist import ShortlistError, review_items, select, stratum_of


def test_same_seed_same_shortlist_whatever_the_input_order(candidates):
    first = [c.id for c, _ in select(candidates, 12, seed=3)]
    assert first == [c.id for c, _ in select(list(reversed(candidates)), 12, seed=3)]
    assert first != [c.id for c, _ in select(candidates, 12, seed=4)]


def test_size_is_per_error_type_and_capped_by_what_exists(candidates):
    available = Counter(c.error_type for c in candidates)
    chosen = Counter(c.error_type for c, _ in select(candidates, 70, seed=0))
    assert chosen == {t: min(70, n) for t, n in available.items()}
    assert len(chosen) == 5 and min(available.values()) < 70 < max(available.values())


def test_each_item_points_at_one_distinct_candidate(candidates, questions):
    items = review_items(select(candidates, 10, seed=1), questions)
    assert len({item.item_id for item in items}) == len(items) == 50
    by_id = {c.id: c for c in candidates}
    for item in items:
        assert item.candidate == by_id[item.item_id]
        assert item.question == questions[item.candidate.problem_index]


def test_strata_are_drawn_in_turn_so_rare_cells_are_represented(candidates):
    # operator_swap has 12 tier x position cells of very different sizes (1..11 candidates).
    pool = [c for c in candidates if c.error_type == "operator_swap"]
    cells = Counter((s.tier, s.position) for s in map(stratum_of, pool))
    chosen = Counter((s.tier, s.position) for _, s in select(pool, len(cells), seed=5))
    assert chosen == {cell: 1 for cell in cells}
    chosen = Counter((s.tier, s.position) for _, s in select(pool, 2 * len(cells), seed=5))
    assert all(chosen[cell] == min(2, n) for cell, n in cells.items())


def test_position_of_the_error_in_the_solution(candidates):
    kinds = {}
    for candidate in candidates:
        kinds.setdefault(error_position(candidate.flawed_solution, candidate.erroneous_line_number), candidate)
    assert set(kinds) == {"early", "middle", "late"}
    fa = next(c for c in candidates if c.erroneous_line_number == "FA")
    assert error_position(fa.flawed_solution, "FA") == "late"
    lines = "a\nb\nc\nd\ne\nf\n#### 1"
    assert [error_position(lines, f"L{k}") for k in range(1, 7)] == ["early"] * 2 + ["middle"] * 2 + ["late"] * 2


def test_highlighted_line_is_the_erroneous_step(candidates, questions):
    item = next(i for i in review_items(select(candidates, 5, seed=2), questions)
                if i.candidate.erroneous_line_number == "L2")
    flawed = item.candidate.flawed_solution.splitlines()
    assert flawed[item.flawed_line_index] == [l for l in flawed if l.strip()][1]
    fa = next(c for c in candidates if c.erroneous_line_number == "FA")
    assert fa.flawed_solution.splitlines()[line_index(fa.flawed_solution, "FA")].startswith("####")


def test_family_filter_and_bad_input(candidates):
    assert select(candidates, 5, seed=0, family="computational") == []
    with pytest.raises(ShortlistError, match="appears twice"):
        select(candidates[:3] + candidates[:1], 5, seed=0)
    with pytest.raises(ShortlistError, match="at least 1"):
        select(candidates, 0, seed=0)
    broken = candidates[0].model_copy(update={"erroneous_line_number": "line 3"})
    with pytest.raises(ShortlistError, match="neither 'L<k>' nor 'FA'"):
        select([broken], 5, seed=0)


def test_code_diff_of_a_mutation_against_its_template(candidates, questions, shared_data):
    candidate = next(c for c in candidates if c.error_type == "operator_swap")
    template = (shared_data / "formalization-templates" / candidate.tier / str(candidate.problem_index)
                / f"{candidate.template_model}.py").read_text()
    # The original project kept no mutated code: a candidate carrying one gets its diff.
    mutated = template.replace(" * ", " + ", 1) if " * " in template else template.replace(" + ", " * ", 1)
    item = review_items([(candidate.model_copy(update={"mutated_code": mutated}), stratum_of(candidate))], questions,
                        lambda c: template)[0]
    assert item.code_diff.startswith("--- template.py\n+++ mutated.py\n")
    assert sum(line.startswith("-") and not line.startswith("---") for line in item.code_diff.splitlines()) == 1
    assert review_items([(candidate, stratum_of(candidate))], questions, lambda c: template)[0].code_diff == ""
