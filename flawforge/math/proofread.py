"""A solution read the way a reviewer reads it, independently of how it was written.

The generator writes solutions from templates and traces (flawforge.math.reconstruct) and
checks its own annotations with its own rules. This module shares none of that: it reads
the finished text with its own tokenizer and parser, and answers three questions.

1. Is every written calculation true? Each `<<expression=value>>` annotation, and each
   calculation in the prose as a reader sees it (annotations removed: "$7 x 5 = $<<7*5=35>>35"
   reads "$7 x 5 = $35"). Prose calculations are read with the usual precedence, left to
   right, with "$", thousands separators, percentages, units after numbers ("5 hours x 3"),
   rates ("$4/hour"), "x"/"×"/"÷" and operator words ("plus", "times", "divided by",
   "equals"). A fraction written as text is a division like any other: "80 / 3/10" is
   (80 / 3) / 10. Operands count exactly as written (a rounded 0.01 is 0.01, not 1/120); a
   result shown with decimals is right when the exact value rounds to it, a whole result
   must be exact.
2. Is a number the flaw changed still stated after the error (a stale summary line, a
   number written into template text, a number word)?
3. Is the final answer written as a number a reader takes for an answer (not a fraction)?

Everything is pure; lines are read once and cached, since a problem's candidates share most
of their lines.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, Collection, Mapping, NamedTuple

from flawforge.math import PROBLEM_CACHE_SIZE

FINAL_ANSWER_MARK = "####"
# Floats carry binary noise (0.1 * 3 = 0.30000000000000004); values this close are the same number.
_NOISE = Fraction(1, 10**9)


class Finding(NamedTuple):
    """Something a reviewer would object to: on which line (1-based, in the text), what, and the text."""

    line: int
    kind: str    # false_calculation, unreadable_calculation, stale_number, fraction_answer, no_final_answer
    text: str

    def describe(self) -> str:
        return f"line {self.line}: {self.kind.replace('_', ' ')}: {self.text}"


# --- numbers ------------------------------------------------------------------------------------
class Number(NamedTuple):
    value: Fraction | int
    decimals: int        # digits after the decimal point as written
    start: int
    end: int
    text: str
    percent: bool = False


_DIGITS = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+"
# One pass finds every number a reader sees: "1/10" (one number to a reader, a tenth, not a 1 and a 10), digits,
# and words (looked up: most words are no number).
_NUMBER_OR_WORD = re.compile(rf"(?<![\w./])(?P<over>\d+)/(?P<under>\d+)(?![\w/]|\.\d)"
                             rf"|(?<![\w.])(?P<digits>{_DIGITS})(?![\w]|\.\d)"
                             r"|(?P<word>[A-Za-z]+(?:-[A-Za-z]+)?)")
# the same without words (its "word" group never matches)
_DIGITS_ONLY = re.compile(rf"(?<![\w./])(?P<over>\d+)/(?P<under>\d+)(?![\w/]|\.\d)"
                          rf"|(?<![\w.])(?P<digits>{_DIGITS})(?![\w]|\.\d)|(?P<word>(?!))")
_LOWER_WORD = re.compile(r"[a-z]+")

_WORD_VALUES = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
                "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
                "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30,
                "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_WORD_VALUES.update({f"{tens}-{unit}": _WORD_VALUES[tens] + _WORD_VALUES[unit]
                     for tens in ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
                     for unit in ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine")})
_SCALES = {"hundred": 100, "thousand": 1000}
_NUMBER_WORD_SET = frozenset(word for word in _WORD_VALUES if "-" not in word)
_SCALE_AFTER = re.compile(r"\s+(hundred|thousand)\b", re.IGNORECASE)


def _plain(text: str) -> tuple[Fraction | int, int]:
    """A written number's exact value (an int when whole: most are, and ints are fast) and its decimals."""
    digits = text.replace(",", "")
    whole, _, decimals = digits.partition(".")
    if decimals:
        return Fraction(int((whole or "0") + decimals), 10 ** len(decimals)), len(decimals)
    return int(whole), 0


def numbers_in(line: str) -> tuple[Number, ...]:
    """Every number a reader sees in a line: digits (in prose and annotations), written fractions and number
    words. A whole number's value is an int (ints, floats and Fractions compare and hash alike)."""
    found = []
    # most lines have no number word: one pass in C says so, and the digits are read alone
    no_words = _NUMBER_WORD_SET.isdisjoint(_LOWER_WORD.findall(line.lower()))
    for match in (_DIGITS_ONLY if no_words else _NUMBER_OR_WORD).finditer(line):
        word = match.group("word")
        if word is not None:
            value = _WORD_VALUES.get(word.lower())
            if value is None:
                continue
            end = match.end()
            scale = _SCALE_AFTER.match(line, end)
            if scale:
                value, end = value * _SCALES[scale.group(1).lower()], scale.end()
            found.append(Number(value, 0, match.start(), end, line[match.start():end]))
        elif match.group("digits") is not None:
            text = match.group("digits")
            value, decimals = _plain(text)
            found.append(Number(value, decimals, match.start(), match.end(), text,
                                line.startswith("%", match.end())))
        else:
            over, under = int(match.group("over")), int(match.group("under"))
            if 0 < over < under:  # "1/10" is a tenth
                found.append(Number(Fraction(over, under), 0, match.start(), match.end(), match.group()))
            else:  # "48/2" is a division of 48 by 2
                found.append(Number(over, 0, match.start(), match.start("under") - 1, match.group("over")))
                found.append(Number(under, 0, match.start("under"), match.end(), match.group("under")))
    return tuple(found)


def _denotes(number: Number, value: Fraction) -> bool:
    """Whether the written number states `value` (as written, rounded to its decimals, or as a percentage)."""
    for written in ((number.value, number.value / 100) if number.percent else (number.value,)):
        if number.decimals:
            if abs(written - value) <= Fraction(1, 2 * 10**number.decimals):
                return True
        elif abs(written - value) <= _NOISE * max(1, abs(value)):
            return True
    return False


# --- calculations -------------------------------------------------------------------------------
class Unreadable(ValueError):
    pass


class _NotMixed(Unreadable):
    """What the shape took for a mixed number ("3 12/4") is not one: the line is read with its numbers apart."""


class _Token(NamedTuple):
    kind: str           # num, op, lp, rp, comma, name, eq
    text: str
    value: Fraction | None = None
    decimals: int = 0


# Every digit run (with thousands separators and decimals) is a slot. A text's shape, its words and signs with each
# number written "0", is tokenized once: the mutants of a problem write the same shapes with other numbers.
# Captured, so that split() keeps the slots: the text before the first slot, each slot and the text after it.
_SLOT = re.compile(r"(\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)")


def _shape(text: str) -> tuple[str, list[str]]:
    parts = _SLOT.split(text)  # one pass over the text
    return "0".join(parts[0::2]), parts[1::2]


def _filled(token: "_Token | _Piece", numbers: list[str]) -> _Token:
    """A token of a shape with its number: its slot's digits, negated or a percentage as the shape says."""
    if token.kind != "num":
        return token if isinstance(token, _Token) else _Token(token.kind, token.text)
    if token.value is None:  # a number written as words ("three times 4"): a prose piece holding its value
        return _Token("num", token.text, token.spoken)
    if getattr(token, "mixed", False):
        whole, over, under = (numbers[token.value + k] for k in range(3))
        if not (whole.isdigit() and over.isdigit() and under.isdigit() and 0 < int(over) < int(under)):
            raise _NotMixed(f"{whole} {over}/{under} is no mixed number")
        return _Token("num", f"{whole} {over}/{under}", int(whole) + Fraction(int(over), int(under)))
    literal = numbers[token.value]  # a shape's number token holds its slot
    value, decimals = _plain(literal)
    if "-" in token.text:
        value = -value
    if _PERCENT_MARK in token.text:
        value = Fraction(value, 100) if isinstance(value, int) else value / 100
    return _Token("num", token.text.replace("0", literal), value, decimals)


# Annotation expressions are Python-like arithmetic.
_ANNOTATION_TOKEN = re.compile(
    r"\s*(?:(?P<num>0)(?P<pct>%(?![\d(.]))?"
    r"|(?P<op>\*\*|//|[-+*/%x×÷−–·^])|(?P<lp>\()|(?P<rp>\))|(?P<comma>,)"
    r"|(?P<name>[A-Za-z_][\w.]*)|(?P<cur>[$€£]))")
_OPERATOR = {"x": "*", "×": "*", "·": "*", "÷": "/", "−": "-", "–": "-", "^": "**"}
_FUNCTIONS = {"int", "round", "float", "abs", "min", "max", "math.ceil", "math.floor", "ceil", "floor", "Fraction"}
_BINDING = {"+": 1, "-": 1, "*": 2, "/": 2, "//": 2, "%": 2, "**": 4}


@lru_cache(maxsize=16384)
def _annotation_shape(shape: str) -> tuple[_Token, ...]:
    """The tokens of an annotation side's shape; a number token's value is its slot."""
    tokens, position, slot = [], 0, 0
    while position < len(shape):
        match = _ANNOTATION_TOKEN.match(shape, position)
        if not match or match.end() == position:
            if shape[position:].strip():
                raise Unreadable(f"cannot read {shape[position:position + 12]!r}")
            break
        position = match.end()
        kind = match.lastgroup if match.lastgroup != "pct" else "num"
        if match.group("num") is not None:
            tokens.append(_Token("num", match.group("num") + (match.group("pct") or ""), slot))
            slot += 1
        elif kind == "cur":
            continue
        elif kind == "op":
            op = match.group("op")
            tokens.append(_Token("op", _OPERATOR.get(op, op)))
        else:
            tokens.append(_Token(kind, match.group(kind)))
    return tuple(tokens)


class _Parser:
    """Precedence climbing over tokens, evaluated exactly with Fractions."""

    def __init__(self, tokens: tuple[_Token, ...]):
        self.tokens = tokens
        self.at = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> _Token:
        token = self.peek()
        if token is None:
            raise Unreadable("the calculation ends early")
        self.at += 1
        return token

    def whole(self) -> Fraction:
        value = self.expression(0)
        if self.peek() is not None:
            raise Unreadable(f"unexpected {self.peek().text!r}")
        return value

    def expression(self, minimum: int) -> Fraction:
        left = self.unary()
        while True:
            token = self.peek()
            if token is None or token.kind != "op" or _BINDING[token.text] < minimum:
                return left
            self.at += 1
            op = token.text
            # '**' binds to the right; the rest to the left
            right = self.expression(_BINDING[op] + (0 if op == "**" else 1))
            left = _apply(op, left, right)

    def unary(self) -> Fraction:
        token = self.peek()
        if token is not None and token.kind == "op" and token.text in "+-":
            self.at += 1
            value = self.expression(3)
            return -value if token.text == "-" else value
        return self.atom()

    def atom(self) -> Fraction:
        token = self.take()
        if token.kind == "num":
            return token.value
        if token.kind == "lp":
            value = self.expression(0)
            if self.take().kind != "rp":
                raise Unreadable("unbalanced parenthesis")
            return value
        if token.kind == "name" and token.text in _FUNCTIONS and self.peek() is not None and self.peek().kind == "lp":
            self.at += 1
            arguments = [self.expression(0)]
            while self.peek() is not None and self.peek().kind == "comma":
                self.at += 1
                arguments.append(self.expression(0))
            if self.take().kind != "rp":
                raise Unreadable("unbalanced parenthesis")
            return _call(token.text, arguments)
        raise Unreadable(f"unexpected {token.text!r}")


def _apply(op: str, left: Fraction, right: Fraction) -> Fraction:
    try:
        if op == "+":
            return left + right
        if op == "-":
            return left - right
        if op == "*":
            return left * right
        if op == "/":
            if isinstance(left, int) and isinstance(right, int):
                return left // right if left % right == 0 else Fraction(left, right)
            return left / right
        if op == "//":
            return Fraction(left // right)
        if op == "%":
            return left % right
        if right.denominator != 1 or abs(right) > 64:
            raise Unreadable("power with a fractional or huge exponent")
        return left ** int(right)
    except ZeroDivisionError:
        raise Unreadable("division by zero") from None


def _call(name: str, arguments: list[Fraction]) -> Fraction:
    import math

    if name in ("min", "max"):
        return (min if name == "min" else max)(arguments)
    if name == "Fraction" and len(arguments) == 2:
        return _apply("/", arguments[0], arguments[1])
    if len(arguments) == 2 and name == "round":
        return Fraction(round(arguments[0], int(arguments[1])))
    if len(arguments) != 1:
        raise Unreadable(f"{name} with {len(arguments)} arguments")
    value = arguments[0]
    return Fraction({"int": math.trunc, "round": round, "abs": abs, "math.ceil": math.ceil, "ceil": math.ceil,
                     "math.floor": math.floor, "floor": math.floor}.get(name, lambda v: v)(value))


def _agrees(computed: Fraction, shown: Fraction, decimals: int) -> bool:
    """Whether a result shown with `decimals` decimals states `computed`."""
    if computed == shown:
        return True
    if decimals:
        return abs(computed - shown) <= Fraction(1, 2 * 10**decimals) + _NOISE
    return abs(computed - shown) <= _NOISE * max(1, abs(shown))


def _shown(tokens: tuple[_Token, ...]) -> tuple[Fraction, int]:
    """The value of a result side and the decimals it is shown with (0 for an expression)."""
    value = _Parser(tokens).whole()
    plain = [t for t in tokens if t.kind == "num"]
    return value, plain[0].decimals if len(plain) == 1 else 0


def _annotation_tokens(text: str) -> tuple[_Token, ...]:
    shape, numbers = _shape(text)
    return tuple(_filled(token, numbers) for token in _annotation_shape(shape))


@lru_cache(maxsize=16384)  # the generator asks while writing a line, the reading of the line asks again
def check_annotation(body: str) -> str | None:
    """None when `expression=value` is true as written, else what is wrong."""
    expression, equals, shown = body.rpartition("=")
    if not equals or not expression.strip() or not shown.strip():
        return f"<<{body}>> states no result"
    try:
        computed = _Parser(_annotation_tokens(expression)).whole()
        value, decimals = _shown(_annotation_tokens(shown))
    except Unreadable as exc:
        return f"<<{body}>> cannot be read ({exc})"
    if _agrees(computed, value, decimals):
        return None
    return f"<<{body}>>: {expression.strip()} is {_display(computed)}"


def _display(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.6g}"


# Prose shapes: numbers with currency, percent and units; operators as signs or words; '=' or 'equals'. A number
# glued to a unit is a number ("8km/4hrs"), but not one glued to a single letter ("2W", "$280k") or an ordinal's
# ending ("3rd"), nor one in a time ("6:00").
_PROSE_TOKEN = re.compile(
    r"(?P<num>(?<!\d:)(?:[$€£]\s?)?-?0(?![\d:]|(?:st|nd|rd|th)(?![A-Za-z])|[A-WYZa-wyz](?![A-Za-z])"
    r"|[xX][A-Za-z]))(?P<pct>\s?%)?"
    r"|(?P<eq>=|\bequals\b)"
    r"|(?P<op>(?<![A-Za-z])[xX×](?![A-Za-z])|[-+*/÷×−–]|\bplus\b|\bminus\b|\btimes\b|\bmultiplied by\b"
    r"|\bdivided by\b)"
    r"|(?P<lp>\()|(?P<rp>\))"
    r"|(?P<word>[A-Za-z][A-Za-z'-]*)"
    r"|(?P<other>[^\s])")
_PERCENT_MARK = "%"
_WORD_OPERATOR = {"plus": "+", "minus": "-", "times": "*", "multiplied by": "*", "divided by": "/"}
# Words naming what a number counts, read past up to an operator or '=' ("12 tubes of lip gloss * 3 people per
# tube of lip gloss = 36"): with 3, a substitution's stale operand behind a long name went unread; with 8 every
# GSM8K solution of the shared corpus still reads true.
_MAX_UNIT_WORDS = 8
# "of" after a share is a multiplication ("10% of 150", "2/3 of 30", "half of 24"); after another number it is
# prose the reader cannot compute ("3 of 12 eggs"), and the side it ends is cut short
_OF = "of"
# Number words a calculation may use as operands (next to an operator: "three times 4"), and shares before "of".
_SHARE_WORDS = {"half": Fraction(1, 2), "one-half": Fraction(1, 2), "third": Fraction(1, 3),
                "one-third": Fraction(1, 3), "quarter": Fraction(1, 4), "one-quarter": Fraction(1, 4),
                "one-fourth": Fraction(1, 4), "fifth": Fraction(1, 5), "one-fifth": Fraction(1, 5),
                "two-thirds": Fraction(2, 3), "three-quarters": Fraction(3, 4), "three-fourths": Fraction(3, 4)}


class _Piece(NamedTuple):
    kind: str
    text: str
    start: int
    end: int
    value: int | None = None  # a number's slot (None for a number written as words)
    word: bool = False        # an operator written as a word
    spoken: Fraction | int | None = None  # the value of a number written as words
    mixed: bool = False       # a mixed number ("1 1/2", "1 and 1/3"): its slot and the next two


def _prose_pieces(shape: str, mixed: bool = True) -> tuple[_Piece, ...]:
    pieces = []
    slot = 0
    for match in _PROSE_TOKEN.finditer(shape):
        kind = match.lastgroup if match.lastgroup != "pct" else "num"
        text = match.group()
        if match.group("num") is not None:
            pieces.append(_Piece("num", text, match.start(), match.end(), shape.count("0", 0, match.start())))
        elif kind == "op":
            op = text.lower()
            pieces.append(_Piece("op", _WORD_OPERATOR.get(op, _OPERATOR.get(op, op)), match.start(), match.end(),
                                 word=op in _WORD_OPERATOR))
        else:
            pieces.append(_Piece(kind, text, match.start(), match.end()))
    return _read_words(_mixed_numbers(shape, pieces) if mixed else pieces)


# A fraction that is a unit's own ("6 1/2-gallon jugs") or a share of something ("30 and 1/3 of them") is no mixed
# number's part.
NOT_MIXED_AFTER = re.compile(r"-[A-Za-z]|\s+of\b")


def _mixed_numbers(shape: str, pieces: list[_Piece]) -> list[_Piece]:
    """A whole number, a space (or " and ") and a fraction written tight ("1 1/2", "1 and 1/3") as one number, as a
    reader takes it (GSM8K's solutions write them so); read apart, "2 + 1 1/2 = 3 1/2" was a false calculation."""
    merged, index = [], 0
    while index < len(pieces):
        piece = pieces[index]
        rest = pieces[index + 1:index + 5]
        if rest and rest[0].kind == "word" and rest[0].text == "and" and shape[piece.end:rest[0].start] == " ":
            gap, rest = " and ", rest[1:]
        else:
            gap, rest = " ", rest[:3]
        if (piece.kind == "num" and piece.value is not None and piece.text == "0" and len(rest) == 3
                and [p.kind for p in rest] == ["num", "op", "num"] and rest[1].text == "/" and not rest[1].word
                and rest[0].text == rest[2].text == "0" and shape[piece.end:rest[0].start] == gap
                and rest[0].end == rest[1].start and rest[1].end == rest[2].start
                and not NOT_MIXED_AFTER.match(shape, rest[2].end)):
            merged.append(_Piece("num", shape[piece.start:rest[2].end], piece.start, rest[2].end, piece.value,
                                 mixed=True))
            index += 5 if gap == " and " else 4
            continue
        merged.append(piece)
        index += 1
    return merged


def _read_words(pieces: list[_Piece]) -> tuple[_Piece, ...]:
    """Words that are arithmetic to a reader: a number word used as an operand ("three times 4", "4 x two"), a
    share word before "of" ("half of 24"), and "of" after a share ("10% of 150", "2/3 of 30", "half of 24"), which
    multiplies."""
    for index, piece in enumerate(pieces):
        if piece.kind != "word":
            continue
        word = piece.text.lower()
        after = pieces[index + 1] if index + 1 < len(pieces) else None
        before = pieces[index - 1] if index else None
        if word == _OF:
            if after is not None and after.kind in ("num", "lp") and _is_share(pieces, index - 1):
                pieces[index] = _Piece("op", "*", piece.start, piece.end)
        elif word in _SHARE_WORDS:
            if after is not None and after.kind == "word" and after.text.lower() == _OF:
                pieces[index] = _Piece("num", piece.text, piece.start, piece.end, spoken=_SHARE_WORDS[word])
        elif word in _WORD_VALUES and ((after is not None and after.kind == "op" and after.text != "-")
                                       or (before is not None and before.kind == "op")):
            pieces[index] = _Piece("num", piece.text, piece.start, piece.end, spoken=_WORD_VALUES[word])
    return tuple(pieces)


def _is_share(pieces: list[_Piece], index: int) -> bool:
    """Whether pieces[index] ends a share of something: a percentage, a share word or a fraction "2/3"."""
    if index < 0 or pieces[index].kind != "num":
        return False
    piece = pieces[index]
    if piece.spoken is not None or _PERCENT_MARK in piece.text:
        return True
    return index >= 2 and pieces[index - 1].kind == "op" and pieces[index - 1].text == "/" \
        and not pieces[index - 1].word and pieces[index - 2].kind == "num"


def _sides(pieces: tuple[_Piece, ...], start: int) -> tuple[list[list[_Piece]], int]:
    """The sides of a calculation starting at pieces[start]: runs of numbers, operators and parentheses
    separated by '=' (unit words after a number are skipped, a '/' before a word is a rate: "$4/hour", a
    number before '(' multiplies: "2(6+3)"). Returns the sides and the index after the calculation."""
    sides: list[list[_Piece]] = [[]]
    index = start
    cut_short = False
    while index < len(pieces):
        piece = pieces[index]
        current = sides[-1]
        previous = current[-1].kind if current else None
        if piece.kind == "num" and previous in (None, "op", "lp"):
            current.append(piece)
        elif piece.kind == "num" and previous in ("num", "rp") and piece.text.lstrip().startswith("-"):
            # a negative number right after a number is a subtraction ("5 -3")
            current.append(_Piece("op", "-", piece.start, piece.start + 1))
            current.append(piece._replace(text=piece.text.replace("-", "", 1)))
        elif piece.kind == "op" and previous in ("num", "rp"):
            if piece.word and len(sides) > 1:
                break  # "8*45 = 360 divided by 5 is 72": a worded operation after a result starts a new sentence
            if piece.text == "/" and index + 1 < len(pieces) and pieces[index + 1].kind == "word" \
                    and pieces[index + 1].start == piece.end:
                index += 2  # a rate: "$4/hour"
                continue
            current.append(piece)
        elif piece.kind == "op" and piece.text in "+-" and not piece.word and previous in (None, "op", "lp"):
            current.append(piece)
        elif piece.kind == "lp" and previous in (None, "op", "lp"):
            current.append(piece)
        elif piece.kind == "lp" and previous == "num" and piece.start == current[-1].end:
            current.append(_Piece("op", "*", piece.start, piece.start))
            current.append(piece)
        elif piece.kind == "rp" and previous in ("num", "rp") and _open(current) > 0:
            current.append(piece)
        elif piece.kind == "word" and previous == "op" and [p.kind for p in pieces[index + 1:index + 4]] == [
                "lp", "num", "rp"]:
            index += 1  # a count named before it: "7 adults + Shonda (1) + 12 kids"
            continue
        elif piece.kind == "word" and previous in ("num", "rp"):
            if piece.text.lower() == _OF:
                following = pieces[index + 1] if index + 1 < len(pieces) else None
                if following is None or following.kind != "word":
                    # "3 of 12 eggs": a number taken of another, which the reader cannot compute
                    cut_short = following is not None and following.kind in ("num", "lp")
                    break
                # else units: "2 of her kids + 10 of their friends"
            # units after a number, kept only when an operator or '=' follows them
            after = index
            while after < len(pieces) and pieces[after].kind == "word" and after - index < _MAX_UNIT_WORDS:
                after += 1
            following = pieces[after] if after < len(pieces) else None
            if following is not None and following.kind in ("op", "eq") and not following.word:
                index = after
                continue
            break
        elif piece.kind == "eq" and previous in ("num", "rp") and _open(current) == 0:
            sides.append([])
        else:
            break
        index += 1
    if cut_short or _open(sides[-1]) != 0:
        sides[-1] = []
    while sides and (not sides[-1] or sides[-1][-1].kind in ("op", "lp")):
        if sides[-1] and sides[-1][-1].kind in ("op", "lp"):
            sides[-1].pop()
            continue
        sides.pop()
    before = pieces[start - 1] if start > 0 else None
    if before is not None and (before.kind == "op" or (
            before.text.lower() == _OF and start >= 2 and pieces[start - 2].kind in ("num", "rp"))):
        # the first side is the tail of something longer: "3 dozen cookies - 2 dozen = 1", "3 of 12 eggs = 1/4"
        sides = sides[1:]
    if len(sides) >= 3 and not any(p.kind == "op" for p in sides[0]):
        sides = sides[1:]  # a conversion: "2 kg = 2 * 1000 = 2000 g"
    return sides, index


def _open(side: list[_Piece]) -> int:
    return sum(1 for p in side if p.kind == "lp") - sum(1 for p in side if p.kind == "rp")


def _side_agree(sides: list[list[_Token]]) -> bool:
    result, decimals = _shown(tuple(sides[-1]))
    values = [_Parser(tuple(side)).whole() for side in sides[:-1]]
    if all(_agrees(value, result, decimals) for value in values):
        return True
    if any(_PERCENT_MARK in t.text for t in sides[-1]):
        # a percentage as the result may be percentage points: "100 - 50 = 50%"
        points = [t._replace(value=t.value * 100) if _PERCENT_MARK in t.text else t for t in sides[-1]]
        result, decimals = _shown(tuple(points))
        return all(_agrees(value, result, decimals) for value in values)
    return False


@lru_cache(maxsize=PROBLEM_CACHE_SIZE)
def _calculations(shape: str, mixed: bool = True) -> tuple[tuple[tuple[tuple[_Piece, ...], ...], int, int], ...]:
    """Each calculation in a prose shape: its sides, and where it is in the shape (`mixed`: "1 1/2" read as one
    number)."""
    pieces = _prose_pieces(shape, mixed)
    found = []
    index = 0
    while index < len(pieces):
        if pieces[index].kind not in ("num", "lp"):
            index += 1
            continue
        sides, after = _sides(pieces, index)
        if len(sides) >= 2 and any(p.kind == "op" for side in sides for p in side):
            found.append((tuple(tuple(side) for side in sides), sides[0][0].start, sides[-1][-1].end))
        index = max(after, index + 1)
    return tuple(found)


def false_calculations(prose: str) -> tuple[tuple[str, str], ...]:
    """(kind, text) of every calculation in the prose that is not true as written."""
    if "=" not in prose and "equals" not in prose:
        return ()
    shape, numbers = _shape(prose)
    try:
        return _false_calculations(shape, numbers, mixed=True)
    except _NotMixed:
        return _false_calculations(shape, numbers, mixed=False)


def _false_calculations(shape: str, numbers: list[str], mixed: bool) -> tuple[tuple[str, str], ...]:
    wrong = []
    for sides, start, end in _calculations(shape, mixed):
        try:
            if _side_agree([[_filled(piece, numbers) for piece in side] for side in sides]):
                continue
            kind, reason = "false_calculation", ""
        except _NotMixed:
            raise
        except Unreadable as exc:
            kind, reason = "unreadable_calculation", f" ({exc})"
        # the calculation's text, its numbers put back into its shape (only for those that fail: most are true)
        first = shape.count("0", 0, start)
        text = _SLOT_MARK.sub(lambda _, slots=iter(numbers[first:]): next(slots), shape[start:end])
        wrong.append((kind, text + reason))
    return tuple(wrong)


_SLOT_MARK = re.compile("0")


# --- whole solutions ----------------------------------------------------------------------------
ANNOTATION = re.compile(r"<<(.*?)>>")


def line_findings(line: str) -> tuple[tuple[str, str], ...]:
    """(kind, text) of every false calculation in one line: annotations, then the prose as read."""
    found = []
    for match in ANNOTATION.finditer(line):
        problem = check_annotation(match.group(1))
        if problem:
            found.append(("false_calculation" if "cannot be read" not in problem else "unreadable_calculation",
                          problem))
    found.extend(false_calculations(ANNOTATION.sub("", line)))
    return tuple(found)


def solution_lines(solution: str) -> list[str]:
    """The non-empty lines, in order (line k of a solution is label Lk; the last is '#### answer')."""
    return [line.strip() for line in solution.splitlines() if line.strip()]


def false_statements(solution: str, known_true: Collection[str] = ()) -> list[Finding]:
    """Every false calculation of a solution; lines in `known_true` (already read and found true) are skipped."""
    findings = []
    for number, line in enumerate(solution_lines(solution), start=1):
        if line.startswith(FINAL_ANSWER_MARK) or line in known_true:
            continue
        findings.extend(Finding(number, kind, text) for kind, text in line_findings(line))
    return findings


_FINAL_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def final_answer_findings(solution: str) -> list[Finding]:
    lines = solution_lines(solution)
    if not lines or not lines[-1].startswith(FINAL_ANSWER_MARK):
        return [Finding(len(lines), "no_final_answer", lines[-1] if lines else "")]
    answer = lines[-1][len(FINAL_ANSWER_MARK):].strip()
    if _FINAL_NUMBER.fullmatch(answer):
        return []
    kind = "fraction_answer" if "/" in answer else "final_answer_not_a_number"
    return [Finding(len(lines), kind, answer)]


def stale_numbers(solution: str, from_line: int, stale: Collection[Fraction | int]) -> list[Finding]:
    """Numbers from line `from_line` (1-based) on that state one of the `stale` values."""
    if not stale:
        return []
    keys = _stale_keys(stale)
    findings = []
    for number, line in enumerate(solution_lines(solution), start=1):
        if number < from_line or line.startswith(FINAL_ANSWER_MARK):
            continue
        plain = line.replace(",", "").lower()
        if not any(key in plain for key in keys):
            continue  # no text in the line can state a stale value: it need not be read number by number
        for written in numbers_in(line):
            if (written.value in stale and not written.percent) or (
                    (written.decimals or written.percent) and any(_denotes(written, v) for v in stale)):
                findings.append(Finding(number, "stale_number", f"{written.text!r} in {line!r}"))
                break
    return findings


_WORDS_OF = {}
for _word, _value in _WORD_VALUES.items():
    _WORDS_OF.setdefault(_value, []).append(_word)


def _stale_keys(stale: Collection[Fraction | int]) -> tuple[str, ...]:
    """Texts at least one of which a line must contain (commas removed, lower case) to state a stale value:
    the digits of a whole value or of its percentage, its number word, the start of any decimal rounding of it
    ("3." for 10/3) and its fraction's denominator ("/3")."""
    keys = set()
    for value in stale:
        for form in (value, value * 100):
            if form == int(form):
                keys.add(str(abs(int(form))))
            else:
                keys.add(f"{abs(int(form))}." if abs(form) >= 1 else ".")
        if isinstance(value, Fraction) and value.denominator != 1:
            keys.add(f"/{value.denominator}")
        keys.update(_WORDS_OF.get(value, ()))
        for scale, word in ((100, "hundred"), (1000, "thousand")):
            if value and value % scale == 0:
                keys.add(word)
    return tuple(keys)


def as_written(value: Any) -> Fraction | int | None:
    """A computed value as the number a text would write for it: a float by its shortest decimal (0.1 is 1/10,
    not the binary fraction nearest to it); None for what is no number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        return int(value) if value.is_integer() else Fraction(repr(value))
    return value if isinstance(value, (int, Fraction)) else None


def changed_values(correct: Mapping[str, Any], flawed: Mapping[str, Any], keep: Collection[Any] = ()) -> set:
    """Values the flaw changed that nothing in the flawed computation still has: the correct value of each
    variable whose value changed, less every flawed value and the numbers in `keep` (e.g. the question's).
    Python's numbers compare and hash alike across int, float and Fraction, so the raw values are compared."""
    current = None
    changed = set()
    for name, value in correct.items():
        new = flawed.get(name, value)
        if new is value or new == value:
            continue
        old = as_written(value)
        if old is None or as_written(new) is None:
            continue
        if current is None:
            current = {v for v in flawed.values() if as_written(v) is not None}
        if value not in current and old not in current and old not in keep:
            changed.add(old)
    return changed


@dataclass(frozen=True)
class Verdict:
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not self.findings

    def reason(self) -> str:
        return "; ".join(f.describe() for f in self.findings[:3])


def line_of(label: str, solution: str) -> int:
    """The 1-based line of an erroneous-line label ('L3' -> 3, 'FA' -> the final answer's line)."""
    if label.startswith("L") and label[1:].isdigit():
        return int(label[1:])
    return len(solution_lines(solution))


def check_flawed(solution: str, *, family: str, erroneous_line: str, correct: Mapping[str, Any],
                 flawed: Mapping[str, Any], keep: Collection[Any] = (), known_true: Collection[str] = ()) -> Verdict:
    """A flawed solution as a reviewer checks it: every calculation true except, for a computational
    error, those on its erroneous line; no value the flaw changed stated from the erroneous line on
    (`keep`: numbers that may be stated anyway, such as the question's); a numeric final answer.
    `known_true`: lines already read and found true (the correct solution's), not read again."""
    error_line = line_of(erroneous_line, solution)
    findings = [f for f in false_statements(solution, known_true)
                if not (family == "computational" and f.line == error_line and f.kind == "false_calculation")]
    findings += stale_numbers(solution, error_line, changed_values(correct, flawed, keep))
    findings += final_answer_findings(solution)
    return Verdict(tuple(findings))


def check_correct(solution: str) -> Verdict:
    """A correct solution: every calculation true and a numeric final answer."""
    return Verdict(tuple(false_statements(solution) + final_answer_findings(solution)))


def question_numbers(question: str) -> frozenset:
    """The numbers a question states (digits, percentages as both forms, number words)."""
    found = set()
    for number in numbers_in(question):
        found.add(number.value)
        if number.percent:
            found.add(number.value / 100)
    return frozenset(found)
