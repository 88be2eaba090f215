"""Every JSON-schema keyword either constrains decoding or is refused naming it: each accepted keyword is checked
against xgrammar's own matcher (a value it allows is accepted, one it forbids is not), each refused one names
itself and where it is."""
from __future__ import annotations

import json

import pytest
import xgrammar
from xgrammar.testing import _is_grammar_accept_string

from flawforge.inference.errors import UnsupportedSchemaKeyword
from flawforge.inference.schema_support import refuse_unsupported, unsupported_keyword

STRING, INTEGER, NUMBER = {"type": "string"}, {"type": "integer"}, {"type": "number"}
INTEGERS = {"type": "array", "items": INTEGER}
PAIR = {"type": "object", "properties": {"a": INTEGER, "b": INTEGER}}

# (schema, a value the schema allows, a value only the keyword under test forbids)
ENFORCED = {
    "maxLength": ({**STRING, "maxLength": 3}, "abc", "abcd"),
    "minLength": ({**STRING, "minLength": 3}, "abc", "ab"),
    "pattern": ({**STRING, "pattern": "^a+$"}, "aa", "ab"),
    "format": ({**STRING, "format": "date"}, "2020-01-02", "x"),
    "length implied by the pattern": ({**STRING, "pattern": "^[a-z]{1,4}$", "maxLength": 4}, "abcd", "abcde"),
    "minimum": ({**INTEGER, "minimum": 2}, 2, 1),
    "maximum": ({**NUMBER, "maximum": 1.5}, 1.5, 2),
    "exclusiveMinimum": ({**INTEGER, "exclusiveMinimum": 2}, 3, 2),
    "exclusiveMaximum": ({**NUMBER, "exclusiveMaximum": 1.5}, 1, 1.5),
    "multipleOf": ({**INTEGER, "multipleOf": 3}, 6, 7),
    "bounds of a nullable type": ({"type": ["integer", "null"], "minimum": 3}, None, 2),
    "enum": ({"enum": ["a", "b"]}, "a", "c"),
    "const": ({"const": "a"}, "a", "b"),
    "enum with bounds it meets": ({**STRING, "enum": ["ab", "cd"], "maxLength": 2}, "cd", "ef"),
    "minItems": ({**INTEGERS, "minItems": 2}, [1, 2], [1]),
    "maxItems": ({**INTEGERS, "maxItems": 2}, [1, 2], [1, 2, 3]),
    "prefixItems": ({"type": "array", "prefixItems": [STRING], "items": False}, ["a"], ["a", "b"]),
    "required": ({**PAIR, "required": ["a"]}, {"a": 1}, {"b": 1}),
    "additionalProperties": ({"type": "object", "additionalProperties": INTEGER}, {"x": 1}, {"x": "s"}),
    "minProperties": ({**PAIR, "minProperties": 1}, {"a": 1}, {}),
    "maxProperties": ({**PAIR, "maxProperties": 1}, {"a": 1}, {"a": 1, "b": 2}),
    "patternProperties": ({"type": "object", "patternProperties": {"^x": STRING}}, {"x": "s"}, {"x": 1}),
    "propertyNames": ({"type": "object", "additionalProperties": INTEGER, "propertyNames": {"pattern": "^[a-z]+$"}},
                      {"ab": 1}, {"A1": 1}),
    "maxLength of property names": ({"type": "object", "additionalProperties": INTEGER,
                                     "propertyNames": {"maxLength": 2}}, {"ab": 1}, {"abc": 1}),
    "anyOf": ({"anyOf": [STRING, INTEGER], "title": "either"}, 1, True),
    "allOf of one schema": ({"allOf": [{**INTEGER, "maximum": 3}]}, 3, 4),
    "$ref": ({"$defs": {"small": {**INTEGER, "maximum": 3}}, "$ref": "#/$defs/small"}, 3, 4),
    "nested": ({"type": "object", "properties": {"city": {**STRING, "maxLength": 4}}, "required": ["city"]},
               {"city": "Rome"}, {"city": "Paris"}),
}

# (schema, the keyword refused, where)
REFUSED = {
    "uniqueItems": ({**INTEGERS, "uniqueItems": True}, "uniqueItems", "(the whole schema)"),
    "not": ({"not": STRING}, "not", "(the whole schema)"),
    "if": ({**INTEGER, "if": {"minimum": 3}, "then": {"maximum": 5}}, "if", "(the whole schema)"),
    "contains": ({**INTEGERS, "contains": {"const": 1}}, "contains", "(the whole schema)"),
    "dependentRequired": ({**PAIR, "dependentRequired": {"a": ["b"]}}, "dependentRequired", "(the whole schema)"),
    "nullable": ({**STRING, "nullable": True}, "nullable", "(the whole schema)"),
    "unknown word": ({"type": "object", "properties": {"x": {**STRING, "maxlength": 3}}}, "maxlength",
                     "/properties/x"),
    "number multipleOf": ({**NUMBER, "multipleOf": 0.5}, "multipleOf", "(the whole schema)"),
    "a bound without its type": ({"properties": {"x": {"maxLength": 3}}}, "maxLength", "/properties/x"),
    "a bound of another type": ({**INTEGER, "maxLength": 3}, "maxLength", "(the whole schema)"),
    "maxLength beside a pattern": ({**STRING, "pattern": "^[a-z]+$", "maxLength": 5}, "maxLength",
                                   "(the whole schema)"),
    "maxLength beside a format": ({**STRING, "format": "email", "maxLength": 30}, "maxLength", "(the whole schema)"),
    "unknown format": ({**STRING, "format": "int32"}, "format", "(the whole schema)"),
    "a bound beside anyOf": ({"anyOf": [STRING, INTEGER], "maxLength": 3}, "maxLength", "(the whole schema)"),
    "a bound beside $ref": ({"$defs": {"s": STRING}, "$ref": "#/$defs/s", "maxLength": 3}, "maxLength",
                            "(the whole schema)"),
    "allOf of two": ({"allOf": [INTEGER, {"maximum": 3}]}, "allOf", "(the whole schema)"),
    "enum with a bound it breaks": ({**STRING, "enum": ["ab", "cdef"], "maxLength": 2}, "maxLength",
                                    "(the whole schema)"),
    "deep in a definition": ({"$defs": {"t": {"type": "array", "items": INTEGER, "maxContains": 1}},
                              "$ref": "#/$defs/t"}, "maxContains", "/$defs/t"),
}


def accepts(schema: dict, value) -> bool:
    grammar = xgrammar.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False)  # as the server compiles
    return _is_grammar_accept_string(grammar, json.dumps(value))


@pytest.mark.parametrize("case", list(ENFORCED))
def test_an_accepted_keyword_is_enforced_by_the_grammar(case):
    schema, allowed, forbidden = ENFORCED[case]
    assert unsupported_keyword(schema) is None
    assert accepts(schema, allowed)
    assert not accepts(schema, forbidden)


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_keyword_the_grammar_would_drop_is_refused_naming_it(case):
    schema, keyword, where = REFUSED[case]
    with pytest.raises(UnsupportedSchemaKeyword) as caught:
        refuse_unsupported(schema, "response_format", "response_format")
    error = caught.value
    assert (error.http_status, error.code, error.param, error.keyword) == (400, "unsupported_schema_keyword",
                                                                          "response_format", keyword)
    assert f"{keyword!r} at {where}" in error.message


def test_the_keywords_refused_are_those_the_grammar_drops():
    """Each refused keyword, compiled anyway, leaves a value it forbids allowed: the refusal is not overcautious."""
    dropped = {"uniqueItems": ({**INTEGERS, "uniqueItems": True}, [1, 1]),
               "maxLength beside a pattern": ({**STRING, "pattern": "^[a-z]+$", "maxLength": 2}, "abc"),
               "maxLength without a type": ({"maxLength": 2}, "abc"),
               "number multipleOf": ({**NUMBER, "multipleOf": 0.5}, 1.3),
               "a bound beside anyOf": ({"anyOf": [STRING, INTEGER], "maxLength": 2}, "abc"),
               "allOf of two": ({"allOf": [INTEGER, {"maximum": 3}]}, 4)}
    for case, (schema, forbidden) in dropped.items():
        assert unsupported_keyword(schema) is not None, case
        assert accepts(schema, forbidden), case
