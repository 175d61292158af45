"""The SDK's own types as compiled checks: what workbook/api/contract.py judges requests
and responses by.

`pydantic.TypeAdapter` turns an SDK type (`MessageCreateParams`, `Message`, `ErrorResponse`,
`RawMessageStreamEvent`) into a JSON schema; every object in a request schema is closed, as the API
refuses unknown fields ("Extra inputs are not permitted"); fastjsonschema compiles it. Compiling takes
seconds, so the compiled code is cached on disk, keyed by the SDK's version: upgrade the SDK and the
contract follows it, with no code change. No rule lives here: only the types, compiled and cached.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import marshal

SHAPES_VERSION = 2  # bump when the way schemas are built below changes: the cache is then rebuilt
SHAPES = {  # name -> (module, type, closed): the SDK type each check is built from
    "request": ("anthropic.types.message_create_params", "MessageCreateParamsNonStreaming", True),
    "beta_request": ("anthropic.types.beta.message_create_params", "MessageCreateParamsNonStreaming", True),
    "message": ("anthropic.types", "Message", False),  # responses stay open: the SDK reads past new fields
    "error": ("anthropic.types", "ErrorResponse", False),
    "event": ("anthropic.types", "RawMessageStreamEvent", False),
}


_VALIDATORS: dict = {}  # name -> compiled validate function
_SCHEMAS: dict = {}  # name -> schema, built only to explain a failure


def schema(name: str) -> dict:
    """The JSON schema of one of SHAPES, from the SDK's type (objects closed where the API closes them).

    Only needed to explain a failure in words; cached on disk beside the compiled check."""
    if name not in _SCHEMAS:
        try:
            _SCHEMAS[name] = json.loads(_read_cache(cache_file(name, "json")))
        except (OSError, ValueError):
            _SCHEMAS[name] = _built_schema(name)
            write_cache(cache_file(name, "json"), json.dumps(_SCHEMAS[name]).encode())
    return _SCHEMAS[name]


def _built_schema(name: str) -> dict:
    import pydantic  # only here: once cached, neither a check nor its explanation needs pydantic

    module, type_name, closed = SHAPES[name]
    built = pydantic.TypeAdapter(getattr(importlib.import_module(module), type_name)).json_schema()
    if closed:
        _close(built)
        built["properties"]["stream"] = {"type": "boolean"}  # MessageCreateParams: either form
    return built


def write_cache(path, data: bytes) -> None:
    from workbook.files import write_atomic

    try:
        write_atomic(path, data)
    except Exception:  # a read-only temp folder: still correct, only slower next time
        pass


def _close(node) -> None:
    """Every object with named properties refuses any other: `additionalProperties: false`.

    The SDK's response models (TextBlock, ToolUseBlock...) may be sent back as params, and they allow
    extra fields for the SDK's sake; the API does not, so they are closed too."""
    if isinstance(node, dict):
        if "properties" in node:
            node["additionalProperties"] = False
        for key, value in node.items():
            _close(value) if key != "properties" else [_close(v) for v in value.values()]
    elif isinstance(node, list):
        for value in node:
            _close(value)


def validator(name: str) -> dict:
    """The compiled check for one of SHAPES (its module's namespace: `validate`, and one function per
    definition): from memory, else the disk cache, else compiled and cached."""
    if name not in _VALIDATORS:
        _VALIDATORS[name] = _cached(name) or _compile_and_cache(name)
    return _VALIDATORS[name]


def cache_file(name: str, kind: str = "bin"):
    import anthropic
    import fastjsonschema

    python = importlib.util.MAGIC_NUMBER.hex()  # marshal's format is the interpreter's own
    code = _source_digest()  # the code that builds the checks: another checkout's are not these
    key = f"{name}-{anthropic.__version__}-{fastjsonschema.VERSION}-{python}-{SHAPES_VERSION}-{code}"
    return _cache_dir() / f"{key}.{kind}"


def _source_digest() -> str:
    from pathlib import Path

    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]


def _read_cache(path) -> bytes:
    from workbook.scratch import read_private  # no link followed, no file another user could write

    return read_private(path)


def _cache_dir():
    """The user's cache folder (it outlives a temp folder, as a replay's cost must) if no one else can
    change it, since what is cached there is run; else the scratch root (workbook/scratch.py)."""
    from workbook.scratch import cache_folder

    return cache_folder("agent-loop-workbook")


def _cached(name: str):
    """The cached validator, or None when there is none or it is damaged (it is then rebuilt)."""
    try:
        data = _read_cache(cache_file(name))
        digest, code = data[:32], data[32:]
        if hashlib.sha256(code).digest() != digest:
            return None
        namespace: dict = {}
        exec(marshal.loads(code), namespace)  # noqa: S102 — our own compiled schema, checked by its digest
        return namespace if callable(namespace.get("validate")) else None
    except Exception:  # missing, truncated, another Python's: compile it afresh
        return None


def _compile_and_cache(name: str):
    import fastjsonschema

    source = fastjsonschema.compile_to_code(schema(name), use_default=False)  # never fill in a request
    code = compile(source, f"<contract {name}>", "exec")
    data = marshal.dumps(code)
    write_cache(cache_file(name), hashlib.sha256(data).digest() + data)
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102
    return namespace
