"""Human review over HTTP: the reviewer's next item, decisions, progress, agreement, and the web page.

Every endpoint but the page itself needs a bearer token from FLAWFORGE_API_TOKENS (the app checks it
on every router); the token's owner is the reviewer, and no request can name another. Reviewer and
operator tokens review; a service token cannot decide (or read) anything here; the agreement report
is for operators.
"""
from __future__ import annotations

from pathlib import Path
from fastapi import APIRouter, Depends, Response, status
from fastapi.responses import FileResponse

from flawforge.errors import ConfigError
from flawforge.proto.review import (AgreementReport, Assignment, Decision, DecisionRequest, ReviewItem,
                                    RoundManifest, RoundProgress)
from flawforge.review.agreement import agreement_report
from flawforge.review.store import ReviewInvalid, ReviewNotFound, ReviewStore, check_name, visible_to
from flawforge.runtime.auth import OPERATOR, REVIEWER, Caller, allow, caller, identity, parse_api_tokens
from flawforge.runtime.platform import Platform

STATIC = Path(__file__).resolve().parent / "static"
PAGE_FILES = {"review.js": "text/javascript", "review.css": "text/css"}


def review_router(platform: Platform) -> APIRouter:
    settings = platform.settings
    for who in parse_api_tokens(settings.api_tokens).values():
        try:
            check_name("reviewer name", who.name)
        except ReviewInvalid as exc:
            raise ConfigError(f"FLAWFORGE_API_TOKENS: {exc}") from None
    reviews = ReviewStore(platform.store, claim_ttl_s=settings.review_claim_ttl_s)
    Reviewer = Depends(caller)
    router = APIRouter(prefix="/review", tags=["review"], dependencies=[allow(OPERATOR, REVIEWER)])

    @router.get("/whoami")
    def whoami(reviewer: str = Reviewer) -> dict:
        """The reviewer the token belongs to."""
        return {"reviewer": reviewer}

    @router.get("/rounds")
    def list_rounds(reviewer: str = Reviewer) -> list[str]:
        return reviews.rounds()

    @router.get("/rounds/{round_name}")
    def get_round(round_name: str, reviewer: str = Reviewer) -> RoundManifest:
        return reviews.manifest(round_name)

    @router.get("/rounds/{round_name}/progress")
    def get_progress(round_name: str, reviewer: str = Reviewer) -> RoundProgress:
        return reviews.progress(round_name, reviewer)

    @router.post("/rounds/{round_name}/next", responses={204: {"description": "Nothing left for this reviewer."}})
    def next_item(round_name: str, response: Response, reviewer: str = Reviewer) -> Assignment | None:
        """Claims the item this reviewer should judge now (their open claim first, if any)."""
        assignment = reviews.next_item(round_name, reviewer)
        if assignment is None:
            response.status_code = status.HTTP_204_NO_CONTENT
        return assignment

    @router.get("/rounds/{round_name}/items/{item_id}")
    def get_item(round_name: str, item_id: str, reviewer: str = Reviewer) -> ReviewItem:
        return reviews.item(round_name, item_id)

    @router.post("/rounds/{round_name}/items/{item_id}/decisions", status_code=status.HTTP_201_CREATED,
                 responses={409: {"description": "Already decided, claim lost, item full, or another candidate."}})
    def decide(round_name: str, item_id: str, body: DecisionRequest, reviewer: str = Reviewer) -> Decision:
        """Records the token owner's decision on the item, once."""
        return reviews.decide(round_name, item_id, reviewer, body)

    @router.post("/rounds/{round_name}/undo",
                 responses={404: {"description": "No decision of this reviewer in the round."},
                            409: {"description": "Undone already, imported, or the skipped item taken up since."}})
    def undo(round_name: str, reviewer: str = Reviewer) -> Assignment:
        """Withdraws the token owner's latest decision in the round and gives its item back to decide again."""
        return reviews.undo_last(round_name, reviewer)

    @router.get("/rounds/{round_name}/decisions")
    def list_decisions(round_name: str, reviewer_name: str | None = None,
                       who: Caller = Depends(identity)) -> list[Decision]:
        """The round's decision log, oldest first; `reviewer_name` filters it. A reviewer sees their own
        decisions, and others' only on the items they have decided themselves."""
        if who.role != REVIEWER:
            return reviews.decisions(round_name, reviewer_name)
        return [d for d in visible_to(reviews.decisions(round_name), who.name) if reviewer_name in (None, d.reviewer)]

    return router


def review_report_router(platform: Platform) -> APIRouter:
    """What the round's decisions add up to: for operators, since a reviewer who read it would know how the
    others judged items still open to them."""
    reviews = ReviewStore(platform.store, claim_ttl_s=platform.settings.review_claim_ttl_s)
    router = APIRouter(prefix="/review", tags=["review"], dependencies=[allow(OPERATOR)])

    @router.get("/rounds/{round_name}/agreement")
    def agreement(round_name: str) -> AgreementReport:
        """Fleiss' kappa per error type, Cohen's kappa per reviewer pair, accept rates per reviewer."""
        return agreement_report(round_name, reviews.decisions(round_name))

    return router


def review_page_router(platform: Platform) -> APIRouter:
    """The review web page and its files: no data, so no token (the page asks for one and sends it)."""
    router = APIRouter(prefix="/review", include_in_schema=False)

    @router.get("/")
    def page() -> FileResponse:
        """The review web page; it asks for the reviewer's token and keeps it in the browser."""
        return FileResponse(STATIC / "review.html", media_type="text/html")

    @router.get("/static/{name}")
    def page_file(name: str) -> FileResponse:
        if name not in PAGE_FILES:
            raise ReviewNotFound(f"no page file {name!r}")
        return FileResponse(STATIC / name, media_type=PAGE_FILES[name])

    return router
