"""Which JSON-schema keywords constrain decoding, and the refusal of every other one.

A schema is compiled into a grammar by xgrammar, which enforces some keywords, ignores others without a
word, and enforces some only in some company (a string's `maxLength` only beside `"type": "string"` and
without `pattern`; `minimum` only with a numeric type; nothing beside `enum`, `anyOf` or `$ref`). A keyword
it would ignore is refused here, naming it and where it is, so no bound a caller wrote is silently dropped.
What is accepted was checked keyword by keyword against xgrammar's matcher (tests/inference/
test_schema_support.py accepts a value the keyword allows and refuses one it forbids).

Two relaxations are documented rather than refused: `oneOf` is decoded as `anyOf` (a value matching two
branches is not refused), and a string's `format` is decoded by the format's grammar alone.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from flawforge.inference.errors import UnsupportedSchemaKeyword
from flawforge.inference.grammars import pointer

# Words that describe a schema without constraining its values.
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
                         "writeOnly", "$schema", "discriminator"})
# Keywords whose values are schemas (or lists or maps of schemas), and where nested schemas are found.
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
SCHEMA_LISTS = ("prefixItems", "anyOf", "oneOf", "allOf")
SCHEMA_VALUES = ("items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems")

STRING_KEYWORDS = frozenset({"minLength", "maxLength", "pattern", "format"})
NUMBER_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
ARRAY_KEYWORDS = frozenset({"items", "prefixItems", "minItems", "maxItems", "unevaluatedItems"})
OBJECT_KEYWORDS = frozenset({"properties", "required", "additionalProperties", "patternProperties",
                             "propertyNames", "minProperties", "maxProperties", "unevaluatedProperties"})
# The family of values each keyword constrains, by the JSON types that belong to it.
FAMILIES = ({keyword: ("string",) for keyword in STRING_KEYWORDS}
            | {keyword: ("integer", "number") for keyword in NUMBER_KEYWORDS}
            | {keyword: ("array",) for keyword in ARRAY_KEYWORDS}
            | {keyword: ("object",) for keyword in OBJECT_KEYWORDS})
# Keywords that decide the value alone: xgrammar reads nothing else of their schema but annotations.
EXCLUSIVE = ("enum", "const", "anyOf", "oneOf", "allOf", "$ref")
GENERAL = frozenset({"type", "$defs", "definitions", *EXCLUSIVE})
TYPES = frozenset({"string", "integer", "number", "boolean", "null", "array", "object"})
# The formats xgrammar has a grammar for; any other is ignored by it.
FORMATS = frozenset({"email", "date", "time", "date-time", "duration", "ipv4", "ipv6", "hostname", "uuid", "uri",
                     "uri-reference", "uri-template", "json-pointer", "relative-json-pointer"})

# Why a keyword xgrammar does not enforce is refused, where a hint helps the caller rewrite the schema.
HINTS = {
    "nullable": 'an OpenAPI word, not JSON Schema; write "type": [..., "null"]',
    "uniqueItems": "decoding cannot see earlier items",
    "contains": "decoding cannot look ahead for an item", "minContains": "decoding cannot count matching items",
    "maxContains": "decoding cannot count matching items",
    "not": "a grammar cannot exclude a schema", "if": "conditional schemas are not compiled",
    "then": "conditional schemas are not compiled", "else": "conditional schemas are not compiled",
    "dependentRequired": "dependencies between properties are not compiled",
    "dependentSchemas": "dependencies between properties are not compiled",
    "dependencies": "dependencies between properties are not compiled",
    "additionalItems": "a draft-4 word; write prefixItems and items",
}


@dataclass(frozen=True)
class Unsupported:
    """A keyword decoding would not enforce: the keyword, the JSON pointer of its schema, and why."""

    keyword: str
    path: tuple
    reason: str


def unsupported_keyword(schema) -> Unsupported | None:
    """The first keyword of `schema` (in document order) that constrained decoding would not enforce."""
    return _check(schema, ())


def refuse_unsupported(schema, param: str, where: str) -> None:
    """Raises UnsupportedSchemaKeyword for the first keyword of `schema` decoding would not enforce; `where` names
    the schema in the request (the response format, a tool)."""
    found = unsupported_keyword(schema)
    if found is not None:
        raise UnsupportedSchemaKeyword(param, where, found.keyword, pointer(found.path), found.reason)


def _types(node: dict) -> set[str]:
    """The JSON types `node` allows as xgrammar reads it: its `type`, or the one its structure implies."""
    declared = node.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return set(declared)
    if "properties" in node or "additionalProperties" in node:
        return {"object"}
    if "items" in node or "prefixItems" in node:
        return {"array"}
    return set()


def _check(node, path: tuple) -> Unsupported | None:
    if not isinstance(node, dict):
        return None  # true or false; or not a schema, which the compiler refuses in its own words
    found = _check_node(node, path)
    if found is not None or "enum" in node or "const" in node:
        return found  # a fixed value: what its schema nests cannot matter
    for key in SCHEMA_MAPS:
        if isinstance(node.get(key), dict):
            for name, child in node[key].items():
                if found := _check(child, path + (key, name)):
                    return found
    for key in SCHEMA_LISTS:
        if isinstance(node.get(key), list):
            for index, child in enumerate(node[key]):
                if found := _check(child, path + (key, index)):
                    return found
    for key in SCHEMA_VALUES:
        if key in node and (found := _check(node[key], path + (key,))):
            return found
    names = node.get("propertyNames")
    if isinstance(names, dict):  # a property's name is a string whether its schema says so or not
        return _check({"type": "string", **names}, path + ("propertyNames",))
    return None


def _check_node(node: dict, path: tuple) -> Unsupported | None:
    """This schema's own keywords, not its nested schemas'."""
    for keyword in node:
        if keyword not in ANNOTATIONS and keyword not in GENERAL and keyword not in FAMILIES:
            if keyword == "uniqueItems" and node[keyword] is False:
                continue  # asks for nothing
            return Unsupported(keyword, path, HINTS.get(keyword, "not a keyword the grammar compiler enforces"))
    exclusive = [keyword for keyword in EXCLUSIVE if keyword in node]
    if exclusive:
        return _beside_exclusive(node, path, exclusive)
    types = _types(node)
    unknown = sorted(t for t in types if t not in TYPES)
    if unknown:
        return Unsupported("type", path, f"{unknown[0]!r} is not a JSON type")
    for keyword in node:
        family = FAMILIES.get(keyword)
        if family is not None and not types.intersection(family):
            wanted = " or ".join(f'"{t}"' for t in family)
            return Unsupported(keyword, path, f'it constrains only {wanted} values and this schema has no "type" '
                                              f"naming one, so it would not be enforced")
    if "multipleOf" in node and "number" in types:
        return Unsupported("multipleOf", path, 'enforced for "integer" only, not "number"')
    if "format" in node and node["format"] not in FORMATS:
        return Unsupported("format", path, f"no grammar for format {node['format']!r}; known: "
                                           f"{', '.join(sorted(FORMATS))}")
    if "pattern" in node and "format" in node:
        return Unsupported("format", path, "beside pattern it would not be enforced; write one or the other")
    shaped_by = "pattern" if "pattern" in node else "format" if "format" in node else None
    if shaped_by is not None:
        # xgrammar writes such a string by its pattern or format alone: a length bound holds only where the pattern
        # implies it (every match of ^[a-z]{1,8}$ has 1 to 8 characters).
        shortest, longest = _match_lengths(node["pattern"]) if shaped_by == "pattern" else (0, None)
        implied = {"minLength": lambda bound: shortest >= bound,
                   "maxLength": lambda bound: longest is not None and longest <= bound}
        for keyword in ("minLength", "maxLength"):
            if keyword in node and isinstance(node[keyword], int) and not implied[keyword](node[keyword]):
                return Unsupported(keyword, path, f"beside {shaped_by} it would not be enforced; put the bound in "
                                                  f"the pattern (e.g. ^[a-z]{{1,8}}$)")
    if isinstance(node.get("items"), list):
        return Unsupported("items", path, "a list of schemas is draft-4 tuple form; write prefixItems")
    return None


def _match_lengths(pattern: str) -> tuple[int, int | None]:
    """The fewest and most characters a string matching `pattern` whole may have (None: no most); (0, None) where
    Python cannot read the pattern."""
    try:
        shortest, longest = re._parser.parse(pattern).getwidth()
    except (re.error, RecursionError, OverflowError):
        return 0, None
    return shortest, None if longest >= re._parser.MAXREPEAT else longest


def _beside_exclusive(node: dict, path: tuple, exclusive: list[str]) -> Unsupported | None:
    """`enum` and `const` fix the value, and `anyOf`, `oneOf`, `allOf` and `$ref` take it from elsewhere: xgrammar
    reads nothing else beside them. A sibling is accepted only where it cannot matter: beside `enum` or `const`,
    a bound every allowed value satisfies anyway."""
    first = exclusive[0]
    if first == "allOf" and len(node["allOf"]) != 1:
        return Unsupported("allOf", path, "only an allOf of one schema is compiled; merge its schemas into one")
    siblings = [key for key in node if key not in ANNOTATIONS and key not in ("$defs", "definitions") and key != first]
    values = node["enum"] if first == "enum" else [node["const"]] if first == "const" else None
    for keyword in siblings:
        if values is None or keyword not in VALUE_CHECKS:
            return Unsupported(keyword, path, f"beside {first} it would not be enforced; move it into the "
                                              f"schema{'s' if first.endswith('Of') else ''} {first} names")
        if not isinstance(values, list):
            return None  # not a schema: the compiler refuses it with its own words
        failing = [value for value in values if not VALUE_CHECKS[keyword](value, node[keyword])]
        if failing:
            return Unsupported(keyword, path, f"beside {first} it would not be enforced, and the allowed value "
                                              f"{failing[0]!r} does not satisfy it")
    return None


def _is_type(value, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and value.is_integer()
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    kinds = {"string": str, "boolean": bool, "null": type(None), "array": list, "object": dict}
    return name in kinds and isinstance(value, kinds[name])


def _number_check(test):
    """A bound on numbers; other values satisfy it (JSON Schema applies it to numbers only)."""
    return lambda value, bound: not _is_type(value, "number") or test(value, bound)


def _string_check(test):
    return lambda value, bound: not isinstance(value, str) or test(value, bound)


# The keywords a value can be checked against beside enum or const: each (value, keyword's argument) -> satisfied.
# Not `pattern`: a caller's regular expression run here could backtrack for minutes.
VALUE_CHECKS = {
    "type": lambda value, declared: any(_is_type(value, t) for t in ([declared] if isinstance(declared, str)
                                                                     else declared)),
    "const": lambda value, const: value == const,
    "enum": lambda value, allowed: value in allowed,
    "minLength": _string_check(lambda value, bound: len(value) >= bound),
    "maxLength": _string_check(lambda value, bound: len(value) <= bound),
    "minimum": _number_check(lambda value, bound: value >= bound),
    "maximum": _number_check(lambda value, bound: value <= bound),
    "exclusiveMinimum": _number_check(lambda value, bound: value > bound),
    "exclusiveMaximum": _number_check(lambda value, bound: value < bound),
}
