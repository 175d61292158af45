"""Secrets stay in this process: what counts as one, and scrubbing them from all that is written or shown."""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from urllib.parse import unquote, urlsplit

MIN_SECRET_CHARS = 8  # shorter values (tests' "k") are not keys, and scrubbing them would mangle text


USERINFO = re.compile(r"(?<=://)[^/?#@\s:]+:[^/?#@\s]+@")  # user:password@ in a URL (not a bare git@)
TOKEN_USERINFO = re.compile(r"(?<=://)[\w.~%-]{16,}@")  # a URL whose user name is a token: http://TOKEN@host
KEY_SHAPED = re.compile(r"sk-ant-[\w-]{8,}")  # what an Anthropic key looks like, whoever's it is


def credential_values(environ=None) -> list[str]:
    """The secrets this process holds: every ANTHROPIC_* value that is a key, token or password,
    and the userinfo of ANTHROPIC_BASE_URL. Longest first, so a key containing another is scrubbed whole."""
    environ = os.environ if environ is None else environ
    # Every trace and audit line asks, so only the ANTHROPIC_* values are read (os.environ decodes each).
    variables = tuple(sorted((name, environ[name]) for name in environ if name.startswith("ANTHROPIC_")))
    return list(_credentials(variables))


@lru_cache(maxsize=8)  # every trace and audit line asks: worked out once per set of variables
def _credentials(variables: tuple) -> tuple[str, ...]:
    found = set()
    for name, value in variables:
        if name.endswith("_URL"):  # a URL's user:password and its query may each hold a key
            parts = urlsplit(value)
            if parts.password or parts.query or parts.username:  # then the whole URL is a secret too
                found.update(p for p in (value, parts.username, parts.password, parts.query) if p)
                found.update(m.group(0).rstrip("@") for m in USERINFO.finditer(value))
        elif any(word in name for word in ("KEY", "TOKEN", "SECRET", "PASSWORD", "AUTH", "HEADERS")):
            found.add(value)
            if name.endswith("_HEADERS"):  # `Name: value` lines: each value alone is a secret too
                found.update(line.partition(":")[2].strip() for line in value.splitlines())
    found |= {unquote(s) for s in found}
    return tuple(sorted((s for s in found if len(s) >= MIN_SECRET_CHARS), key=len, reverse=True))


def scrub_secrets(value, secrets: list[str] | None = None):
    """`value` (a string, or JSON-like lists and dicts of them) with every secret replaced.

    The secrets are credential_values() unless given; a URL's user:password@ is removed wherever it
    appears. Used on everything written to disk: recordings, traces, saved conversations, audit logs.
    """
    secrets = credential_values() if secrets is None else secrets
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, "[secret removed]")
        return _without_userinfo(value) if "@" in value else value
    if isinstance(value, dict):
        return {scrub_secrets(k, secrets): scrub_secrets(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_secrets(item, secrets) for item in value]
    return value


def scrub_json(text: str) -> str:
    """JSON text with every secret removed: scrub_secrets for a document already serialized, in one pass
    over the text (each secret also as JSON escapes it). Traces and audit lines are scrubbed this way."""
    return _scrub_json_text(text, credential_values())


def _without_userinfo(text: str) -> str:
    """A URL's user:password@, or a token standing alone as its user name, removed."""
    return TOKEN_USERINFO.sub("", USERINFO.sub("", text))


def redact_keys(text: str) -> str:
    """`text` with every secret this process holds and every key-shaped string (sk-ant-...) removed,
    whoever's key it is: for what a stranger sends that is shown or logged, e.g. a student's `model`
    in the classroom server's log and its 404."""
    text = scrub_secrets(text)
    return KEY_SHAPED.sub("[key removed]", text) if "sk-ant-" in text else text


DELTA_TEXT = {"text_delta": "text", "input_json_delta": "partial_json", "thinking_delta": "thinking"}


def scrub_stream(events: list, secrets: list[str] | None = None) -> list:
    """A recorded stream with every secret removed from what its deltas add up to, still a valid stream.

    The API streams a few tokens per delta, so a key the model echoes is almost always split across
    events, where no single string holds it. Each block's deltas are joined, searched, and where a
    secret was found, its first delta carries the whole scrubbed text and the others are dropped.
    """
    secrets = credential_values() if secrets is None else secrets
    deltas: dict[tuple, list[int]] = {}  # (block index, delta field) -> positions of its delta events
    for n, event in enumerate(events):
        data = event.get("data") if isinstance(event, dict) else None
        delta = data.get("delta") if isinstance(data, dict) else None
        field = DELTA_TEXT.get(delta.get("type")) if isinstance(delta, dict) else None
        if field and isinstance(delta.get(field), str):
            deltas.setdefault((data.get("index"), field), []).append(n)
    dropped, rewritten = set(), {}
    for (_, field), positions in deltas.items():
        whole = "".join(events[n]["data"]["delta"][field] for n in positions)
        clean = _scrub_json_text(whole, secrets) if field == "partial_json" else scrub_secrets(whole, secrets)
        if clean != whole:
            first = events[positions[0]]
            data = first["data"] | {"delta": first["data"]["delta"] | {field: clean}}
            rewritten[positions[0]] = first | {"data": data}
            dropped.update(positions[1:])
    if not rewritten:
        return events
    return [rewritten.get(n, event) for n, event in enumerate(events) if n not in dropped]


def _scrub_json_text(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        for form in {secret, json.dumps(secret, ensure_ascii=False)[1:-1]}:
            text = text.replace(form, "[secret removed]") if form in text else text
    return _without_userinfo(text) if "@" in text else text


def tool_environment(environ=None) -> dict:
    """The environment a tool runs with: this process's, minus every ANTHROPIC_* variable.

    All of them, not a list of names: ANTHROPIC_API_KEY and ANTHROPIC_AUTH_TOKEN are keys,
    ANTHROPIC_BASE_URL may carry user:password@, ANTHROPIC_CUSTOM_HEADERS may carry an auth header,
    and no command in a workspace needs any of them. A denylist of names would miss the next one.
    """
    environ = os.environ if environ is None else environ
    return {name: value for name, value in environ.items() if not name.upper().startswith("ANTHROPIC_")}


def public_endpoint(url: str | None) -> str:
    """An endpoint as a recording or a banner may show it: scheme, host, port and path only."""
    if not url:
        return "https://api.anthropic.com"
    parts = urlsplit(url.strip())
    if not parts.scheme or not parts.hostname:
        return scrub_secrets(_without_userinfo(url.split("?")[0].split("#")[0]))
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{host}{port}{parts.path}"
