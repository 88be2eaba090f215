"""`flawforge review ...`: shortlist candidates, import decisions, report agreement, export the dataset.

These commands work on the blob store the settings name (FLAWFORGE_BLOB_*), the same one the
metrics service serves the review page from.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import typer

from flawforge.cli.outputs import output_folder
from flawforge.errors import FlawforgeError

review_app = typer.Typer(help="Human review of conceptual candidates: shortlist, import, agreement, export.",
                         no_args_is_help=True)

def _round_name(value: str) -> str:
    """--round is checked before any work (a round is created only after its shortlist is drawn)."""
    from flawforge.review.store import check_name

    return check_name("round name", value)


RoundOption = typer.Option(..., "--round", help="Review round name (letters, digits, '_', '.', '-').",
                           callback=_round_name)
Gsm8kOption = typer.Option(..., "--gsm8k", help="GSM8K train jsonl (row N is problem N).")


def _reviews():
    from flawforge.blobstore import open_blob_store
    from flawforge.review.store import ReviewStore
    from flawforge.settings import Settings

    settings = Settings()
    return ReviewStore(open_blob_store(settings), claim_ttl_s=settings.review_claim_ttl_s), settings


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FlawforgeError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


@review_app.command("shortlist")
def shortlist(round_name: str = RoundOption,
              candidates: Optional[Path] = typer.Option(None, "--candidates", help="candidates.jsonl of a math-errors run."),
              legacy: Optional[Path] = typer.Option(None, "--legacy-human-review",
                                                    help="The original project's human-review folder instead."),
              gsm8k: Path = Gsm8kOption,
              templates: Optional[Path] = typer.Option(None, "--templates",
                                                       help="Template folder, for the code diff of each mutation."),
              size_per_error_type: int = typer.Option(20, help="Items per error type."),
              seed: int = typer.Option(0, help="Seed of the stratified draw."),
              family: str = typer.Option("conceptual", help="Error family to review."),
              reviewers_per_item: Optional[int] = typer.Option(
                  None, help="Reviewers each item needs; default FLAWFORGE_REVIEW_REVIEWERS_PER_ITEM.")) -> None:
    """Draws a stratified shortlist (error type x tier x error position) and stores it as a new round."""
    from collections import Counter

    from flawforge.math.export import parse_candidates
    from flawforge.math.gsm8k import read_gsm8k
    from flawforge.math.templates import TemplateFolder
    from flawforge.proto.review import RoundManifest
    from flawforge.review.legacy import legacy_candidates, read_decision_rows
    from flawforge.review.shortlist import review_items, select

    if (candidates is None) == (legacy is None):
        raise FlawforgeError("give exactly one of --candidates and --legacy-human-review")
    problems = read_gsm8k(gsm8k)
    if candidates is not None:
        pool, source = parse_candidates(_read_text(candidates, "candidates file"), str(candidates)), str(candidates)
    else:
        pool = legacy_candidates(legacy / "accepted", read_decision_rows(legacy / "decisions.csv"), problems)
        source = f"legacy human review {legacy}"
    folder = TemplateFolder(templates) if templates else None

    def template_code(candidate) -> str | None:
        files = folder.files(candidate.tier, candidate.problem_index, candidate.template_model)
        code = Path(files.code_path)
        return code.read_text(encoding="utf-8") if code.exists() else None

    reviews, settings = _reviews()
    items = review_items(select(pool, size_per_error_type, seed, family),
                         {p.index: p.question for p in problems}, template_code if folder else lambda c: None)
    manifest = RoundManifest(round=round_name, created_at=datetime.now(timezone.utc), seed=seed,
                             size_per_error_type=size_per_error_type, family=family,
                             reviewers_per_item=reviewers_per_item or settings.review_reviewers_per_item,
                             source=source, item_ids=[item.item_id for item in items])
    reviews.create_round(manifest, items)
    strata = Counter(f"{i.stratum.error_type}/{i.stratum.tier}/{i.stratum.position}" for i in items)
    typer.echo(json.dumps({"round": round_name, "candidates": len(pool), "items": len(items),
                           "reviewers_per_item": manifest.reviewers_per_item,
                           "by_error_type": Counter(i.stratum.error_type for i in items),
                           "strata": dict(sorted(strata.items()))}, indent=1))


@review_app.command("import-decisions")
def import_decisions(decisions_csv: Path = typer.Argument(..., help="decisions.csv of the original project."),
                     round_name: str = RoundOption) -> None:
    """Stores the original project's decisions as the reviewers' history in a round (idempotent)."""
    from flawforge.review.legacy import legacy_decisions, read_decision_rows

    reviews, _ = _reviews()
    decisions = legacy_decisions(read_decision_rows(decisions_csv), datetime.now(timezone.utc))
    summary = reviews.import_decisions(round_name, decisions, source=f"import:{decisions_csv.name}")
    typer.echo(summary.model_dump_json(indent=1))


@review_app.command("decisions")
def dump_decisions(round_name: str = RoundOption) -> None:
    """The round's decision log, oldest first, one JSON object a line."""
    reviews, _ = _reviews()
    reviews.manifest(round_name)  # an unknown round is an error, not an empty log
    for decision in reviews.decisions(round_name):
        typer.echo(decision.model_dump_json())


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


@review_app.command("agreement")
def agreement(round_name: str = RoundOption,
              as_json: bool = typer.Option(False, "--json", help="The full report as JSON.")) -> None:
    """Accept rates per reviewer, Cohen's kappa per reviewer pair, Fleiss' kappa per error type."""
    from flawforge.review.agreement import agreement_report

    reviews, _ = _reviews()
    reviews.manifest(round_name)  # an unknown round is an error, not an empty report
    report = agreement_report(round_name, reviews.decisions(round_name))
    if as_json:
        typer.echo(report.model_dump_json(indent=1))
        return
    lines = [f"round {report.round}: {report.decisions} decisions, {report.verdicts} verdicts on {report.items} "
             f"items, {report.items_multi_rated} items with two or more verdicts", "",
             f"{'reviewer':<12}{'decisions':>10}{'accepted':>10}{'edited':>8}{'rejected':>10}{'skipped':>9}"
             f"{'accept rate':>13}"]
    lines += [f"{r.reviewer:<12}{r.decisions:>10}{r.accepted:>10}{r.edited:>8}{r.rejected:>10}{r.skipped:>9}"
              f"{_number(r.accept_rate):>13}" for r in report.reviewers]
    lines += ["", f"{'error type':<34}{'items':>7}{'multi-rated':>13}{'observed':>10}{'Fleiss k':>10}  note"]
    lines += [f"{t.error_type:<34}{t.items:>7}{t.items_multi_rated:>13}{_number(t.observed_agreement):>10}"
              f"{_number(t.fleiss_kappa):>10}  {t.note}" for t in report.by_error_type + [report.overall]]
    lines += ["", "reviewer pairs with shared items:" if report.pairs else "no two reviewers judged the same item"]
    lines += [f"  {p.reviewer_a} / {p.reviewer_b}: {p.items} items, observed {_number(p.observed_agreement)}, "
              f"Cohen k {_number(p.cohen_kappa)}" for p in report.pairs]
    typer.echo("\n".join(lines))


def _sizes(text: str) -> dict[str, int | None]:
    sizes: dict[str, int | None] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not value.strip().isdigit():
            raise FlawforgeError(f"--sizes entry {part!r} is not CLASS=N (e.g. correct=100)")
        sizes[name.strip()] = int(value)
    return sizes


@review_app.command("export")
def export(round_name: str = RoundOption, gsm8k: Path = Gsm8kOption,
           computational: Optional[Path] = typer.Option(None, "--computational",
                                                        help="candidates.jsonl whose computational errors join."),
           sizes: str = typer.Option("", help="Class sizes, e.g. correct=500,computational=500,conceptual=300; "
                                              "a class left out keeps all its rows."),
           min_verdicts: int = typer.Option(1, help="Verdicts an item needs before it can enter."),
           test_fraction: float = typer.Option(0.2, help="Share of GSM8K problems on the test side."),
           seed: int = typer.Option(0, help="Seed of the class samples and of the problem split."),
           out: Path = typer.Option(..., "--out", help="Folder for train.jsonl and test.jsonl.")) -> None:
    """The final dataset: accepted (and edited) conceptual errors, computational errors, correct solutions."""
    from flawforge.math.export import parse_candidates
    from flawforge.math.gsm8k import read_gsm8k
    from flawforge.review.export import accepted_items, build_final_dataset

    class_sizes = _sizes(sizes)
    reviews, _ = _reviews()
    conceptual = accepted_items(reviews.items(round_name), reviews.decisions(round_name), min_verdicts)
    computational_candidates = [] if computational is None else [
        c for c in parse_candidates(_read_text(computational, "candidates file"), str(computational))
        if c.family == "computational"]
    splits = build_final_dataset(conceptual=conceptual, computational=computational_candidates,
                                 problems=read_gsm8k(gsm8k), sizes=class_sizes, test_fraction=test_fraction,
                                 seed=seed)
    with output_folder(out):
        for split, rows in splits.items():
            (out / f"{split}.jsonl").write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    typer.echo(json.dumps({split: {"rows": len(rows), "problems": len({r["problem_index"] for r in rows}),
                                   "by_family": {f: sum(r["family"] == f for r in rows)
                                                 for f in ("correct", "computational", "conceptual")}}
                           for split, rows in splits.items()}))
