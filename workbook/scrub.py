"""Secrets stay in this process: what counts as one, and scrubbing them from all that is written or shown."""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from urllib.parse import unquote, urlsplit

MIN_SECRET_CHARS = 8  # shorter values (tests' "k") are not keys, and scrubbing them would mangle text


USERINFO = re.compile(r"(?<=://)[^/?#@\s:]+:[^/?#@\s]+@")  # user:password@ in a URL (not a bare git@)


def credential_values(environ=None) -> list[str]:
    """The secrets this process holds: every ANTHROPIC_* value that is a key, token or password,
    and the userinfo of ANTHROPIC_BASE_URL. Longest first, so a key containing another is scrubbed whole."""
    environ = os.environ if environ is None else environ
    return list(_credentials(tuple(sorted((k, v) for k, v in environ.items() if k.startswith("ANTHROPIC_")))))


@lru_cache(maxsize=8)  # every trace and audit line asks: worked out once per set of variables
def _credentials(variables: tuple) -> tuple[str, ...]:
    found = set()
    for name, value in variables:
        if name.endswith("_URL"):  # a URL's user:password and its query may each hold a key
            parts = urlsplit(value)
            if parts.password or parts.query:  # then the whole URL is a secret too, as env prints it
                found.update(p for p in (value, parts.password, parts.query) if p)
                found.update(m.group(0).rstrip("@") for m in USERINFO.finditer(value))
        elif any(word in name for word in ("KEY", "TOKEN", "SECRET", "PASSWORD", "AUTH", "HEADERS")):
            found.add(value)
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
        return USERINFO.sub("", value) if "@" in value else value
    if isinstance(value, dict):
        return {scrub_secrets(k, secrets): scrub_secrets(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_secrets(item, secrets) for item in value]
    return value


def scrub_json(text: str) -> str:
    """JSON text with every secret removed: scrub_secrets for a document already serialized, in one pass
    over the text (each secret also as JSON escapes it). Traces and audit lines are scrubbed this way."""
    for secret in credential_values():
        for form in {secret, json.dumps(secret, ensure_ascii=False)[1:-1]}:
            text = text.replace(form, "[secret removed]") if form in text else text
    return USERINFO.sub("", text) if "@" in text else text


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
        return scrub_secrets(USERINFO.sub("", url.split("?")[0].split("#")[0]))
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{host}{port}{parts.path}"
