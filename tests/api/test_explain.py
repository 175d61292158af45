"""workbook/api/explain.py: where a value first breaks a JSON schema, in pydantic's words. The SDK's own
schemas, through contract.py's 400s, are in test_contract.py; these are small schemas written out."""

from workbook.api.explain import explain

import pytest

TEXT = {
    "type": "object",
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
    "required": ["type", "text"],
    "additionalProperties": False,
}
IMAGE = {
    "type": "object",
    "properties": {"type": {"const": "image"}, "url": {"type": "string"}},
    "required": ["type", "url"],
}
ROOT = {
    "$defs": {"Text": TEXT, "Image": IMAGE},
    "type": "object",
    "properties": {
        "max_tokens": {"type": "integer"},
        "temperature": {"type": "number"},
        "stream": {"type": "boolean"},
        "role": {"enum": ["user", "assistant"]},
        "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#/$defs/Block"}}]},
        "blocks": {
            "type": "array",
            "items": {"anyOf": [{"$ref": "#/$defs/Text"}, {"$ref": "#/$defs/Image"}]},
        },
        "stop": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["max_tokens"],
    "additionalProperties": {"type": "string"},
}
ROOT["$defs"]["Block"] = {"$ref": "#/$defs/Text"}  # a $ref to a $ref is followed to the end


def where(value) -> tuple | None:
    found = explain(ROOT, ROOT, value, [])
    return None if found is None else (".".join(map(str, found[0])), found[1])


def test_a_value_that_fits_has_nothing_to_explain():
    fits = {"max_tokens": 5, "temperature": 1, "stream": True, "role": "user", "content": "hi", "stop": None}
    assert where(fits | {"blocks": [{"type": "text", "text": "a"}, {"type": "image", "url": "u"}]}) is None
    assert where({"max_tokens": 5, "metadata": "any string"}) is None  # additionalProperties: a schema


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({}, ("max_tokens", "Field required")),
        ({"max_tokens": "5"}, ("max_tokens", "Input should be a valid integer")),
        ({"max_tokens": True}, ("max_tokens", "Input should be a valid integer")),  # a bool is no integer
        ({"max_tokens": 1.5}, ("max_tokens", "Input should be a valid integer")),
        ({"max_tokens": 5, "temperature": "hot"}, ("temperature", "Input should be a valid number")),
        ({"max_tokens": 5, "stream": 1}, ("stream", "Input should be a valid boolean")),
        ({"max_tokens": 5, "role": "system"}, ("role", "Input should be 'user' or 'assistant'")),
        ({"max_tokens": 5, "metadata": 7}, ("metadata", "Input should be a valid string")),
        ([], ("", "Input should be a valid dictionary")),
    ],
)
def test_a_value_that_breaks_the_schema_is_named_where_and_how(value, expected):
    assert where(value) == expected


def test_a_block_in_a_list_is_named_by_its_index_and_a_missing_field_by_its_name():
    assert where({"max_tokens": 5, "content": [{"type": "text", "text": "a"}, {"type": "text"}]}) == (
        "content.1.text",
        "Field required",
    )
    assert where({"max_tokens": 5, "content": [{"type": "text", "text": "a", "x": 1}]}) == (
        "content.0.x",
        "Extra inputs are not permitted",
    )


def test_a_union_picks_the_option_the_values_tag_names():
    assert where({"max_tokens": 5, "blocks": [{"type": "image"}]}) == ("blocks.0.url", "Field required")
    assert where({"max_tokens": 5, "blocks": [{"type": "txet", "text": "a"}]}) == (
        "blocks.0.type",
        "Input tag 'txet' found using 'type' does not match any of the expected tags: 'text', 'image'",
    )


def test_a_value_of_no_kind_a_union_takes_names_every_kind_but_null():
    assert where({"max_tokens": 5, "content": 7}) == (
        "content",
        "Input should be a valid string or a valid list",
    )
    assert where({"max_tokens": 5, "stop": 7}) == ("stop", "Input should be a valid string")
