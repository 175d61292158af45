"""Secrets stay in this process: what counts as one, and scrubbing them from all that is written or shown.

A secret is the value of any environment variable whose name looks like a key, token, secret or password
(ANTHROPIC_API_KEY, GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY, DB_PASSWORD...), each line of a *_HEADERS
variable, and the user:password and query of a URL in any variable. It is scrubbed in every form a tool
or a model could hand it on in: as it is, JSON-escaped, URL-decoded, in base64 (at each of the three
alignments it can take inside a longer base64 text, and URL-safe) and in hex; and when the model splits
it across adjacent text blocks, or the API streams it across deltas. Tools never get one: their
environment is an allowlist (tool_environment).
"""

from __future__ import annotations

import base64
import json
import os
import re
from functools import lru_cache
from urllib.parse import unquote, urlsplit

MIN_SECRET_CHARS = 8  # shorter values (tests' "k") are not keys, and scrubbing them would mangle text
REMOVED = "[secret removed]"

USERINFO = re.compile(r"(?<=://)[^/?#@\s:]+:[^/?#@\s]+@")  # user:password@ in a URL (not a bare git@)
TOKEN_USERINFO = re.compile(r"(?<=://)[\w.~%-]{16,}@")  # a URL whose user name is a token: http://TOKEN@host
KEY_SHAPED = re.compile(r"sk-ant-[\w-]{8,}")  # what an Anthropic key looks like, whoever's it is

# A variable is a secret when a word of its name (split at _) is one of these, or ends in one of the first
# five (APIKEY, SECRETKEY, ACCESSTOKEN): ANTHROPIC_API_KEY, GITHUB_TOKEN, DB_PASS, OTEL_EXPORTER_OTLP_HEADERS.
SECRET_ENDINGS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD")
SECRET_WORDS = (*SECRET_ENDINGS, "PASS", "PASSPHRASE", "AUTH", "CREDENTIAL", "CREDENTIALS", "COOKIE", "PAT")
SECRET_WORDS += ("HEADERS", "PRIVATE", "SESSION", "SIGNATURE")

# What a tool's command gets from this process's environment: what programs need to find each other
# and to speak the user's language, nothing that could hold a credential.
TOOL_ENVIRONMENT = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "COLORTERM", "NO_COLOR",
    "TZ", "TMPDIR", "TEMP", "TMP", "PWD", "COLUMNS", "LINES", "VIRTUAL_ENV", "PYTHONPATH",
    "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONHASHSEED",
)  # fmt: skip
TOOL_ENVIRONMENT_PREFIXES = ("LC_",)


@lru_cache(maxsize=1024)  # asked of every variable's name, every time a line is scrubbed
def looks_secret(name: str) -> bool:
    """Whether a variable's name says its value is a credential (see SECRET_WORDS)."""
    words = name.upper().split("_")
    return any(word in SECRET_WORDS or word.endswith(SECRET_ENDINGS) for word in words)


def credential_values(environ=None) -> list[str]:
    """The secrets this process holds (see the module's docstring), longest first, so that a key
    containing another is scrubbed whole."""
    return list(_credentials(_candidates(os.environ if environ is None else environ)))


def _candidates(environ) -> tuple:
    """(name, value) of each variable that may hold a secret: its name says so, or its value is a URL.
    This process's own environment is read as the bytes it holds: only the candidates are decoded (every
    printed line asks, and decoding all of it costs more than the line)."""
    raw = getattr(environ, "_data", None) if environ is os.environ and os.name == "posix" else None
    if raw is None:
        found = [(name, environ[name]) for name in environ if looks_secret(name) or "://" in environ[name]]
    else:
        found = [
            (os.fsdecode(name), os.fsdecode(value))
            for name, value in raw.items()
            if b"://" in value or looks_secret(os.fsdecode(name))
        ]
    return tuple(sorted(found))


@lru_cache(maxsize=8)  # every trace and audit line asks: worked out once per set of variables
def _credentials(variables: tuple) -> tuple[str, ...]:
    found = set()
    for name, value in variables:
        if "://" in value:  # a URL's user:password and its query may each hold a key
            try:
                parts = urlsplit(value.strip())
                username, password = parts.username, parts.password
            except ValueError:
                parts, username, password = None, None, None
            if parts and (password or username and "@" in value or parts.query):
                found.update(p for p in (value, username, password, parts.query) if p)
                found.update(m.group(0).rstrip("@") for m in USERINFO.finditer(value))
        if looks_secret(name):
            found.add(value)
            if name.upper().endswith("HEADERS"):  # `Name: value` lines: each value alone is a secret too
                found.update(line.partition(":")[2].strip() for line in value.splitlines())
    found |= {unquote(s) for s in found}
    return tuple(sorted((s for s in found if len(s) >= MIN_SECRET_CHARS), key=len, reverse=True))


@lru_cache(maxsize=8)
def _forms(secrets: tuple[str, ...]) -> tuple[str, ...]:
    """Every form of each secret to look for: as it is, JSON-escaped, base64, hex. Longest first."""
    forms = set()
    for secret in secrets:
        forms |= {secret, json.dumps(secret, ensure_ascii=False)[1:-1], *encoded(secret)}
    return tuple(sorted((f for f in forms if len(f) >= MIN_SECRET_CHARS), key=len, reverse=True))


URL_SAFE = str.maketrans("+/", "-_")


def encoded(secret: str) -> set[str]:
    """A secret as base64 and hex show it inside a longer text that holds it. In base64 each 3 bytes
    become 4 characters, so the secret's characters depend on where it starts, modulo 3: for each
    start, the characters made of its bits alone (the first and last are shared with its neighbours)."""
    raw = secret.encode("utf-8", "surrogatepass")
    forms = {raw.hex(), raw.hex().upper()}
    for shift in range(3):
        text = base64.b64encode(b"\0" * shift + raw).decode()
        core = text[(8 * shift + 5) // 6 : 8 * (shift + len(raw)) // 6]
        forms |= {core, core.translate(URL_SAFE)}
    return forms


def forms_of(secrets: list[str] | None) -> tuple[str, ...]:
    return _forms(tuple(credential_values() if secrets is None else secrets))


def scrub_secrets(value, secrets: list[str] | None = None):
    """`value` (a string, or JSON-like lists and dicts of them) with every secret replaced.

    The secrets are credential_values() unless given, each in every form (see encoded); a URL's
    user:password@ is removed wherever it appears; a secret split across adjacent text blocks is
    removed from each. Used on everything written to disk: recordings, traces, saved conversations,
    audit logs."""
    return _scrub(value, forms_of(secrets))


def _scrub(value, forms: tuple[str, ...]):
    if isinstance(value, str):
        return _scrub_text(value, forms)
    if isinstance(value, dict):
        return {_scrub(k, forms): _scrub(v, forms) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(item, forms) for item in _joined_blocks(list(value), forms)]
    return value


def _scrub_text(text: str, forms: tuple[str, ...]) -> str:
    for form in forms:
        if form in text:
            text = text.replace(form, REMOVED)
    return _without_userinfo(text) if "@" in text else text


def _is_text_block(item) -> bool:
    return isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str)


def _joined_blocks(items: list, forms: tuple[str, ...]) -> list:
    """Adjacent text blocks are read as one text: a secret split across them is removed from each."""
    start = 0
    while start < len(items):
        end = start
        while end < len(items) and _is_text_block(items[end]):
            end += 1
        if end - start >= 2:
            items[start:end] = _masked(items[start:end], forms)
        start = max(end, start + 1)
    return items


def _masked(blocks: list[dict], forms: tuple[str, ...]) -> list[dict]:
    """The blocks with every character of a secret found in their joined text replaced (each block
    keeps its place, and some text: a block is never left empty)."""
    joined = "".join(block["text"] for block in blocks)
    hidden = bytearray(len(joined))  # 1 where a character belongs to a secret
    for form in forms:
        at = joined.find(form)
        while at != -1:
            hidden[at : at + len(form)] = b"\1" * len(form)
            at = joined.find(form, at + 1)
    if not any(hidden):
        return blocks
    out, offset = [], 0
    for block in blocks:
        text, marks = block["text"], hidden[offset : offset + len(block["text"])]
        offset += len(text)
        pieces = re.split(r"(\x01+)", marks.decode("latin-1"))
        kept, at = [], 0
        for piece in pieces:
            kept.append(REMOVED if piece.startswith("\x01") else text[at : at + len(piece)])
            at += len(piece)
        out.append(block | {"text": "".join(kept)})
    return out


def dumps(value, **options) -> str:
    """`value` as JSON text (json.dumps' options) with every secret removed: split ones first (from
    the value's blocks), then whole ones in every form (from the text)."""
    forms = forms_of(None)
    if forms:
        value = _split_secrets_removed(value, forms)
    return _scrub_json_text(json.dumps(value, **options), forms)


def _split_secrets_removed(value, forms: tuple[str, ...]):
    """Only the lists of text blocks are looked at (the rest of the value is kept as it is)."""
    if isinstance(value, dict):
        return {k: _split_secrets_removed(v, forms) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_split_secrets_removed(v, forms) for v in _joined_blocks(list(value), forms)]
    return value


def _without_userinfo(text: str) -> str:
    """A URL's user:password@, or a token standing alone as its user name, removed."""
    return TOKEN_USERINFO.sub("", USERINFO.sub("", text))


def redact_keys(text: str) -> str:
    """`text` with every secret this process holds and every key-shaped string (sk-ant-...) removed,
    whoever's key it is: for what a stranger sends that is shown or logged (the terminal, the grader's
    report, the classroom server's log and its 404)."""
    text = scrub_secrets(text)
    return KEY_SHAPED.sub("[key removed]", text) if "sk-ant-" in text else text


DELTA_TEXT = {"text_delta": "text", "input_json_delta": "partial_json", "thinking_delta": "thinking"}


def scrub_stream(events: list, secrets: list[str] | None = None) -> list:
    """A recorded stream with every secret removed from what its deltas add up to, still a valid stream.

    The API streams a few tokens per delta, so a key the model echoes is almost always split across
    events, where no single string holds it; it may even run from one text block into the next. Each
    block's deltas are joined, adjacent text blocks are read together, and where a secret was found,
    a block's first delta carries its whole scrubbed text and the others are dropped.
    """
    forms = forms_of(secrets)
    deltas: dict[tuple, list[int]] = {}  # (block index, delta field) -> positions of its delta events
    for n, event in enumerate(events):
        data = event.get("data") if isinstance(event, dict) else None
        delta = data.get("delta") if isinstance(data, dict) else None
        field = DELTA_TEXT.get(delta.get("type")) if isinstance(delta, dict) else None
        if field and isinstance(delta.get(field), str):
            deltas.setdefault((data.get("index"), field), []).append(n)
    wholes = {
        key: "".join(events[n]["data"]["delta"][key[1]] for n in positions)
        for key, positions in deltas.items()
    }
    cleaned = _texts_read_together(wholes, forms)
    dropped, rewritten = set(), {}
    for (index, field), positions in deltas.items():
        whole = wholes[index, field]
        if field == "partial_json":
            clean = _scrub_json_text(whole, forms)
        else:
            clean = _scrub_text(cleaned.get((index, field), whole), forms)
        if clean != whole:
            first = events[positions[0]]
            data = first["data"] | {"delta": first["data"]["delta"] | {field: clean}}
            rewritten[positions[0]] = first | {"data": data}
            dropped.update(positions[1:])
    if not rewritten:
        return events
    return [rewritten.get(n, event) for n, event in enumerate(events) if n not in dropped]


def _texts_read_together(wholes: dict, forms: tuple[str, ...]) -> dict:
    """The streamed text blocks (index -> text) with a secret split across adjacent ones removed."""
    indices = sorted(i for i, field in wholes if field == "text" and isinstance(i, int))
    blocks = {i: {"type": "text", "text": wholes[i, "text"]} for i in indices}
    cleaned, run = {}, []
    for i in [*indices, None]:
        if run and (i is None or i != run[-1] + 1):  # a run of adjacent text blocks ends
            for j, block in zip(run, _joined_blocks([blocks[j] for j in run], forms)):
                cleaned[j, "text"] = block["text"]
            run = []
        if i is not None:
            run.append(i)
    return cleaned


def _scrub_json_text(text: str, forms: tuple[str, ...]) -> str:
    for form in forms:
        for shown in {form, json.dumps(form, ensure_ascii=False)[1:-1]}:
            text = text.replace(shown, REMOVED) if shown in text else text
    return _without_userinfo(text) if "@" in text else text


def tool_environment(environ=None) -> dict:
    """The environment a tool runs with: only the variables in TOOL_ENVIRONMENT (and LC_*) of this
    process's. An allowlist, not "all but ANTHROPIC_*": GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY, an ssh
    agent's socket and the next vendor's key stay behind without anyone having to name them."""
    environ = os.environ if environ is None else environ
    return {
        name: value
        for name, value in environ.items()
        if (name in TOOL_ENVIRONMENT or name.startswith(TOOL_ENVIRONMENT_PREFIXES)) and not looks_secret(name)
    }


PR_SET_DUMPABLE = 4  # prctl(2): who may read this process's /proc/PID/environ, mem and fds


def hide_from_tools() -> None:
    """Make this process non-dumpable, so that no program it runs (a tool, a graded loop) reads its
    /proc/PID/environ, where the API key is: not as text, not reversed, rot13'd, or as hex, which is
    what a scrubber of output cannot all catch (red team five: 21 of 22 encodings got past it). The
    kernel then gives /proc/PID/* to root. A tool never had the key in its own environment
    (tool_environment). Linux only; elsewhere a no-op."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


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
