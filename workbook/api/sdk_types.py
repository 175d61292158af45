"""The SDK's own types as checks: what workbook/api/contract.py judges requests and responses by.

Each check is pydantic-core's validator of an SDK type (`MessageCreateParams`, `Message`,
`ErrorResponse`, `RawMessageStreamEvent`), made in this process from the installed type's own core
schema, tightened as below: upgrade the SDK and the contract follows it, with no code change and nothing
to regenerate. (Building those a step's replay needs costs it 60-85 ms once, about 6 % of its CPU, most
of the rest being the SDK's own import: `python -m bench.contract_cost`, docs/benchmarks.md.)

The SDK's types describe what its users may pass; the API is stricter, and so are the checks:
- a request's objects are closed (the API answers "Extra inputs are not permitted"); a response's stay
  open, as the SDK reads past new fields;
- nothing is coerced (strict mode: "5" is not an integer; where pydantic keeps a lax and a strict
  form, the strict one);
- where the SDK says `Iterable`, JSON holds an array: an object there is refused, not read for its keys;
- a list is judged up to its first bad item (`fail_fast`): the verdict is the same, and its cost stays
  that of one error, however many items would fail after it;
- a union of blocks is picked by its `type` (or a message by its `role`), as the API reads it, rather
  than tried member by member: the same verdict, at a tenth of the cost.
No rule lives here: only the types.
"""

from __future__ import annotations

import functools
import importlib

TYPES = {  # name -> (module, type, closed): the SDK type each check is built from
    "request": ("anthropic.types.message_create_params", "MessageCreateParamsNonStreaming", True),
    "beta_request": ("anthropic.types.beta.message_create_params", "MessageCreateParamsNonStreaming", True),
    "message": ("anthropic.types", "Message", False),
    "error": ("anthropic.types", "ErrorResponse", False),
    "event": ("anthropic.types", "RawMessageStreamEvent", False),
}
TAGS = ("type", "role")  # the fields that pick a member of a union, as the API reads them
STRICT = {
    "str",
    "int",
    "float",
    "bool",
    "list",
    "dict",
    "typed-dict",
    "model-fields",
    "union",
    "tagged-union",
}
UNREAD = ("metadata", "serialization")  # read by pydantic's JSON schema and serializer, never by a validator


@functools.cache
def validator(name: str):
    """The check for one of TYPES: a pydantic_core.SchemaValidator (`.validate_python(value)`)."""
    import pydantic_core

    return pydantic_core.SchemaValidator(_tightened(name))


@functools.cache
def message_validator(name: str):
    """The check for one message of a request type ("request" or "beta_request"): a request fits its
    type when its other fields do (with `messages: []`) and each of its messages does."""
    import pydantic_core

    definitions, root = _root(_tightened(name))
    items = root["fields"]["messages"]["schema"]["items_schema"]
    return pydantic_core.SchemaValidator({"type": "definitions", "schema": items, "definitions": definitions})


@functools.cache
def _tightened(name: str) -> dict:
    closed = TYPES[name][2]
    tightened = Tightened(_core_schema(name), closed).schema
    if closed:  # the params say `stream: false` (the non-streaming form); the API takes either
        _root(tightened)[1]["fields"]["stream"]["schema"] = {"type": "bool", "strict": True}
    return tightened


def _root(schema: dict) -> tuple[list, dict]:
    """A request type's definitions, and its own typed-dict among them."""
    definitions = schema.get("definitions", []) if schema["type"] == "definitions" else []
    root = schema["schema"] if schema["type"] == "definitions" else schema
    if root["type"] == "definition-ref":
        root = next(d for d in definitions if d.get("ref") == root["schema_ref"])
    return definitions, root


@functools.cache
def schema(name: str) -> dict:
    """The JSON schema of one of TYPES, closed as its check is: only built to explain a failure in words."""
    import pydantic

    built = pydantic.TypeAdapter(_sdk_type(name)).json_schema()
    if TYPES[name][2]:
        _close(built)
        built["properties"]["stream"] = {"type": "boolean"}  # MessageCreateParams: either form
    return built


def _sdk_type(name: str):
    module, type_name, _ = TYPES[name]
    return getattr(importlib.import_module(module), type_name)


def _core_schema(name: str) -> dict:
    import pydantic

    adapter = pydantic.TypeAdapter(_sdk_type(name))
    if not isinstance(adapter.core_schema, dict):  # the SDK's models defer building it to first use
        adapter.rebuild(force=True)
    return adapter.core_schema


class Tightened:
    """A core schema made as strict as the API (see the module's docstring), as a new tree."""

    def __init__(self, schema: dict, closed: bool):
        self.closed, self.definitions = closed, {}
        self._collect(schema)
        self.schema = self._walk(schema)

    def _collect(self, node) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("ref"), str):
                self.definitions[node["ref"]] = node
            for value in node.values():
                self._collect(value)
        elif isinstance(node, list):
            for value in node:
                self._collect(value)

    def _walk(self, node):
        if isinstance(node, list):
            return [self._walk(value) for value in node]
        if not isinstance(node, dict):
            return node
        kind = node.get("type") if isinstance(node.get("type"), str) else None
        if kind in ("json-or-python", "lax-or-strict"):  # the Python form; the strict one
            chosen = node["python_schema" if kind == "json-or-python" else "strict_schema"]
            return self._walk(chosen | ({"ref": node["ref"]} if "ref" in node else {}))
        if kind:
            node = {key: value for key, value in node.items() if key not in UNREAD}
        if kind == "typed-dict" and "cls" in node:  # its class only names it in an error's location
            node = {key: value for key, value in node.items() if key != "cls"} | {
                "cls_name": node["cls"].__name__
            }
        if kind in ("typed-dict", "model-fields"):  # `fields` is a dict of names, not a schema
            fields = {key: self._walk(field) for key, field in node["fields"].items()}
            node = {key: self._walk(value) for key, value in node.items() if key != "fields"} | {
                "fields": fields
            }
            open_ = "extras_schema" in node or not self.closed
            node["extra_behavior"] = "allow" if open_ else "forbid"
        else:
            node = {key: self._walk(value) for key, value in node.items()}
        if kind == "model":  # a response model: checked as the dict it arrives as
            return node["schema"] | ({"ref": node["ref"]} if "ref" in node else {})
        if kind == "generator":  # the SDK's Iterable: an array in JSON
            node["type"] = kind = "list"
        if kind in STRICT:
            node["strict"] = True
        if kind == "list":  # stop at the first bad item: a list of 10 million bad blocks has one error
            node["fail_fast"] = True
        if kind == "list":
            node["fail_fast"] = True
        if kind == "union":
            return self._tagged(node) or node
        return node

    def _tagged(self, union: dict) -> dict | None:
        """The union as a tagged union on `type` (or `role`) when every member has that tag; else None."""
        members = self._members(union["choices"])
        for tag in TAGS:
            by_tag: dict = {}
            for member in members:
                found = self._tag(member, tag)
                if found is None:
                    break
                values, optional = found
                for value in [*values, *([""] if optional else [])]:
                    by_tag.setdefault(value, []).append(member)
            else:
                if len(by_tag) < 2:
                    continue
                choices = {
                    value: same[0]
                    if len(same) == 1
                    else {"type": "union", "choices": same, "mode": "left_to_right"}
                    for value, same in by_tag.items()
                }
                pick = PICKERS[tag] if "" in by_tag else tag  # "": a member may omit it
                kept = {"ref": union["ref"]} if "ref" in union else {}
                return {
                    "type": "tagged-union",
                    "choices": choices,
                    "discriminator": pick,
                    "strict": True,
                } | kept
        return None

    def _members(self, choices: list) -> list:
        """A union's members, a nested union's spread into it."""
        members = []
        for choice in choices:
            choice = choice[0] if isinstance(choice, list | tuple) else choice
            if choice.get("type") == "union":
                members += self._members(choice["choices"])
            elif choice.get("type") == "tagged-union":
                members += list(choice["choices"].values())
            else:
                members.append(choice)
        return members

    def _tag(self, member: dict, tag: str) -> tuple[list, bool] | None:
        """(the values of `tag` this member takes, whether it may omit it), or None without such a tag."""
        while member.get("type") in ("definition-ref", "model"):  # a model is read as its fields
            member = self.definitions[member["schema_ref"]] if "schema_ref" in member else member["schema"]
        field = (
            member.get("fields", {}).get(tag)
            if member.get("type") in ("typed-dict", "model-fields")
            else None
        )
        if not field:
            return None
        schema, optional = field["schema"], not field.get("required", True)
        while schema.get("type") in ("nullable", "default"):
            schema, optional = schema["schema"], True
        return (list(schema["expected"]), optional) if schema.get("type") == "literal" else None


def _type_or_none(value):
    """A tagged union's tag when a member may omit it: "" for none; None (refused) for a non-object."""
    return _tag_or_none(value, "type")


def _role_or_none(value):
    return _tag_or_none(value, "role")


def _tag_or_none(value, tag: str):
    found = value.get(tag) if isinstance(value, dict) else 0
    return "" if found is None else found if isinstance(found, str) else None


PICKERS = {"type": _type_or_none, "role": _role_or_none}


def _close(node) -> None:
    """Every object with named properties refuses any other: `additionalProperties: false`."""
    if isinstance(node, dict):
        if "properties" in node:
            node["additionalProperties"] = False
        for key, value in node.items():
            _close(value) if key != "properties" else [_close(v) for v in value.values()]
    elif isinstance(node, list):
        for value in node:
            _close(value)
