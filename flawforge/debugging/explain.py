"""The deterministic writer's sentences about an instance, from its facts: what the failing test shows (the values
compared, the exception), what is wrong in the code (read off the fix's diff, token by token) and what the fix
does. Every sentence comes in several phrasings, chosen per instance (phrasing.pick), so that conversations and
trajectories do not all say the same thing in the same words; none states anything the facts do not."""
from __future__ import annotations

import difflib
import io
import re
import tokenize

from flawforge.debugging.phrasing import counted, pick
from flawforge.debugging.statements import Failure

TOKEN_CHARS = 120


def evidence(failure: Failure | None, key: str, slot: str = "evidence") -> str:
    """What the first failing test shows, in one or two sentences."""
    if failure is None:
        return ""
    test = f"`{failure.test}`"
    subject = f"`{failure.subject}`" if failure.subject else "the code under test"
    if failure.actual is not None and failure.expected is not None:
        return pick(key, slot, [
            f"{test} expects {subject} to give `{failure.expected}`, but it gives `{failure.actual}`.",
            f"In {test}, {subject} returns `{failure.actual}` instead of `{failure.expected}`.",
            f"The first failure, {test}, compares {subject} with `{failure.expected}` and gets `{failure.actual}`.",
            f"{subject} comes back as `{failure.actual}` in {test}; the test wants `{failure.expected}`.",
            f"Look at the values in {test}: expected `{failure.expected}`, got `{failure.actual}` from {subject}."])
    if failure.not_raised:
        error = failure.not_raised
        return pick(key, slot, [
            f"{test} expects {subject} to raise {error}, and nothing is raised.",
            f"In {test}, {subject} should be refused with {error} but goes through.",
            f"{test} fails because {subject} no longer raises {error}."])
    if failure.raised:
        said = failure.said
        return pick(key, slot, [
            f"{test} does not get as far as its check: {subject} raises `{said}`.",
            f"In {test}, {subject} crashes with `{said}`.",
            f"The first failure, {test}, is an exception, not a wrong value: `{said}` from {subject}.",
            f"{subject} raises `{said}` in {test}."])
    if not failure.message:
        return pick(key, slot, [f"{test} fails its check on {subject}.",
                                f"In {test} the assertion on {subject} does not hold."])
    return pick(key, slot, [
        f"{test} fails its check on {subject}: `{failure.message}`.",
        f"In {test} the assertion on {subject} does not hold (`{failure.message}`)."])


def _tokens(line: str) -> list[tuple[int, int]]:
    """Where each token of the stripped line starts and ends in it (words between spaces where it does not
    tokenize)."""
    text = line.strip()
    try:
        return [(t.start[1], t.end[1]) for t in tokenize.generate_tokens(io.StringIO(text + "\n").readline)
                if t.string.strip() and t.start[0] == 1 and t.end[0] == 1]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


def _differing(old_line: str, new_line: str) -> list[tuple[str, str]]:
    """The fragments of two lines that differ, token by token, each as the lines write it (`plural[-1]` against
    `plural[0]`: ('-1', '0'))."""
    old_text, new_text = old_line.strip(), new_line.strip()
    old, new = _tokens(old_line), _tokens(new_line)
    old_strings, new_strings = [old_text[a:b] for a, b in old], [new_text[a:b] for a, b in new]

    def fragment(text: str, spans: list[tuple[int, int]], start: int, stop: int) -> str:
        return text[spans[start][0]:spans[stop - 1][1]] if stop > start else ""

    return [(fragment(old_text, old, a, b), fragment(new_text, new, c, d))
            for tag, a, b, c, d in difflib.SequenceMatcher(a=old_strings, b=new_strings, autojunk=False).get_opcodes()
            if tag != "equal"]


def _first_code(lines: list[str]) -> str:
    """The first line of a run that holds code (a hunk may start with a blank line)."""
    return next((line for line in lines if line.strip()), lines[0] if lines else "")


def _hunks(patch: str) -> list[tuple[list[str], list[str]]]:
    """(lines the patch removes, lines it adds) of each run of changes, without their markers."""
    found, removed, added = [], [], []
    for line in patch.splitlines():
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("-"):
            removed.append(line[1:])
        elif line.startswith("+"):
            added.append(line[1:])
        elif removed or added:
            found.append((removed, added))
            removed, added = [], []
    if removed or added:
        found.append((removed, added))
    return found


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= TOKEN_CHARS else text[:TOKEN_CHARS - 3] + "..."


def _swapped_branches(patch: str) -> str | None:
    """The `if` (or `elif`) line whose two branches the fix exchanges, or None: the fix only moves lines (blank and
    comment lines aside), an `else:` among them, and the buggy code's nearest line above that `else:` at its
    indentation is the `if`."""
    changed = [(line[0], line[1:].strip()) for line in patch.splitlines()
               if line[:1] in "+-" and not line.startswith(("---", "+++"))]
    removed, added = (sorted(text for sign, text in changed if sign == side and text and not text.startswith("#"))
                      for side in "-+")
    if "else:" not in removed or removed != added:
        return None
    buggy = [line[1:] for line in patch.splitlines() if line[:1] in " -" and not line.startswith("---")]
    at = next(index for index, line in enumerate(buggy) if line.strip() == "else:")
    indent = len(buggy[at]) - len(buggy[at].lstrip())
    for line in reversed(buggy[:at]):
        depth = len(line) - len(line.lstrip())
        if line.strip() and depth < indent:
            return None
        if depth == indent and line.lstrip().startswith(("if ", "elif ")):
            return line.strip()
    return None


def what_is_wrong(fix_patch: str, key: str) -> str:
    """What the code does wrong, read off the fix's diff (from the buggy code to the clean): the branches of an `if`
    swapped, a fragment of a line that should be another, lines that are missing, lines in the wrong order, lines
    that should not be there."""
    condition = _swapped_branches(fix_patch)
    if condition is not None:
        condition = _short(condition)
        return pick(key, "swapped", [
            f"The two branches of `{condition}` are the wrong way round: what should run when the condition holds "
            f"runs when it does not, and the other way round.",
            f"`{condition}` leads to the wrong branch: the code under it and the code under its `else:` are swapped.",
            f"The bodies of `{condition}` and of its `else:` have been exchanged."])
    hunks = _hunks(fix_patch)
    removed = sorted(line.strip() for buggy, _ in hunks for line in buggy)
    if removed and removed == sorted(line.strip() for _, fixed in hunks for line in fixed) and len(hunks) > 1:
        moved = _short(next(line for _, fixed in hunks for line in fixed))
        return pick(key, "moved", [
            f"`{moved}` is in the wrong place: every line is right, but not where it belongs.",
            f"Nothing is missing; `{moved}` simply is in the wrong place.",
            f"The lines are all there, but `{moved}` belongs elsewhere than where it is."])
    sentences = []
    for number, (buggy, fixed) in enumerate(hunks):
        slot = f"wrong{number}"
        if buggy and fixed and sorted(buggy) == sorted(fixed):
            sentences.append(pick(key, slot, [
                "The right statements are there, but in the wrong order.",
                "Nothing is missing; two statements simply run in the wrong order.",
                "The statements are correct one by one, but their order is not."]))
        elif len(buggy) == 1 and len(fixed) == 1 and buggy[0].strip() == "pass":
            sentences.append(pick(key, slot, [
                f"`pass` stands where the code needs `{_short(fixed[0])}`.",
                f"The statement `{_short(fixed[0])}` has been replaced by `pass`."]))
        elif len(buggy) == 1 and len(fixed) == 1:
            parts = _differing(buggy[0], fixed[0])
            if len(parts) == 1 and parts[0][0] == buggy[0].strip():
                parts = []  # the whole line differs: said as a line that should read otherwise, below
            if len(parts) == 1 and parts[0][0] and parts[0][1]:
                was, should = (_short(p) for p in parts[0])
                sentences.append(pick(key, slot, [
                    f"`{_short(buggy[0])}` uses `{was}` where it needs `{should}`.",
                    f"In `{_short(buggy[0])}`, `{was}` should be `{should}`.",
                    f"The line `{_short(buggy[0])}` has `{was}`; the correct code has `{should}` there.",
                    f"`{was}` in `{_short(buggy[0])}` is the mistake: it should be `{should}`."]))
            elif len(parts) == 1 and parts[0][1]:
                sentences.append(pick(key, slot, [
                    f"`{_short(buggy[0])}` leaves out `{_short(parts[0][1])}`.",
                    f"Something is missing from `{_short(buggy[0])}`: `{_short(parts[0][1])}`."]))
            elif len(parts) == 1:
                sentences.append(pick(key, slot, [
                    f"`{_short(buggy[0])}` has `{_short(parts[0][0])}`, which should not be there.",
                    f"The `{_short(parts[0][0])}` in `{_short(buggy[0])}` does not belong there."]))
            else:
                sentences.append(pick(key, slot, [
                    f"`{_short(buggy[0])}` should read `{_short(fixed[0])}`.",
                    f"The line `{_short(buggy[0])}` is wrong; it should be `{_short(fixed[0])}`."]))
        elif not buggy or (len(fixed) > len(buggy) and all(line.strip() in ("pass", "") for line in buggy)):
            first = _short(_first_code(fixed))
            sentences.append(pick(key, slot, [
                f"A line is missing: `{first}`.", f"The function never runs `{first}`; that line is missing.",
                f"There is no `{first}` here, and the function needs it.",
                f"What is wrong is something absent: `{first}`."] if len(fixed) == 1 else [
                f"A piece of the logic is missing: the {len(fixed)} lines that start with `{first}`.",
                f"The function never does what `{first}` and the {counted(len(fixed) - 1, 'line')} after it do.",
                f"There is no `{first}` block here, and the function needs it.",
                f"What is wrong is something absent: `{first}` and the {counted(len(fixed) - 1, 'line')} under it."]))
        elif not fixed:
            sentences.append(pick(key, slot, [
                f"`{_short(_first_code(buggy))}` should not be there.",
                f"The code has {counted(len(buggy), 'line')} too many, starting with `{_short(_first_code(buggy))}`."]))
        else:
            sentences.append(pick(key, slot, [
                f"The {counted(len(buggy), 'line')} starting with `{_short(_first_code(buggy))}` "
                f"{'does' if len(buggy) == 1 else 'do'} not do what {'it' if len(buggy) == 1 else 'they'} should.",
                f"This part, starting with `{_short(_first_code(buggy))}`, is written wrongly."]))
    return " ".join(sentences)


def fix_outcome(fail_to_pass: int, pass_to_pass: int, key: str) -> str:
    """What running the tests with the fix shows (the final gate ran exactly these, clean: all passed)."""
    return pick(key, "outcome", [
        f"With this change {counted(fail_to_pass, 'failing test', 'pass')} again, and "
        f"{counted(pass_to_pass, 'other', 'still pass')}.",
        f"After the fix, all {fail_to_pass + pass_to_pass} listed tests pass: the {fail_to_pass} that failed and "
        f"the {pass_to_pass} that already passed.",
        f"With it, {counted(fail_to_pass, 'failing test', 'pass')}; {counted(pass_to_pass, 'passing test', 'stay')} "
        f"green.",
        f"Running the tests again with the change: {fail_to_pass} fixed, {pass_to_pass} still green."])
