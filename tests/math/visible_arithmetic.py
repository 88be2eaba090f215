"""A second reader of solution text, for the tests: written apart from flawforge.math.proofread (which the
generator itself uses), with Python's own parser for the arithmetic, so that a false calculation both readers
miss is one they miss for different reasons.

It checks every `<<expression=value>>` annotation, and every calculation a reader sees in the prose once the
annotations are removed: runs "operand (operator operand)+ = result (= result)*" with "$", thousands separators,
"%", unit words between an operand and the next operator ("5 hours x $4"), rates ("$4/hour"), "2(6+3)", number
words beside an operator ("three times 4"), a share of something ("half of 24", "10% of 150", "2/3 of 30"), and
mixed numbers ("1 1/2", "1 and 1/3").
A result shown with decimals is right when the exact value rounds to it; a percentage result may be points.
"""
from __future__ import annotations

import ast
import math
import re
from fractions import Fraction

ANNOTATION = re.compile(r"<<([^<>]*)>>")
_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
          "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
          "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
          "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_OPERATOR_TEXT = r"(?:plus|minus|times|multiplied by|divided by|x|\*|\+|-|/|×|÷)"
_SIGNS = {"plus": "+", "minus": "-", "times": "*", "multiplied by": "*", "divided by": "/", "x": "*", "×": "*",
          "÷": "/", "−": "-", "–": "-"}
_WORD_OPERATORS = {"plus", "minus", "times", "multiplied by", "divided by"}
# words that end a run of unit words ("5 apples and 3 pears" is no "5 + ...")
_NOT_UNITS = {"is", "are", "was", "were", "and", "so", "then", "for", "to", "in", "on", "at", "by", "from", "with",
              "per", "each", "or", "the", "a", "an"}
_NUMBER = r"\$?\s?\d+(?:,\d{3})*(?:\.\d+)?\s?%?|\$?\s?\.\d+"
# a number glued to a unit ("8km") is one, not one glued to a single letter ("2W"), an ordinal's ending or a clock
_TOKEN = re.compile(
    rf"(?P<num>(?<!\d:)(?<![\d.])(?:{_NUMBER})(?!\d|(?:st|nd|rd|th)\b|[A-Z]\b|[a-z]\b(?!\s*=)|:|\.\d))"
    r"|(?P<op>plus|minus|times|multiplied by|divided by|(?<![A-Za-z])[x×](?![A-Za-z])|[-+*/÷−–])"
    r"|(?P<lp>\()|(?P<rp>\))|(?P<eq>=|\bequals\b)|(?P<word>[A-Za-z][A-Za-z'-]*)|(?P<other>\S)", re.I)


def value_of(expression: str) -> Fraction:
    """The exact value of a written arithmetic expression."""
    text = expression.replace("–", "-").replace("−", "-").replace("$", "").replace("×", "*").replace("÷", "/")
    text = re.sub(r"(?<=\d)\s*x\s*(?=[\d(])", "*", text)
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text)
    text = re.sub(r"(\d+(?:\.\d+)?)\s*%", r"(\1/100)", text)
    return _evaluate(ast.parse(text.strip(), mode="eval").body)


def _evaluate(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left), _evaluate(node.right)
        operations = {ast.Add: lambda: left + right, ast.Sub: lambda: left - right, ast.Mult: lambda: left * right,
                      ast.Div: lambda: left / right, ast.FloorDiv: lambda: Fraction(left // right),
                      ast.Mod: lambda: left % right, ast.Pow: lambda: left ** int(right)}
        return operations[type(node.op)]()
    if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
        name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
        arguments = [_evaluate(argument) for argument in node.args]
        functions = {"round": lambda: Fraction(round(arguments[0], int(arguments[1]) if len(arguments) > 1 else 0)),
                     "int": lambda: Fraction(math.trunc(arguments[0])), "min": lambda: min(arguments),
                     "max": lambda: max(arguments), "abs": lambda: abs(arguments[0]),
                     "ceil": lambda: Fraction(math.ceil(arguments[0])),
                     "floor": lambda: Fraction(math.floor(arguments[0])),
                     "Fraction": lambda: arguments[0] / arguments[1], "float": lambda: arguments[0]}
        return functions[name]()
    raise ValueError(f"not arithmetic: {ast.dump(node)}")


def shows(computed: Fraction, result: str) -> bool:
    """Whether a written result states `computed` (rounded to its decimals; a percentage as share or points)."""
    text = result.strip().replace("$", "").replace(",", "").strip()
    percent = text.endswith("%")
    text = text.rstrip("%").strip()
    decimals = len(text.partition(".")[2])
    written = Fraction(text)
    tolerance = Fraction(1, 2 * 10**decimals) if decimals else Fraction(1, 10**9)
    return abs(computed - (written / 100 if percent else written)) <= tolerance or (
        percent and abs(computed - written) <= tolerance)


def _mixed_number(match: re.Match) -> str:
    """'1 1/2' (or '1 and 1/2') as one number: its decimal where it has one of at most four places, else the
    improper fraction in parentheses ('(4/3)')."""
    whole, over, under = (int(group) for group in match.groups())
    if not 0 < over < under:
        return match.group()
    value = whole + Fraction(over, under)
    scaled = value * 10**4
    return str(float(value)) if scaled.denominator == 1 else f"({value.numerator}/{value.denominator})"


def _read_words(prose: str) -> str:
    # not a unit's fraction ("6 1/2-gallon jugs") nor a share ("30 and 1/3 of them")
    prose = re.sub(r"(?<![\w./])(\d+)(?: and | )(\d+)/(\d+)(?![\w/]|\.\d|-[A-Za-z]|\s+of\b)", _mixed_number, prose)
    words = "|".join(sorted(_WORDS, key=len, reverse=True))
    prose = re.sub(rf"\b({words})(?=\s+{_OPERATOR_TEXT}\s)", lambda m: str(_WORDS[m.group(1).lower()]), prose,
                   flags=re.I)
    prose = re.sub(rf"({_OPERATOR_TEXT}\s+)({words})\b", lambda m: m.group(1) + str(_WORDS[m.group(2).lower()]),
                   prose, flags=re.I)
    prose = re.sub(r"\bhalf of\s+(?=\$?\d)", "1/2 * ", prose, flags=re.I)
    prose = re.sub(r"(\d+(?:\.\d+)?)\s?%\s+of\s+(?=\$?\d)", r"\1/100 * ", prose)
    return re.sub(r"(\d+)/(\d+)\s+of\s+(?=\$?\d)", r"\1/\2 * ", prose)


def prose_calculations(prose: str) -> list[tuple[str, list[str]]]:
    """(expression, results) of each calculation written in the prose."""
    tokens = [(match.lastgroup, match.group()) for match in _TOKEN.finditer(_read_words(prose))]
    found, index = [], 0
    while index < len(tokens):
        if tokens[index][0] not in ("num", "lp"):
            index += 1
            continue
        at, expression, operators, depth, last = index, [], 0, 0, None
        while at < len(tokens):
            kind, text = tokens[at]
            if kind == "num" and last in (None, "op", "lp"):
                expression.append(text)
            elif kind == "op" and text == "/" and last in ("num", "rp") and at + 1 < len(tokens) \
                    and tokens[at + 1][0] == "word":
                at += 2  # a rate: "$4/hour"
                continue
            elif kind == "op" and last in ("num", "rp"):
                expression.append(_SIGNS.get(text.lower(), text))
                operators += 1
            elif kind == "op" and text in "-−–" and last == "op":
                expression.append("-")  # a negative operand: "12+-1"
            elif kind == "lp" and last in (None, "op", "lp"):
                expression.append("(")
                depth += 1
            elif kind == "lp" and last == "num":  # "2(6+3)"
                expression += ["*", "("]
                depth += 1
                operators += 1
            elif kind == "rp" and last in ("num", "rp") and depth > 0:
                expression.append(")")
                depth -= 1
            elif kind == "word" and last in ("num", "rp") and text.lower() not in _NOT_UNITS:
                end = at  # unit words, read through only when an operator or '=' follows them
                while end < len(tokens) and tokens[end][0] == "word" and end - at < 3 \
                        and tokens[end][1].lower() not in _NOT_UNITS:
                    end += 1
                if end < len(tokens) and tokens[end][0] in ("op", "eq") and tokens[end][1].lower() \
                        not in _WORD_OPERATORS:
                    at = end
                    continue
                break
            else:
                break
            last = kind
            at += 1
        results = []
        while at + 1 < len(tokens) and tokens[at][0] == "eq" and tokens[at + 1][0] == "num":
            if at + 2 < len(tokens) and tokens[at + 2][0] == "op":
                break  # "= 5 + 3 = 8": the next calculation
            results.append(tokens[at + 1][1])
            at += 2
        if operators and results and depth == 0 and last in ("num", "rp"):
            found.append((" ".join(expression), results))
        index = max(at, index + 1)
    return found


def false_calculations(line: str) -> list[str]:
    """Every calculation of a solution line, annotation or prose, that is not true as written."""
    wrong = []
    for body in ANNOTATION.findall(line):
        expression, _, result = body.rpartition("=")
        try:
            if not shows(value_of(expression), result):
                wrong.append(f"<<{body}>>")
        except (ValueError, SyntaxError, KeyError, ZeroDivisionError, IndexError):
            wrong.append(f"<<{body}>> (unreadable)")
    # "$294<<42*7=294>>294", a GSM8K habit: the number before the annotation is its result, written once
    prose = ANNOTATION.sub("", re.sub(r"(\d+(?:\.\d+)?)<<[^<>]*=\1>>\1", r"\1", line))
    for expression, results in prose_calculations(prose):
        try:
            computed = value_of(expression)
        except (ValueError, SyntaxError, KeyError, ZeroDivisionError):
            continue
        wrong += [f"{expression} = {result}" for result in results if not shows(computed, result)][:1]
    return wrong


# a fraction after '=' or an annotation that no operator or '=' follows: a result ("= 398/5 pots"), not a
# division ("= 80/2 = 40")
_FRACTION_RESULT = re.compile(r"(?:=\s*\$?|>>\s*\$?)(\d+)/(\d+)(?!\d|\s*[-+*/=x])")


def improper_fraction_results(text: str) -> list[str]:
    """Results written as improper fractions ("= 398/5", ">>7/2")."""
    return [f"{over}/{under}" for over, under in _FRACTION_RESULT.findall(text) if int(over) > int(under) > 1]


def fraction_results(text: str) -> list[str]:
    """Results written as fractions, proper or not."""
    return [f"{over}/{under}" for over, under in _FRACTION_RESULT.findall(text) if int(under) > 1]
