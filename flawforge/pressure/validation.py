"""The LLM validator's request and the rubric score V (spec, stage 1; the reference's code where it is
more precise than the paper).

A reply that says nothing (an empty best answer or no answers in the top 3) is a hard fail like the others.

Accepted: X is the best answer (and the validator's best answer is X), ambiguity <= 3, a one-word
answer enforced, no leak, naturalness >= 7. V = 0 on any hard fail (leak, one word not enforced,
ambiguity > 3, naturalness < 7); otherwise +40 if X is best, +30 if no rival in the top 3 (+15 for
one rival when ambiguity <= 2), +20 for the one-word format, +10 for fluency. S = V + 100 * P0.
"""
from __future__ import annotations

import json

from pydantic import BaseModel

from flawforge.llm.errors import InvalidModelOutput
from flawforge.llm.structured import extract_json
from flawforge.proto.llm import ChatMessage, ChatRequest
from flawforge.proto.pressure_dataset import Candidate, ValidatorReply

MAX_AMBIGUITY = 3
MIN_NATURALNESS = 7

SYSTEM = """You judge cloze prompts. Give: is_one_word_answer_enforced (does the prompt ask for one word); best_one_word_answer; top3_one_word_answers (the 3 most plausible one-word answers); is_X_best (is the target word X the best answer); ambiguity_score (0 one clear answer .. 10 highly ambiguous); leaks_answer (does the prompt give the answer away); naturalness_score (0 awkward .. 10 natural); comments."""

EXAMPLE = {"is_one_word_answer_enforced": True, "best_one_word_answer": "Paris",
           "top3_one_word_answers": ["Paris", "Lyon", "Marseille"], "is_X_best": True, "ambiguity_score": 1,
           "leaks_answer": False, "naturalness_score": 9, "comments": "clear"}


def validator_request(prompt_text: str, candidate: Candidate, model: str, max_tokens: int) -> ChatRequest:
    """The validator sees the baseline prompt as the studied model will, and the target."""
    user = (f"Prompt:\n{prompt_text}\n\nTarget word (X): {candidate.target_word}\n\n"
            f"Reply with a json object only, like this example:\n{json.dumps(EXAMPLE)}")
    return ChatRequest(model=model, max_tokens=max_tokens, temperature=0.0, seed=0,
                       messages=[ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content=user)])


def blank_fields(value, name: str) -> list[str]:
    """The parts of a reply's field that say nothing (a string empty or only spaces, an empty list), named
    `field` or `field[0]`."""
    if isinstance(value, str):
        return [] if value.strip() else [name]
    if isinstance(value, list):
        return [name] if not value else [blank for i, item in enumerate(value) for blank in blank_fields(item, f"{name}[{i}]")]
    return []


def silent_fields(text: str, schema: type[BaseModel]) -> list[str]:
    """What says nothing in a reply's text: `(the reply)` where the text is blank, else the required fields of
    `schema` that its JSON leaves blank (none where it is not JSON: that reply fails for another reason)."""
    if not text.strip():
        return ["(the reply)"]
    try:
        value = extract_json(text)
    except InvalidModelOutput:
        return []
    required = schema.model_json_schema().get("required", [])
    return [blank for key in required if isinstance(value, dict) and key in value
            for blank in blank_fields(value[key], key)]


def hard_fail(reply: ValidatorReply) -> str | None:
    if blank_fields(reply.best_one_word_answer, "best") or not [w for w in reply.top3_one_word_answers if w.strip()]:
        return "empty_reply"
    if reply.leaks_answer:
        return "leaks_answer"
    if not reply.is_one_word_answer_enforced:
        return "one_word_not_enforced"
    if reply.ambiguity_score > MAX_AMBIGUITY:
        return "too_ambiguous"
    if reply.naturalness_score < MIN_NATURALNESS:
        return "not_natural"
    return None


def v_score(reply: ValidatorReply, target: str) -> int:
    if hard_fail(reply) is not None:
        return 0
    score = 40 if reply.is_X_best else 0
    rivals = [w for w in reply.top3_one_word_answers if w.strip().lower() != target.lower()]
    if not rivals:
        score += 30
    elif len(rivals) == 1 and reply.ambiguity_score <= 2:
        score += 15
    return score + 20 + 10  # one word enforced and natural: a hard fail otherwise


def refusal(reply: ValidatorReply, target: str) -> str | None:
    """Why the validator does not accept the candidate; None when it does."""
    failed = hard_fail(reply)
    if failed:
        return failed
    if not reply.is_X_best:
        return "target_not_best"
    if reply.best_one_word_answer.strip().lower() != target.lower():
        return "best_answer_differs"
    return None


def s_score(v: int, p0: float) -> float:
    return v + 100.0 * p0


