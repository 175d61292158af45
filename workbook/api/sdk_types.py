"""The SDK's own types as checks: what workbook/api/contract.py judges requests and responses by.

Each check is pydantic-core's validator of an SDK type (`MessageCreateParams`, `Message`,
`ErrorResponse`, `RawMessageStreamEvent`), made from the type's own core schema, tightened as below.
Building that schema from the SDK's types is most of what a replay costs beyond the SDK's own work, so
it is also generated into the package as committed data, one JSON file per type in SCHEMAS:

    python -m workbook.api.sdk_types --write      # after upgrading the SDK or pydantic
    python -m workbook.api.sdk_types --check      # whether they are what the installed SDK gives

A check is made from the committed schema when it was generated from the SDK and pydantic installed
here, and built in this process from the installed types otherwise: upgrade the SDK and the contract
follows it, with no code change. tests/api/test_sdk_types.py fails, naming the command, when the
committed schemas differ from what the installed SDK gives. (JSON rather than a Python literal: as
fast to load as a literal's cached bytecode, and needing none: docs/benchmarks.md §1.)

The SDK's types describe what its users may pass; the API is stricter, and so are the checks:
- a request's objects are closed (the API answers "Extra inputs are not permitted"); a response's stay
  open, as the SDK reads past new fields;
- nothing is coerced (strict mode: "5" is not an integer; where pydantic keeps a lax and a strict
  form, the strict one);
- where the SDK says `Iterable`, JSON holds an array: an object there is refused, not read for its keys;
- a union of blocks is picked by its `type` (or a message by its `role`), as the API reads it, rather
  than tried member by member: the same verdict, at a tenth of the cost.
A check reads Python values (`validate_python`), so only what that reads is kept: a value's Python form
(not its JSON form), a typed dict's name (not its class), and no serializer or JSON-schema hook. The
few classes and functions left (`typing.Sequence`, pydantic's sequence validator, ...) are written as
their import names and looked up when the schema loads. No rule lives here: only the types.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
import sys
from pathlib import Path

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
SCHEMAS = Path(__file__).with_name("sdk_schemas")  # the committed schemas: SCHEMAS/<name>.json
COMMAND = "python -m workbook.api.sdk_types --write"
UNREAD = ("metadata", "serialization")  # read by pydantic's JSON schema and serializer, never by a validator
IMPORT = "import"  # {"import": "module:qualname"}: a class or function in a committed schema
# The only names a committed schema may import: anything else in a file is never imported, as if
# missing (a new SDK that needs another name fails `--write`, which says to add it here, on review).
IMPORTABLE = frozenset(
    {
        "os:PathLike",
        "typing:IO",
        "typing:Sequence",
        "pydantic._internal._validators:sequence_validator",
        "workbook.api.sdk_types:_type_or_none",
    }
)


@functools.cache
def validator(name: str):
    """The check for one of TYPES: a pydantic_core.SchemaValidator (`.validate_python(value)`)."""
    import pydantic_core

    return pydantic_core.SchemaValidator(_checked(name))


@functools.cache
def message_validator(name: str):
    """The check for one message of a request type ("request" or "beta_request"): a request fits its
    type when its other fields do (with `messages: []`) and each of its messages does."""
    import pydantic_core

    definitions, root = _root(_checked(name))
    items = root["fields"]["messages"]["schema"]["items_schema"]
    return pydantic_core.SchemaValidator({"type": "definitions", "schema": items, "definitions": definitions})


@functools.cache
def _checked(name: str) -> dict:
    """The tightened schema of `name`: the committed one if generated from what is installed, else built."""
    missing: list = []  # import names not found: only an error if the versions are those installed
    text = (SCHEMAS / f"{name}.json").read_text(encoding="utf-8")
    committed = json.loads(text, object_hook=functools.partial(_imported, missing=missing))
    if committed["generated_from"] != installed():
        return _tightened(name)
    if missing:
        raise ImportError(f"{', '.join(missing)} (named by {name}.json): run `{COMMAND}`")
    return committed["schema"]


def installed() -> dict:
    """The versions a core schema depends on: the SDK's (its types), pydantic's (it builds the schema) and
    pydantic-core's (it reads it)."""
    import anthropic
    import pydantic
    import pydantic_core

    return {
        "anthropic": anthropic.__version__,
        "pydantic": pydantic.VERSION,
        "pydantic_core": pydantic_core.__version__,
    }


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


PICKERS = {"type": _type_or_none, "role": _role_or_none}  # module-level: a committed schema names them


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


# -- the committed schemas: written by `python -m workbook.api.sdk_types --write`, read by _checked ---------


def portable(schema):
    """A tightened schema as plain data: each class or function as {"import": "module:qualname"}, and each
    `ref` without the `:<id>` pydantic gives it (an address, different in every process)."""
    names: dict = {}

    def ref(value: str) -> str:
        if value not in names:
            base, n, taken = re.sub(r":\d+$", "", value), 1, set(names.values())
            while (f"{base}:{n}" if n > 1 else base) in taken:
                n += 1
            names[value] = f"{base}:{n}" if n > 1 else base
        return names[value]

    def walk(node):
        if isinstance(node, dict):
            if set(node) == {IMPORT}:
                raise ValueError(f"a schema node reads as an import name: {node}")
            node = {k: ref(v) if k in ("ref", "schema_ref") else walk(v) for k, v in node.items()}
            if node.get("type") == "literal":  # a set: `typing` may hand one module's order to another
                node["expected"] = sorted(node["expected"], key=lambda value: (type(value).__name__, value))
            if node.get("type") == "tagged-union":  # so is a tag's lookup, which those orders also set
                node["choices"] = dict(sorted(node["choices"].items()))
            return node
        if isinstance(node, list):
            return [walk(value) for value in node]
        if node is None or isinstance(node, str | bool | int | float):
            return node
        name = f"{getattr(node, '__module__', '?')}:{getattr(node, '__qualname__', '?')}"
        if name not in IMPORTABLE:
            raise ValueError(f"{name} in a schema is not in sdk_types.IMPORTABLE: add it there, after review")
        if _lookup(name) is not node:
            raise ValueError(f"{node!r} in a schema cannot be named for import")
        return {IMPORT: name}

    return walk(schema)


def _imported(node: dict, missing: list):
    """json.loads' object_hook for a committed schema: an {"import": "module:qualname"} as what it names
    (left as it is, and its name added to `missing`, when there is no such thing)."""
    if len(node) != 1 or IMPORT not in node:
        return node
    found = _lookup(node[IMPORT])
    if found is None:
        missing.append(node[IMPORT])
    return node if found is None else found


def _lookup(name: str):
    if name not in IMPORTABLE:
        return None
    module, _, qualname = name.partition(":")
    try:
        found = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return found


def sources() -> dict[str, str]:
    """The committed files, as generated from the SDK installed here: {file name: JSON text}."""
    files = {}
    for name, (module, type_name, _) in TYPES.items():
        schema = portable(_tightened(name))
        head = {
            "note": f"{module}.{type_name}, tightened (workbook/api/sdk_types.py). Written by `{COMMAND}`.",
            "generated_from": installed(),
        }
        files[f"{name}.json"] = text = _json(head, schema)
        if json.loads(text)["schema"] != schema:  # JSON has no tuple, no number key
            raise ValueError(f"{name}: its schema does not survive JSON")
    return files


def _json(head: dict, schema: dict) -> str:
    """The file: its head, then the schema, a definition to a line (so that an SDK upgrade's diff reads)."""
    dump = functools.partial(json.dumps, ensure_ascii=False, allow_nan=False)
    lines = [f"  {dump(key)}: {dump(value)}," for key, value in head.items()]
    if schema.get("type") != "definitions":
        return "{\n" + "\n".join(lines) + f'\n  "schema": {dump(schema)}\n}}\n'
    rest = [f"    {dump(key)}: {dump(value)}," for key, value in schema.items() if key != "definitions"]
    definitions = ",\n".join(f"      {dump(d)}" for d in schema["definitions"])
    inner = "\n".join(rest) + '\n    "definitions": [\n' + definitions + "\n    ]"
    return "{\n" + "\n".join(lines) + '\n  "schema": {\n' + inner + "\n  }\n}\n"


def write() -> list[str]:
    """Write SCHEMAS from the SDK installed here; the names of the files written."""
    from workbook.files import write_atomic

    files = sources()
    for name, text in files.items():
        write_atomic(SCHEMAS / name, text)
    return sorted(files)


def committed_differences(folder: Path = SCHEMAS) -> list[str]:
    """How the committed schemas (in `folder`) differ from what `--write` would write: empty when they do
    not. Ask in a fresh process, as `--check` does: pydantic shapes a model's schema by what the process
    built before (the same checks, another layout of its definitions)."""
    found = []
    for name, text in sources().items():
        if not (folder / name).is_file() or (folder / name).read_text(encoding="utf-8") != text:
            found.append(f"{name} is not what {installed()} gives")
    return found


def main(argv: list[str]) -> int:
    """`--write` the committed schemas from the SDK installed here, or `--check` that they are its."""
    if argv == ["--write"]:
        print(f"wrote workbook/api/sdk_schemas/: {', '.join(write())} (from {installed()})")
        return 0
    if argv == ["--check"]:
        found = committed_differences()
        for line in found:
            print(f"workbook/api/sdk_schemas/{line}: run `{COMMAND}`", file=sys.stderr)
        return 1 if found else 0
    print(f"usage: {COMMAND} | --check   (workbook/api/sdk_schemas/ from the installed SDK)", file=sys.stderr)
    return 2


if __name__ == "__main__":  # run as the package's module, so that a schema names its functions by it
    from workbook.api import sdk_types

    sys.exit(sdk_types.main(sys.argv[1:]))
