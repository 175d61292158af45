"""A shape problem in pydantic's words: where a value first breaks a JSON schema, and what was expected.

The SDK's checks (workbook/api/sdk_types.py) say only whether a value fits; when it does not, this walks
the type's JSON schema to the first place it breaks, so that workbook/api/contract.py can answer as the
API's 400 does (`messages.1.content.0.text: Field required`).
"""

from __future__ import annotations

KINDS = {  # JSON type -> (Python test, pydantic's words)
    "object": (lambda v: isinstance(v, dict), "a valid dictionary"),
    "array": (lambda v: isinstance(v, list), "a valid list"),
    "string": (lambda v: isinstance(v, str), "a valid string"),
    "integer": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a valid integer"),
    "number": (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a valid number"),
    "boolean": (lambda v: isinstance(v, bool), "a valid boolean"),
    "null": (lambda v: v is None, "null"),
}


def _resolve(root: dict, node: dict) -> dict:
    while "$ref" in node:
        node = root["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def explain(root: dict, node: dict, value, path: list):
    """(path, words) of the first place `value` breaks `node`, as pydantic would word it; None if it fits."""
    node = _resolve(root, node)
    if "anyOf" in node:
        return _explain_union(root, node["anyOf"], value, path)
    kind = node.get("type")
    if kind in KINDS and not KINDS[kind][0](value):
        return path, f"Input should be {KINDS[kind][1]}"
    if "const" in node and value != node["const"]:
        return path, f"Input should be {node['const']!r}"
    if "enum" in node and value not in node["enum"]:
        return path, "Input should be " + _either([repr(v) for v in node["enum"]])
    if isinstance(value, dict):
        return _explain_object(root, node, value, path)
    if isinstance(value, list) and "items" in node:
        for i, item in enumerate(value):
            found = explain(root, node["items"], item, path + [i])
            if found:
                return found
    return None


def _explain_object(root: dict, node: dict, value: dict, path: list):
    for key in node.get("required", []):
        if key not in value:
            return path + [key], "Field required"
    properties, extra = node.get("properties", {}), node.get("additionalProperties")
    for key, item in value.items():
        if key in properties:
            found = explain(root, properties[key], item, path + [key])
        elif extra is False:
            found = path + [key], "Extra inputs are not permitted"
        else:
            found = explain(root, extra, item, path + [key]) if isinstance(extra, dict) else None
        if found:
            return found
    return None


def _explain_union(root: dict, options: list, value, path: list):
    """A union: the option the value's tag (`type`, `role`) picks, else the one it fails deepest in."""
    options = [_resolve(root, o) for o in options]
    found = [explain(root, o, value, path) for o in options]
    if None in found:
        return None
    for tag in ("type", "role"):
        tags = [o.get("properties", {}).get(tag, {}).get("const") for o in options]
        if isinstance(value, dict) and tag in value and all(t is not None for t in tags):
            if value[tag] not in tags:
                expected = ", ".join(repr(t) for t in dict.fromkeys(tags))
                return path + [tag], (
                    f"Input tag {value[tag]!r} found using {tag!r} does not match any of the expected "
                    f"tags: {expected}"
                )
            found = [f for f, t in zip(found, tags) if t == value[tag]]
            break
    same_kind = [f for f, o in zip(found, options) if f[0] != path or "type" not in o]
    if same_kind:
        return max(same_kind, key=lambda f: len(f[0]))
    kinds = [KINDS[o["type"]][1] for o in options if o.get("type") in KINDS and o["type"] != "null"]
    return path, "Input should be " + _either(list(dict.fromkeys(kinds)))


def _either(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]
