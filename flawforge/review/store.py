"""A review round's state in the blob store: shortlist, claims and decisions.

Every state blob is written once with put_if_absent and never changed, so concurrent
reviewers in any number of threads or processes sharing the store cannot overwrite each
other, a restarted service reads everything back, and the decision log is append-only.

Layout under `review/<round>/`:
  manifest.json                                  the round (written last: the round exists once it is there)
  items/<item>.json                              a frozen review item
  state/<item>/reviewers/<reviewer>.json         the claim this reviewer got on the item (one per reviewer)
  state/<item>/slots/<k>/<generation>/claim.json     who holds review slot k of the item
  state/<item>/slots/<k>/<generation>/outcome.json   what ended that claim: a decision or a release

An item has `reviewers_per_item` slots. A slot is filled by an accept, reject or edit. A skip,
or an expired claim taken over by another reviewer, closes the generation and the slot opens
again at the next one. Whoever writes an outcome first wins, which is what makes a late
decision on an expired claim and the takeover of that claim mutually exclusive.

A reviewer undoes their latest decision by claiming the next generation of its slot with a claim
that `reopens` it: that one write withdraws the decision (it stays stored, out of every count)
and gives the item back to them to decide again.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable

from flawforge.blobstore import BlobStore
from flawforge.errors import BlobNotFound, Conflict, InvalidInput, NotFound
from flawforge.proto.review import (NAME_PATTERN, Assignment, Claim, Decision, DecisionRequest, ImportSummary,
                                    ReviewItem, RoundManifest, RoundProgress, SlotOutcome, SlotRelease)
from flawforge.review.lines import line_diff, line_labels

COUNTED_KINDS = ("accept", "reject", "edit")
CONTENTION_RETRIES = 50
CONTENTION_WAIT_S = 0.02
_NAME = re.compile(NAME_PATTERN)
_GENERATION_DIGITS = 6


class ReviewNotFound(NotFound):
    code = "review_not_found"


class ReviewConflict(Conflict):
    code = "review_conflict"


class ReviewInvalid(InvalidInput):
    code = "review_invalid"


def check_name(kind: str, value: str) -> str:
    if not _NAME.match(value):
        raise ReviewInvalid(f"invalid {kind} {value!r}: use letters, digits, '_', '.', '-' (at most 64)")
    return value


def visible_to(decisions: list[Decision], reviewer: str) -> list[Decision]:
    """What a reviewer may read of a decision log: their own decisions, and others' on the items they have
    decided themselves (before that, the others' verdicts and comments would sway theirs)."""
    decided = {d.item_id for d in decisions if d.reviewer == reviewer}
    return [d for d in decisions if d.item_id in decided]


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class Generation:
    claim: Claim | None = None
    outcome: SlotOutcome | None = None


@dataclass
class ItemState:
    """Everything stored about one item's reviews, as read at one moment."""

    markers: dict[str, Claim] = field(default_factory=dict)
    slots: dict[int, dict[int, Generation]] = field(default_factory=dict)

    def recorded(self) -> list[Decision]:
        """Every decision stored on the item, withdrawn ones included."""
        return [gen.outcome.decision for gens in self.slots.values() for gen in gens.values()
                if gen.outcome is not None and gen.outcome.decision is not None]

    def withdrawn(self, decision: Decision) -> bool:
        """Whether its reviewer undid the decision: the next generation of its slot is claimed to reopen it."""
        later = self.slots.get(decision.slot, {}).get(decision.generation + 1)
        return later is not None and later.claim is not None and later.claim.reopens == decision.generation

    def decisions(self) -> list[Decision]:
        """The decisions that stand (none withdrawn)."""
        return [decision for decision in self.recorded() if not self.withdrawn(decision)]

    def filled(self) -> int:
        return sum(1 for decision in self.decisions() if decision.kind in COUNTED_KINDS)

    def slot_status(self, slot: int, now: datetime, ttl: timedelta) -> tuple[str, int]:
        """('free' | 'expired' | 'active' | 'filled', generation a new claim would take)."""
        gens = self.slots.get(slot)
        if not gens:
            return "free", 0
        latest = max(gens)
        gen = gens[latest]
        if gen.outcome is not None:
            decision = gen.outcome.decision
            return ("filled", latest) if decision is not None and decision.kind in COUNTED_KINDS else ("free", latest + 1)
        if gen.claim is not None and now - gen.claim.claimed_at >= ttl:
            return "expired", latest + 1
        if gen.claim is not None and self._duplicate(gen.claim):
            return "free", latest + 1  # its reviewer holds another slot and is handing this one back
        return "active", latest

    def _duplicate(self, claim: Claim) -> bool:
        marker = self.markers.get(claim.reviewer)
        return (marker is not None and claim.reopens is None
                and (marker.slot, marker.generation) != (claim.slot, claim.generation))

    def current_claim(self, reviewer: str) -> Claim | None:
        """The reviewer's claim on the item: the one their marker names, or the later one in the same slot that
        an undo gave back to them."""
        claim = self.markers.get(reviewer)
        while claim is not None:
            later = self.slots.get(claim.slot, {}).get(claim.generation + 1)
            if (later is None or later.claim is None or later.claim.reviewer != reviewer
                    or later.claim.reopens != claim.generation):
                return claim
            claim = later.claim
        return None

    def claim_in_flight(self) -> bool:
        """A slot claimed by a reviewer whose marker is not written yet: it may be handed back."""
        return any(gen.outcome is None and gen.claim is not None and gen.claim.reviewer not in self.markers
                   for gens in self.slots.values() for gen in gens.values())

    def statuses(self, slots: int, now: datetime, ttl: timedelta) -> list[str]:
        return [self.slot_status(k, now, ttl)[0] for k in range(slots)]

    def open_to(self, reviewer: str, slots: int, now: datetime, ttl: timedelta) -> bool:
        return reviewer not in self.markers and any(
            s in ("free", "expired") for s in self.statuses(slots, now, ttl))

    def holds_open_claim(self, reviewer: str) -> Claim | None:
        claim = self.current_claim(reviewer)
        if claim is None:
            return None
        gen = self.slots.get(claim.slot, {}).get(claim.generation)
        return claim if gen is None or gen.outcome is None else None


class ReviewStore:
    def __init__(self, store: BlobStore, claim_ttl_s: float = 1800.0, clock: Callable[[], datetime] = utc_now):
        self.store = store
        self.claim_ttl = timedelta(seconds=claim_ttl_s)
        self.clock = clock
        # State blobs never change once written, so what was read once stays true.
        self._cache: dict[str, object] = {}

    # -- keys ---------------------------------------------------------------------------------
    @staticmethod
    def _round_prefix(round_name: str) -> str:
        return f"review/{check_name('round name', round_name)}/"

    def _manifest_key(self, round_name: str) -> str:
        return self._round_prefix(round_name) + "manifest.json"

    def _item_key(self, round_name: str, item_id: str) -> str:
        return f"{self._round_prefix(round_name)}items/{check_name('item id', item_id)}.json"

    def _state_prefix(self, round_name: str, item_id: str | None = None) -> str:
        prefix = self._round_prefix(round_name) + "state/"
        return prefix if item_id is None else f"{prefix}{check_name('item id', item_id)}/"

    def _marker_key(self, round_name: str, item_id: str, reviewer: str) -> str:
        return f"{self._state_prefix(round_name, item_id)}reviewers/{reviewer}.json"

    def _slot_key(self, round_name: str, item_id: str, slot: int, generation: int, name: str) -> str:
        return (f"{self._state_prefix(round_name, item_id)}slots/{slot}/"
                f"{generation:0{_GENERATION_DIGITS}d}/{name}.json")

    # -- immutable reads and writes -------------------------------------------------------------
    def _read(self, key: str, model):
        cached = self._cache.get(key)
        if cached is None:
            cached = model.model_validate_json(self.store.get(key))
            self._cache[key] = cached
        return cached

    def _write_once(self, key: str, obj) -> bool:
        return self.store.put_if_absent(key, obj.model_dump_json().encode())

    # -- rounds -------------------------------------------------------------------------------
    def create_round(self, manifest: RoundManifest, items: list[ReviewItem]) -> RoundManifest:
        if self.store.exists(self._manifest_key(manifest.round)):
            raise ReviewConflict(f"review round {manifest.round!r} already exists; rounds are never replaced")
        if [item.item_id for item in items] != manifest.item_ids:
            raise ReviewInvalid("the manifest's item_ids must list the items in order")
        if not items:
            raise ReviewInvalid("a review round needs at least one item")
        for item in items:
            key = self._item_key(manifest.round, item.item_id)
            if not self._write_once(key, item) and self._read(key, ReviewItem) != item:
                raise ReviewConflict(f"item {item.item_id!r} of round {manifest.round!r} is stored with other content")
        if not self._write_once(self._manifest_key(manifest.round), manifest):
            raise ReviewConflict(f"review round {manifest.round!r} already exists; rounds are never replaced")
        return manifest

    def manifest(self, round_name: str) -> RoundManifest:
        try:
            return self._read(self._manifest_key(round_name), RoundManifest)
        except BlobNotFound:
            raise ReviewNotFound(f"no review round {round_name!r}") from None

    def rounds(self) -> list[str]:
        return sorted(key.split("/")[1] for key in self.store.list("review/") if key.count("/") == 2
                      and key.endswith("/manifest.json"))

    def item(self, round_name: str, item_id: str) -> ReviewItem:
        try:
            return self._read(self._item_key(round_name, item_id), ReviewItem)
        except BlobNotFound:
            raise ReviewNotFound(f"no item {item_id!r} in review round {round_name!r}") from None

    def items(self, round_name: str) -> list[ReviewItem]:
        return [self.item(round_name, item_id) for item_id in self.manifest(round_name).item_ids]

    # -- state --------------------------------------------------------------------------------
    def _load_states(self, round_name: str, item_id: str | None = None) -> dict[str, ItemState]:
        base = self._state_prefix(round_name)
        states: dict[str, ItemState] = {}
        for key in self.store.list(self._state_prefix(round_name, item_id)):
            parts = key[len(base):].split("/")
            state = states.setdefault(parts[0], ItemState())
            if parts[1:2] == ["reviewers"] and len(parts) == 3:
                state.markers[parts[2].removesuffix(".json")] = self._read(key, Claim)
            elif parts[1:2] == ["slots"] and len(parts) == 5:
                gen = state.slots.setdefault(int(parts[2]), {}).setdefault(int(parts[3]), Generation())
                if parts[4] == "claim.json":
                    gen.claim = self._read(key, Claim)
                elif parts[4] == "outcome.json":
                    gen.outcome = self._read(key, SlotOutcome)
        return states

    def item_state(self, round_name: str, item_id: str) -> ItemState:
        return self._load_states(round_name, item_id).get(item_id, ItemState())

    def decisions(self, round_name: str, reviewer: str | None = None) -> list[Decision]:
        """Every decision of the round (imported ones included), oldest first."""
        found = [d for state in self._load_states(round_name).values() for d in state.decisions()
                 if reviewer is None or d.reviewer == reviewer]
        return sorted(found, key=lambda d: (d.decided_at, d.item_id, d.reviewer))

    # -- claims -------------------------------------------------------------------------------
    def _try_claim(self, manifest: RoundManifest, item_id: str, reviewer: str, state: ItemState,
                   now: datetime) -> Claim | None:
        """Takes a free (or expired) slot of the item; None if there is none or another request won it.

        What it writes is added to `state`, so the caller's snapshot stays current without a re-read.
        """
        for slot in range(manifest.reviewers_per_item):
            status, generation = state.slot_status(slot, now, self.claim_ttl)
            if status in ("filled", "active"):
                continue
            if status == "expired":
                release = SlotOutcome(release=SlotRelease(reason="expired", by=reviewer, at=now))
                if not self._write_once(self._slot_key(manifest.round, item_id, slot, generation - 1, "outcome"),
                                        release):
                    continue  # its holder decided just now, or someone else took it over
                state.slots[slot][generation - 1].outcome = release
            claim = Claim(round=manifest.round, item_id=item_id, reviewer=reviewer, slot=slot,
                          generation=generation, claimed_at=now)
            if not self._write_once(self._slot_key(manifest.round, item_id, slot, generation, "claim"), claim):
                continue
            state.slots.setdefault(slot, {})[generation] = Generation(claim=claim)
            if self._write_once(self._marker_key(manifest.round, item_id, reviewer), claim):
                state.markers[reviewer] = claim
                return claim
            # A concurrent request of the same reviewer got this item first: hand the slot back.
            self._write_once(self._slot_key(manifest.round, item_id, slot, generation, "outcome"),
                             SlotOutcome(release=SlotRelease(reason="duplicate", by=reviewer, at=now)))
            return None
        return None

    def next_item(self, round_name: str, reviewer: str) -> Assignment | None:
        """The item this reviewer should judge now, claimed for them; None when nothing is left.

        An open claim of theirs comes back first (a reloaded page resumes). Otherwise items they
        never had, with an open slot, ordered by how many reviews they have or are getting, then
        by shortlist rank: items needing more reviewers first.
        """
        check_name("reviewer name", reviewer)
        manifest = self.manifest(round_name)
        # Open slots lost to concurrent requests, or claims in flight that may be handed back a
        # moment later, mean the snapshot was stale: look again briefly before saying nothing is left.
        for _ in range(CONTENTION_RETRIES):
            assignment, contended = self._next_item(manifest, reviewer)
            if assignment is not None or not contended:
                return assignment
            time.sleep(CONTENTION_WAIT_S)
        return None

    def _next_item(self, manifest: RoundManifest, reviewer: str) -> tuple[Assignment | None, bool]:
        """An assignment, or None and whether other requests were contending for the slots."""
        round_name = manifest.round
        now = self.clock()
        states = self._load_states(round_name)
        empty = ItemState()
        for item_id in manifest.item_ids:
            claim = states.get(item_id, empty).holds_open_claim(reviewer)
            if claim is not None:
                return self._assignment(manifest, claim, reviewer, states), False
        ranked = []
        for order, item_id in enumerate(manifest.item_ids):
            state = states.get(item_id, empty)
            if state.open_to(reviewer, manifest.reviewers_per_item, now, self.claim_ttl):
                busy = sum(s in ("filled", "active") for s in state.statuses(manifest.reviewers_per_item, now,
                                                                               self.claim_ttl))
                ranked.append((busy, order, item_id))
        for _, _, item_id in sorted(ranked):
            claim = self._try_claim(manifest, item_id, reviewer, states.setdefault(item_id, ItemState()), now)
            if claim is not None:
                return self._assignment(manifest, claim, reviewer, states), False
        return None, bool(ranked) or any(state.claim_in_flight() for state in states.values())

    def _assignment(self, manifest: RoundManifest, claim: Claim, reviewer: str,
                    states: dict[str, ItemState]) -> Assignment:
        return Assignment(item=self.item(manifest.round, claim.item_id), claim=claim,
                          progress=self._progress(manifest, states, reviewer))

    # -- decisions ----------------------------------------------------------------------------
    def _marker(self, round_name: str, item_id: str, reviewer: str) -> Claim | None:
        try:
            return self._read(self._marker_key(round_name, item_id, reviewer), Claim)
        except BlobNotFound:
            return None

    def decide(self, round_name: str, item_id: str, reviewer: str, request: DecisionRequest) -> Decision:
        """Records the reviewer's decision once; a second decision on the same item is refused."""
        check_name("reviewer name", reviewer)
        manifest = self.manifest(round_name)
        item = self.item(round_name, item_id)
        if request.candidate_id != item.candidate.id:
            raise ReviewConflict(f"item {item_id!r} is candidate {item.candidate.id!r}, "
                                 f"not {request.candidate_id!r}: reload the item")
        edited, diff, labels = self._edit_of(item, request)
        now = self.clock()
        state = self.item_state(round_name, item_id)
        claim = state.current_claim(reviewer)
        if claim is None:
            # Deciding without asking for the item first: claim a slot now, if one is open.
            claim = self._try_claim(manifest, item_id, reviewer, state, now) or \
                self._marker(round_name, item_id, reviewer)  # or a concurrent request of theirs got one
            if claim is None:
                raise ReviewConflict(f"item {item_id!r} has no open review slot: it already has "
                                     f"{manifest.reviewers_per_item} reviewer(s) or claims")
        decision = Decision(
            round=round_name, item_id=item_id, candidate_id=item.candidate.id, reviewer=reviewer, kind=request.kind,
            decided_at=now, error_type=item.candidate.error_type, tier=item.candidate.tier,
            problem_index=item.candidate.problem_index, slot=claim.slot, generation=claim.generation,
            edited_solution=edited, line_diff=diff, edited_lines=labels, comment=request.comment)
        key = self._slot_key(round_name, item_id, claim.slot, claim.generation, "outcome")
        if self._write_once(key, SlotOutcome(decision=decision)):
            return decision
        outcome = self._read(key, SlotOutcome)
        if outcome.decision is not None:
            raise ReviewConflict(f"reviewer {reviewer!r} already decided item {item_id!r} "
                                 f"({outcome.decision.kind} at {outcome.decision.decided_at.isoformat()}); "
                                 "decisions are never overwritten")
        raise ReviewConflict(f"reviewer {reviewer!r} no longer holds item {item_id!r}: the claim "
                             f"{'expired and was taken over' if outcome.release.reason == 'expired' else 'was released'}")

    def undo_last(self, round_name: str, reviewer: str) -> Assignment:
        """Withdraws the reviewer's latest decision in the round and gives them its item back to decide again.

        One step back only: a withdrawn decision is decided again before an earlier one can be undone. A skip
        whose item another reviewer has taken up since cannot be undone.
        """
        check_name("reviewer name", reviewer)
        manifest = self.manifest(round_name)
        states = self._load_states(round_name)
        mine = [(decision, state) for state in states.values() for decision in state.recorded()
                if decision.reviewer == reviewer]
        if not mine:
            raise ReviewNotFound(f"reviewer {reviewer!r} has no decision to undo in review round {round_name!r}")
        last, state = max(mine, key=lambda pair: (pair[0].decided_at, pair[0].generation))
        if state.withdrawn(last):
            raise ReviewConflict(f"the last decision of {reviewer!r}, on item {last.item_id!r}, is undone already: "
                                 "decide that item again first")
        if last.source != "api":
            raise ReviewConflict(f"the last decision of {reviewer!r}, on item {last.item_id!r}, was imported "
                                 f"({last.source}): only decisions made in review can be undone")
        claim = Claim(round=round_name, item_id=last.item_id, reviewer=reviewer, slot=last.slot,
                      generation=last.generation + 1, claimed_at=self.clock(), reopens=last.generation)
        key = self._slot_key(round_name, last.item_id, last.slot, claim.generation, "claim")
        if not self._write_once(key, claim):
            taken = self._read(key, Claim)
            if taken.reviewer == reviewer and taken.reopens == last.generation:
                raise ReviewConflict(f"the last decision of {reviewer!r}, on item {last.item_id!r}, is undone "
                                     "already: decide that item again first")
            raise ReviewConflict(f"item {last.item_id!r} was taken up by another reviewer after the {last.kind} of "
                                 f"{reviewer!r}: it cannot be undone")
        state.slots[last.slot][claim.generation] = Generation(claim=claim)
        return self._assignment(manifest, claim, reviewer, states)

    @staticmethod
    def _edit_of(item: ReviewItem, request: DecisionRequest):
        if request.kind != "edit":
            if request.edited_solution is not None:
                raise ReviewInvalid(f"edited_solution is only allowed with kind 'edit', not {request.kind!r}")
            return None, [], []
        generated = item.candidate.flawed_solution
        edited = (request.edited_solution or "").replace("\r\n", "\n")
        if not edited.strip():
            raise ReviewInvalid("edited_solution is required for kind 'edit' and must not be empty")
        diff = line_diff(generated, edited)
        if not diff:
            raise ReviewInvalid("edited_solution is identical to the generated flawed solution; accept it instead")
        touched = {i for change in diff for i in range(change.generated_start, change.generated_end)}
        return edited, diff, line_labels(generated, touched)

    # -- progress -----------------------------------------------------------------------------
    def progress(self, round_name: str, reviewer: str | None = None) -> RoundProgress:
        return self._progress(self.manifest(round_name), self._load_states(round_name), reviewer)

    def _progress(self, manifest: RoundManifest, states: dict[str, ItemState], reviewer: str | None) -> RoundProgress:
        now, empty = self.clock(), ItemState()
        n = manifest.reviewers_per_item
        listed = [states.get(item_id, empty) for item_id in manifest.item_ids]
        progress = RoundProgress(
            round=manifest.round, items=len(listed), reviewers_per_item=n, reviews_needed=len(listed) * n,
            reviews_done=sum(min(state.filled(), n) for state in listed),
            items_complete=sum(state.filled() >= n for state in listed))
        if reviewer is not None:
            progress.reviewer = reviewer
            progress.reviewer_decided = sum(any(d.reviewer == reviewer for d in state.decisions()) for state in listed)
            progress.reviewer_available = sum(state.open_to(reviewer, n, now, self.claim_ttl) for state in listed)
        return progress

    # -- import -------------------------------------------------------------------------------
    def import_decisions(self, round_name: str, decisions: Iterable[Decision], source: str) -> ImportSummary:
        """Stores decisions made elsewhere as history, each in a slot of its own; importing again adds nothing.

        History is kept whole even where it exceeds the round's reviewers per item.
        """
        self.manifest(round_name)  # decisions into a round nobody shortlisted would count for nothing
        summary = ImportSummary(round=round_name, rows=0, imported=0, already_present=0)
        states = self._load_states(round_name)
        for decision in decisions:
            summary.rows += 1
            check_name("reviewer name", decision.reviewer)
            state = states.setdefault(decision.item_id, ItemState())
            if decision.reviewer in state.markers:
                earlier = [d for d in state.decisions() if d.reviewer == decision.reviewer]
                if earlier and earlier[0].source == source and earlier[0].kind == decision.kind:
                    summary.already_present += 1
                else:
                    summary.rejected_rows.append(f"row {summary.rows}: reviewer {decision.reviewer!r} already has a "
                                                 f"decision on item {decision.item_id!r}")
                continue
            slot = max(state.slots, default=-1) + 1
            claim = Claim(round=round_name, item_id=decision.item_id, reviewer=decision.reviewer, slot=slot,
                          generation=0, claimed_at=self.clock())
            outcome = SlotOutcome(decision=decision.model_copy(
                update={"round": round_name, "slot": slot, "generation": 0, "source": source}))
            if not (self._write_once(self._slot_key(round_name, decision.item_id, slot, 0, "claim"), claim)
                    and self._write_once(self._marker_key(round_name, decision.item_id, decision.reviewer), claim)
                    and self._write_once(self._slot_key(round_name, decision.item_id, slot, 0, "outcome"), outcome)):
                raise ReviewConflict(f"item {decision.item_id!r} changed while importing; run the import again")
            state.markers[decision.reviewer] = claim
            state.slots[slot] = {0: Generation(claim=claim, outcome=outcome)}
            summary.imported += 1
        return summary
