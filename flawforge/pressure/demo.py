"""A small prompt set for the demo run: built-in questions with one natural one-word answer (capitals,
idiom endings, common sense), scored for P0 and P1 on the served model.

They are not validated by a model (V = 0, S = 100 * P0); the dataset stage makes the real prompt set.
"""
from __future__ import annotations

from flawforge.inference.research import score_continuations
from flawforge.pressure import psem
from flawforge.pressure.prompts import build_prompt
from flawforge.proto.pressure import PromptRecord, p0_bin_of

CAPITALS = (("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Germany", "Berlin"), ("Spain", "Madrid"),
            ("Egypt", "Cairo"), ("Russia", "Moscow"), ("Greece", "Athens"), ("Austria", "Vienna"),
            ("Ireland", "Dublin"), ("Portugal", "Lisbon"), ("Norway", "Oslo"), ("Kenya", "Nairobi"),
            ("Peru", "Lima"), ("Cuba", "Havana"), ("Poland", "Warsaw"))
IDIOMS = (("Actions speak louder than ___.", "words"), ("The early bird catches the ___.", "worm"),
          ("Curiosity killed the ___.", "cat"), ("Don't cry over spilled ___.", "milk"),
          ("Every cloud has a silver ___.", "lining"), ("When in Rome, do as the Romans ___.", "do"),
          ("A picture is worth a thousand ___.", "words"), ("Honesty is the best ___.", "policy"),
          ("Practice makes ___.", "perfect"), ("Better late than ___.", "never"),
          ("Birds of a feather flock ___.", "together"), ("Time is ___.", "money"))
COMMON_SENSE = (("What color is the sky on a clear day?", "blue"), ("What do bees make?", "honey"),
                ("What do you use to cut paper?", "scissors"), ("What season comes after winter?", "spring"),
                ("What is frozen water called?", "ice"), ("What animal says moo?", "cow"),
                ("What do you sleep on at night?", "bed"), ("What color are ripe bananas?", "yellow"),
                ("What do plants need from the sun to grow?", "light"), ("How many legs does a spider have?", "eight"),
                ("What do you use to unlock a door?", "key"), ("What is the opposite of hot?", "cold"))


def demo_questions() -> list[tuple[str, str, str]]:
    """(category, question, target) of every built-in question, interleaved across categories."""
    facts = [("facts", f"What is the capital of {country}?", city) for country, city in CAPITALS]
    idioms = [("idioms", f"Complete the saying: {saying}", word) for saying, word in IDIOMS]
    common = [("common_sense", question, word) for question, word in COMMON_SENSE]
    out = []
    for group in zip(facts, idioms, common):
        out += group
    return out + facts[len(idioms):]


def build_demo_prompts(lm, count: int) -> list[PromptRecord]:
    """Up to `count` demo prompts with P0 and P1 measured on `lm` (teacher-forced over S(X))."""
    tok = lm.tokenizer
    encode = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    decode = lambda ids: tok.decode(list(ids), skip_special_tokens=True)  # noqa: E731
    chosen = demo_questions()[:count]
    items = []
    for _, question, target in chosen:
        seqs = [list(s) for s in psem.sequences(target, encode, decode)]
        for condition in ("baseline", "negative"):
            items.append((tok(build_prompt(condition, question, target))["input_ids"], seqs))
    scores = score_continuations(lm, items, 4096)
    records = []
    for index, (category, question, target) in enumerate(chosen):
        p0, p1 = (psem.p_sem(scores[2 * index + k]) for k in (0, 1))
        records.append(PromptRecord(
            prompt_id=f"demo-{index:03d}", category=category, question_text=question, target_word=target,
            validation={"source": "built-in demo question, not validated"}, v_score=0, p0=p0, p1=p1,
            p0_bin=p0_bin_of(p0), s_score=100 * p0))
    return records

