# ruff: noqa: E402
"""replay.py — the plumbing every step shares: build the client, load and check fixtures, replay.

Nothing here is lesson. A step script calls it the same way every time:

    args = replay.make_parser(__doc__, DEFAULT_FIXTURE).parse_args()
    run = replay.start(args, model=MODEL)       # live, replay or record, chosen from args + env
    agent_loop(run.client, [{"role": "user", "content": run.task}], workspace=run.workspace)

Replay is the real `anthropic.Anthropic` client with a mock HTTP transport underneath, so the SDK's
own request building, parsing, typed objects, retries and SSE streaming all run as they would live.
The transport serves the recorded responses in order and compares every request the loop sends
with the recorded one: a loop that breaks the conversation stops at the turn it broke, with a diff.
A loop with its own prompt and tools (the SDK's tool runner, a student's) replays with
`replay_client(..., match="shape")`; server-held threads are served in every mode (threads.py).

Command line (for fixture authors and teachers):
    python replay.py check fixtures/*.json     check fixtures against the format and the API's rules
    python replay.py rebuild FIXTURE           re-run a scripted fixture's script, keep its responses,
                                               store the requests the script sends now
    python replay.py trust FIXTURE             after reading it: let a replay run its recorded commands
                                               unasked (adds its sha256 to fixtures/TRUSTED)
    python replay.py serve FIXTURE [--port N]  classroom replay server (see replay_server.py)
    python replay.py grade [--json] -- CMD     grade any agent loop up the workbook's ladder (see grade.py)
"""

from __future__ import annotations

import atexit
import os
import sys


def _quiet_ctrl_c(kind, value, traceback) -> None:
    """A Ctrl-C that nothing caught (while the SDK loads, say) ends the program in one line, not a
    traceback: exit code 130 as for any interrupted program, after the usual clean-up at exit."""
    if not issubclass(kind, KeyboardInterrupt):
        return sys.__excepthook__(kind, value, traceback)
    print("interrupted", file=sys.stderr, flush=True)
    atexit._run_exitfuncs()
    os._exit(130)


# Set before anything slow is imported (the SDK takes a second or so), so `python replay.py` is
# covered from its first moments, and a step from the moment it imports replay. Hence the file-wide
# exemption from "imports at the top" below.
sys.excepthook = _quiet_ctrl_c

import argparse
import gc
import hashlib
import json
import math
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from itertools import accumulate
from pathlib import Path
from urllib.parse import unquote, urlsplit

import anthropic
import httpx2

from threads import Refusal, Threads

ROOT = Path(__file__).resolve().parent
WORKSPACES = ROOT / "fixtures" / "workspace"
REBUILD_ENV = "WORKBOOK_REBUILD"  # set by `replay.py rebuild`: replay leniently, then store requests
KEPT_RESPONSE_HEADERS = ("content-type", "retry-after", "retry-after-ms", "x-should-retry", "request-id")
FIXTURE_FIELDS = ("script", "scenario", "description", "provenance", "task", "workspace", "exchanges")


# -- errors: each one prints as one line that says what to do -------------------------------------


class WorkbookError(anthropic.AnthropicError):
    """An error meant for the reader: its message is one line saying what happened and what to do.

    It subclasses the SDK's base error so that, raised inside the transport, the SDK passes it
    through untouched instead of wrapping it as a connection error and retrying.
    """


class FixtureError(WorkbookError):
    """A fixture file that cannot be used: not JSON, a missing field, a body that is not a Message."""


class ReplayMismatch(WorkbookError):
    """The loop sent a request that differs from the recorded one, or that the API would reject."""


class ReplayExhausted(WorkbookError):
    """The loop asked for more turns than the fixture holds."""


# -- the Messages API's rules, checked on every request --------------------------------------------


def api_rule_problems(messages: list) -> list[str]:
    """What the real API would reject in this messages list (empty when it is valid)."""
    if not isinstance(messages, list):
        return ["messages must be a list"]
    if not messages:
        return ["messages is empty"]
    shapeless = [i for i, m in enumerate(messages) if not isinstance(m, dict)]
    if shapeless:  # nothing below can read a message that is not an object
        return [f"messages[{i}]: must be an object with role and content" for i in shapeless]
    problems = []
    if messages[0].get("role") != "user":
        problems.append("messages[0] must come from the user")
    for i, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant"):
            problems.append(f"messages[{i}]: role must be user or assistant, not {message.get('role')!r}")
        if i and message.get("role") == messages[i - 1].get("role"):
            problems.append(f"messages[{i}]: two {message.get('role')} messages in a row")
        if message.get("content") in ("", [], None):
            problems.append(f"messages[{i}]: content is empty")
    problems += _tool_pairing_problems(messages)
    return problems


def _tool_pairing_problems(messages: list) -> list[str]:
    """Every tool_use answered once, first thing in the next user message; no orphan tool_result."""
    problems = []
    for i, message in enumerate(messages):
        blocks = _blocks(message)
        asked = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        previous = _blocks(messages[i - 1]) if i else []
        open_ids = {b.get("id") for b in previous if b.get("type") == "tool_use"}
        answered = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        if message.get("role") == "assistant" and asked:
            if i + 1 == len(messages):
                problems.append(f"messages[{i}]: the conversation ends on tool_use without results")
            continue
        for tool_id in answered:
            if tool_id not in open_ids:
                problems.append(
                    f"messages[{i}]: tool_result {tool_id} answers no tool_use in messages[{i - 1}]"
                )
            elif answered.count(tool_id) > 1:
                problems.append(f"messages[{i}]: tool_use {tool_id} answered {answered.count(tool_id)} times")
        for tool_id in sorted(open_ids - set(answered), key=str):
            problems.append(f"messages[{i}]: tool_use {tool_id} from messages[{i - 1}] has no tool_result")
        leading = [b.get("type") == "tool_result" for b in blocks[: len(answered)]]
        if answered and not all(leading):
            problems.append(f"messages[{i}]: tool_result blocks must come before any other content")
    return sorted(set(problems), key=problems.index)


def _blocks(message: dict) -> list[dict]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def check_api_rules(body: dict, where: str) -> None:
    """Raise ReplayMismatch naming the first rule this request body breaks."""
    problems = api_rule_problems(body.get("messages", []))
    if problems:
        raise ReplayMismatch(f"{where}: the API would reject this request — {problems[0]}")


# -- comparing a request with the recorded one -----------------------------------------------------


def normalize_block(block) -> dict:
    """The parts of a content block that the comparison looks at; absent and null fields dropped."""
    if isinstance(block, str):
        return {"type": "text", "text": block}
    block = {k: v for k, v in block.items() if v is not None and k != "cache_control"}
    if block.get("type") == "tool_result":
        block.setdefault("is_error", False)
        content = block.get("content", "")
        if isinstance(content, list) and all(c.get("type") == "text" for c in content):
            block["content"] = "".join(c["text"] for c in content)
    return block


def normalize_messages(messages: list) -> list[dict]:
    """Messages with string content turned into one text block, so both spellings compare equal."""
    out = []
    for m in messages:
        content = m.get("content")
        blocks = [content] if isinstance(content, str) else content or []
        out.append({"role": m.get("role"), "content": [normalize_block(b) for b in blocks]})
    return out


def request_diff(
    expected: dict, actual: dict, structure_only: bool = False, conversation_only: bool = False
) -> str | None:
    """A readable explanation of how `actual` differs from the recorded request, or None.

    conversation_only=True compares the conversation's shape alone (roles, block types, tool_use
    ids and names, tool_result pairing) and ignores text, system, max_tokens, stream and tools: the
    classroom server judges a loop a student wrote, with their own prompt and tools, this way.
    """
    structure_only = structure_only or conversation_only
    want, got = normalize_messages(expected["messages"]), normalize_messages(actual.get("messages", []))
    if len(want) != len(got):
        return _count_diff(want, got)
    for i, (w, g) in enumerate(zip(want, got)):
        if w["role"] != g["role"]:
            return f"messages[{i}] should come from the {w['role']}, got {g['role']}"
        if len(w["content"]) != len(g["content"]):
            return f"messages[{i}]: expected {len(w['content'])} content blocks, got {len(g['content'])}"
        for j, (wb, gb) in enumerate(zip(w["content"], g["content"])):
            problem = _block_diff(wb, gb, structure_only, conversation_only)
            if problem:
                return f"messages[{i}].content[{j}]: {problem}"
    if conversation_only:
        return None
    for key in ("system", "max_tokens", "stream"):
        if expected.get(key) != actual.get(key) and not (structure_only and key == "system"):
            return f"{key}: expected {_short(expected.get(key))}, got {_short(actual.get(key))}"
    if _tool_names(expected) != _tool_names(actual):
        return f"tools: expected {_tool_names(expected)}, got {_tool_names(actual)}"
    return None


def _count_diff(want: list, got: list) -> str:
    """Name the first recorded message the loop did not send, when it sent too few."""
    line = f"expected {len(want)} messages, got {len(got)}"
    if len(got) >= len(want):
        return line
    k = next((i for i, (w, g) in enumerate(zip(want, got)) if w["role"] != g["role"]), len(got))
    missing = want[k]
    kinds = ", ".join(sorted({b.get("type", "?") for b in missing["content"]}))
    hint = (
        "the assistant turn was not appended"
        if missing["role"] == "assistant"
        else "the tool results were not appended"
    )
    return f"{line} — missing messages[{k}] ({missing['role']}: {kinds}): {hint}"


def _block_diff(want: dict, got: dict, structure_only: bool, conversation_only: bool = False) -> str | None:
    """How one content block differs: type first, then ids, then (unless structure-only) text."""
    if want.get("type") != got.get("type"):
        return f"expected a {want.get('type')} block, got {got.get('type')}"
    keys = {"tool_use": ("id", "name"), "tool_result": ("tool_use_id", "is_error")}.get(want["type"], ())
    if conversation_only:  # a student's tools may fail where the recording's did not: is_error is theirs
        keys = tuple(k for k in keys if k != "is_error")
    if not structure_only:
        keys = sorted(set(want) | set(got))
    for key in keys:
        if want.get(key) != got.get(key):
            return f"{key} expected {_short(want.get(key))}, got {_short(got.get(key))}"
    return None


def _tool_names(body: dict) -> list[str]:
    return [t.get("name") for t in body.get("tools", [])]


def _short(value, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 20] + f"… ({len(text)} chars)"


# -- reading and writing files: only what the user named, whole or not at all -----------------------

MAX_JSON_BYTES = (
    64 * 1024 * 1024
)  # the largest fixture is under 100 KB; a 2 GB file is a mistake or an attack
MAX_JSON_DEPTH = 64  # a real fixture nests about 10 deep; far deeper only exhausts the stack


def read_json(path: str | Path, what: str = "fixture", hint: str = "fix the file or re-record it"):
    """A JSON file that the user named, parsed; any problem is one WorkbookError line naming the file.

    Only a regular file is opened (a folder, a FIFO or a device is refused before any read), and only
    up to MAX_JSON_BYTES. NaN and Infinity are not JSON and are refused, and so is nesting past
    MAX_JSON_DEPTH, so that nothing later can hit a RecursionError on it.
    """
    return _parse_json(path, read_bytes(path, what), what, hint)


def read_bytes(path: str | Path, what: str) -> bytes:
    """The bytes of a regular file the user named, at most MAX_JSON_BYTES; else one WorkbookError line."""
    try:  # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        if what == "fixture":
            raise WorkbookError(
                f"{path}: no such fixture — see `ls fixtures/` for the ones that exist"
            ) from None
        raise WorkbookError(f"{path}: no such file — check the path to the {what}") from None
    except IsADirectoryError:
        raise WorkbookError(f"{path}: is a folder, not a {what} file — name the .json file inside") from None
    except (OSError, ValueError) as err:  # permission denied, a name with a NUL byte, ...
        raise WorkbookError(f"{path}: cannot open this {what} ({_one_line(err)})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise WorkbookError(f"{path}: is a folder, not a {what} file — name the .json file inside")
        if not stat.S_ISREG(info.st_mode):
            raise WorkbookError(f"{path}: not a regular file (a pipe or a device?) — give a {what} file")
        if info.st_size > MAX_JSON_BYTES:
            raise WorkbookError(f"{path}: {info.st_size:,} bytes is too large for a {what} (limit 64 MB)")
        with os.fdopen(os.dup(fd), "rb") as file:
            return file.read(MAX_JSON_BYTES + 1)
    except OSError as err:
        raise WorkbookError(f"{path}: cannot read this {what} ({_one_line(err)})") from None
    finally:
        os.close(fd)


def _parse_json(path, raw: bytes, what: str, hint: str):
    def not_json(constant):
        raise ValueError(f"{constant} is not a JSON number")

    try:
        text = raw.decode("utf-8")
        if text_depth(raw) > MAX_JSON_DEPTH:  # measured before parsing, since json.loads recurses
            raise WorkbookError(
                f"{path}: nested more than {MAX_JSON_DEPTH} levels deep — not a {what}; {hint}"
            )
        return json.loads(text, parse_constant=not_json)
    except RecursionError:
        raise WorkbookError(f"{path}: nested too deeply to be a {what} — {hint}") from None
    except (UnicodeDecodeError, ValueError) as err:  # JSONDecodeError is a ValueError; so is 5,000 digits
        kind = "a JSON fixture" if what == "fixture" else f"a {what} (not JSON)"
        raise WorkbookError(f"{path}: not {kind}: {_one_line(err)} — {hint}") from None


JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes included (unrolled: fast)
NOT_BRACKETS = bytes(range(256)).translate(None, b"[]{}")


def text_depth(raw: bytes) -> int:
    """How deeply a JSON text nests, from its brackets outside strings: no parse, no tree walk."""
    brackets = JSON_STRING.sub(b"", raw).translate(None, NOT_BRACKETS)
    return max(accumulate(1 if c in b"[{" else -1 for c in brackets), default=0)


def json_depth(value) -> int:
    """How deeply lists and objects nest in a parsed JSON value (a scalar is 0); no recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            todo.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _umask()  # read once, at import: os.umask can only be read by setting it


def write_atomic(path: str | Path, text: str | bytes) -> Path:
    """Write a whole file or nothing: a temp file in the same folder, fsync, then rename over `path`.

    A crash or `kill -9` at any moment leaves either the old file or the new one, never a torn or
    empty one (a stray `.NAME.*.tmp` beside it at worst). The folder is created if missing.
    """
    path = Path(path)
    if path.is_dir():
        raise WorkbookError(f"{path}: is a folder — give a file name to write to")
    data = text.encode("utf-8") if isinstance(text, str) else text
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)  # an existing file keeps its permissions
    except OSError:
        mode = 0o666 & ~UMASK  # a new one gets what open() would have given it
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fchmod(file.fileno(), mode)
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)  # the rename itself survives a power cut only once its folder is synced
    return path


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json(path: str | Path, value) -> Path:
    """`value` as indented JSON, its secrets scrubbed, written atomically (fixtures, saved conversations)."""
    return write_atomic(path, scrub_json(json.dumps(value, indent=2, ensure_ascii=False)) + "\n")


# -- secrets: the key stays in this process ------------------------------------------------------

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


# -- trust: whose recorded commands may run unasked -------------------------------------------------

TRUST_FILE = ROOT / "fixtures" / "TRUSTED"  # sha256 and path of each fixture whose commands run unasked


def fixture_digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def trusted_digests(trust_file: Path | None = None) -> dict[str, str]:
    """digest -> path, from the trust list (`sha256sum` format: `<sha256>  <path>`, # comments)."""
    try:
        text = (trust_file or TRUST_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    found = {}
    for line in text.splitlines():
        digest, _, name = line.strip().partition("  ")
        if len(digest) == 64 and not line.startswith("#"):
            found[digest.lower()] = name
    return found


def is_trusted(raw: bytes) -> bool:
    """Whether a fixture with exactly these bytes is on the trust list (so its commands run unasked)."""
    return fixture_digest(raw) in trusted_digests()


VETTED: set[str] = set()  # the commands recorded in the trusted fixtures this process has loaded


def vetted(command) -> bool:
    """Whether a trusted fixture loaded in this process recorded exactly this command. Its replay runs
    it as recorded, unasked; any other command (a live model's, an untrusted fixture's) meets the gate."""
    return command in VETTED


def trust(path: str | Path) -> str:
    """Add a fixture, as it is now, to the trust list; an older entry for the same path is replaced."""
    raw = read_bytes(path, "fixture")
    fixture = _checked(path, _parse_json(path, raw, "fixture", "fix the file or re-record it"))
    name, digest = _display_name(Path(path)), fixture_digest(raw)
    entry, lines = f"{digest}  {name}", _trust_lines()
    same = [i for i, line in enumerate(lines) if not line.startswith("#") and line.partition("  ")[2] == name]
    lines = [entry if i == same[0] else line for i, line in enumerate(lines)] if same else [*lines, entry]
    write_atomic(TRUST_FILE, "\n".join(lines) + "\n")  # an entry changes in place: the diff shows which
    commands = len(recorded_commands(fixture))
    return f"trusted {name} ({digest[:12]}): in replay its tool calls ({commands} shell commands) run unasked"


def _trust_lines() -> list[str]:
    try:
        return [line for line in TRUST_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]
    except FileNotFoundError:
        return [
            "# Fixtures whose recorded commands replay runs unasked: `python replay.py trust FILE` adds one."
        ]


def recorded_commands(fixture: dict) -> list[str]:
    """The commands a replay of this fixture would run: its stop hook, and every bash tool_use."""
    args = fixture.get("args", [])
    commands = [args[i + 1] for i, flag in enumerate(args[:-1]) if flag == "--stop-hook"]
    commands += [flag.partition("=")[2] for flag in args if flag.startswith("--stop-hook=")]
    for exchange in fixture["exchanges"]:
        response = exchange["response"]
        body = response.get("body")
        if response.get("status") == 200 and "stream" in response:
            body = events_to_message(response["stream"])
        for block in (body or {}).get("content", []) if isinstance(body, dict) else []:
            if block.get("type") == "tool_use" and block.get("name") == "bash":
                commands.append(str(block.get("input", {}).get("command", "")))
    return commands


# -- fixtures: load and check ----------------------------------------------------------------------

STEPS = ("s01_agent_loop", "s02_tools", "s03_errors", "s04_parallel", "s05_budget", "s06_recovery")
UNGATED = ("s01_agent_loop",)  # steps with no permission gate: they replay only trusted fixtures' commands
CONVERSATIONS = ROOT / "fixtures" / "conversations"  # saved conversations a fixture may resume


def load_fixture(path: str | Path) -> dict:
    """Read a fixture and check it; any problem raises FixtureError naming the file and the place."""
    return _load(path)[0]


def _load(path: str | Path) -> tuple[dict, bytes]:
    """The checked fixture and the exact bytes it came from (what trust is judged on)."""
    try:
        raw = read_bytes(path, "fixture")
        fixture = _checked(path, _parse_json(path, raw, "fixture", "fix the file or re-record it"))
    except FixtureError:
        raise
    except WorkbookError as err:
        raise FixtureError(str(err)) from None
    if is_trusted(raw):
        VETTED.update(recorded_commands(fixture))
    return fixture, raw


def _checked(path, fixture) -> dict:
    for problem in _problems(fixture):  # read from a file: its nesting was measured on the text
        raise FixtureError(f"{path}: {problem}")
    return fixture


def fixture_problems(fixture) -> list[str]:
    """Everything wrong with a parsed fixture, each naming its place (e.g. `exchanges[2].response`)."""
    if isinstance(fixture, dict) and json_depth(fixture) > MAX_JSON_DEPTH:
        return [f"nested more than {MAX_JSON_DEPTH} levels deep"]
    return _problems(fixture)


def _problems(fixture) -> list[str]:
    if not isinstance(fixture, dict):
        return ["the top level must be a JSON object"]
    problems = [f"missing field `{name}`" for name in FIXTURE_FIELDS if name not in fixture]
    if problems:
        return problems
    problems += _field_problems(fixture)
    if not isinstance(fixture["exchanges"], list) or not fixture["exchanges"]:
        return problems + ["`exchanges` must be a non-empty list"]
    for n, exchange in enumerate(fixture["exchanges"]):
        problems += [f"exchanges[{n}]{p}" for p in _exchange_problems(exchange)]
    return problems


def _field_problems(fixture: dict) -> list[str]:
    """The fields around the exchanges: each of the right type, and none pointing outside the project."""
    problems = []
    for name in ("scenario", "description", "provenance_note"):
        if name in fixture and not isinstance(fixture[name], str):
            problems.append(f"`{name}` must be a string")
    if fixture["provenance"] not in ("recorded", "scripted"):
        problems.append("provenance must be `recorded` or `scripted`")
    if fixture["script"] not in STEPS:
        problems.append(f"`script` must name one of the steps: {', '.join(STEPS)}")
    if not isinstance(fixture["task"], str) or not fixture["task"].strip():
        problems.append("`task` must be a non-empty string")
    problem = workspace_problem(fixture["workspace"])
    if problem:
        problems.append(f"`workspace`: {problem}")
    recorded = fixture.get("recorded", {})
    if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
        problems.append("`recorded` must be an object of strings (date, model, sdk, endpoint)")
    if fixture.get("match", "structure") != "structure":
        problems.append("`match` must be `structure` or absent")
    latency = fixture.get("read_latency", 0)
    if not isinstance(latency, int | float) or isinstance(latency, bool) or not 0 <= latency <= 60:
        problems.append("read_latency must be 0 to 60 seconds")
    if fixture["script"] in STEPS:
        problems += [f"`args`: {p}" for p in args_problems(fixture.get("args", []), fixture["script"])]
    return problems


def workspace_problem(name) -> str | None:
    """Why `name` is not a folder under fixtures/workspace/ (None when it is, or when it is "")."""
    if not isinstance(name, str):
        return 'must be a string naming a folder under fixtures/workspace/ (or "" for an empty one)'
    if name == "":
        return None
    if "\0" in name or name.startswith(("/", "\\", "~")) or ".." in Path(name).parts or ":" in name:
        return f"{name!r} must be a folder name under fixtures/workspace/, not a path"
    source = (WORKSPACES / name).resolve()
    if not source.is_relative_to(WORKSPACES.resolve()) or source == WORKSPACES.resolve():
        return f"{name!r} must be a folder name under fixtures/workspace/, not a path"
    if not source.is_dir():
        return f"no folder {name!r} under fixtures/workspace/"
    return None


# A fixture's `args` may set how the step behaves, never where it reads or writes: flag -> (the first
# step that has it, a check of its value, or None for a flag that takes none). Anything else is refused,
# including every path flag (--save, --trace, --record, --replay, --workspace) and abbreviations.
def _whole(least: int):
    return lambda v: None if v.isdigit() and int(v) >= least else f"must be a whole number, at least {least}"


def _seconds(value: str):
    number = _float(value)
    return None if number is not None and 0 <= number <= 60 else "must be seconds from 0 to 60"


def _dollars(value: str):
    number = _float(value)
    return None if number is not None and number > 0 else "must be a positive number of dollars"


def _float(value: str) -> float | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _permission(value: str):
    return None if value in ("ask", "auto", "deny") else "must be ask, auto or deny"


def _command(value: str):
    return None if value.strip() else "must be a command"


def _conversation(value: str):
    target = (ROOT / value).resolve()
    inside = not Path(value).is_absolute() and ".." not in Path(value).parts
    if not inside or not target.is_relative_to(CONVERSATIONS.resolve()) or not target.is_file():
        return "must name a file under fixtures/conversations/ (a path from the repo root)"
    try:
        messages = read_json(target, "saved conversation", "re-save it")
    except WorkbookError as err:
        return str(err)
    problems = messages_problems(messages)
    return f"not a saved conversation ({problems[0][1:]})" if problems else None


PATH_FLAGS = ("--save", "--trace", "--record", "--replay", "--workspace", "--resume", "--model", "--force")
FIXTURE_FLAGS = {
    "--permission": (2, _permission),
    "--read-latency": (4, _seconds),
    "--max-steps": (5, _whole(1)),
    "--max-tokens-total": (5, _whole(1)),
    "--max-input-tokens": (5, _whole(1)),
    "--max-cost": (5, _dollars),
    "--no-stream": (5, None),
    "--resume": (5, _conversation),
    "--web-search": (6, None),
    "--stop-hook": (6, _command),  # a shell command: from an untrusted fixture, it meets the gate (s06)
    "--stop-hook-retries": (6, _whole(0)),
}


def args_problems(args, script: str) -> list[str]:
    """What is wrong with a fixture's `args` for this step (empty when every flag may be used)."""
    if not isinstance(args, list) or not all(isinstance(a, str) and "\0" not in a for a in args):
        return ["must be a list of strings"]
    problems, i, step = [], 0, int(script[1:3])
    while i < len(args):
        flag, has_value, value = args[i].partition("=")
        if flag not in FIXTURE_FLAGS:
            kind = "names a file" if flag in PATH_FLAGS else "is not a flag a fixture may set"
            problems.append(
                f"{args[i]!r} {kind}: a fixture sets behaviour flags only ({', '.join(FIXTURE_FLAGS)})"
            )
            break
        first, check = FIXTURE_FLAGS[flag]
        if step < first:
            problems.append(f"{flag} is not a flag of {script} (it comes in s0{first})")
        if check is None and has_value:
            problems.append(f"{flag} takes no value")
        if check is not None and not has_value:
            if i + 1 == len(args):
                problems.append(f"{flag} needs a value")
                break
            i, value = i + 1, args[i + 1]
            if value.startswith("-"):  # the step's parser would take it for a flag
                problems.append(f"{flag} {value!r}: a value may not start with '-' (write {flag}=VALUE)")
                break
        problem = check(value) if check else None
        if problem:
            problems.append(f"{flag} {value!r}: {problem}")
        i += 1
    return problems


def _exchange_problems(exchange) -> list[str]:
    if not isinstance(exchange, dict) or not isinstance(exchange.get("request"), dict):
        return [": needs a `request` object"]
    request, response = exchange["request"], exchange.get("response")
    problems = [f".request{p}" for p in request_problems(request)]
    if not problems:
        problems = [f".request: {p}" for p in api_rule_problems(request["messages"])]
    if exchange.get("match", "structure") != "structure":
        problems.append(".match: must be `structure` or absent")
    if not isinstance(response, dict):
        return problems + [".response: must be an object"]
    return problems + [f".response{p}" for p in _response_problems(response)]


def request_problems(request: dict) -> list[str]:
    """Type problems in a recorded request body, each naming its place (`.messages[1].content[0]`)."""
    problems = [
        f".{key}: missing (the API requires it)" for key in ("model", "max_tokens") if key not in request
    ]
    kinds = {"model": str, "max_tokens": int, "stream": bool, "system": str | list, "tools": list}
    for key, kind in kinds.items():
        value = request.get(key)
        if key in request and (not isinstance(value, kind) or isinstance(value, bool) and kind is not bool):
            problems.append(f".{key}: has the wrong type")
    tools = request.get("tools", [])
    if isinstance(tools, list) and not all(
        isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools
    ):
        problems.append(".tools: each tool must be an object with a name")
    return problems + messages_problems(request.get("messages"))


def messages_problems(messages) -> list[str]:
    """Type problems in a messages list (`.messages[1].content[0]: ...`): a request's, or a saved one."""
    if not isinstance(messages, list):
        return [".messages: must be a list"]
    problems = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            problems.append(f".messages[{i}]: must be an object with role and content")
            continue
        content = message.get("content")
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            problems.append(f".messages[{i}].content: must be a string or a list of blocks")
            continue
        problems += [
            f".messages[{i}].content[{j}]{p}" for j, b in enumerate(content) for p in block_problems(b)
        ]
    return problems


def block_problems(block) -> list[str]:
    """What the transport's comparison would choke on in one content block."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        return [": must be an object with a `type`"]
    needs = {
        "text": {"text": str},
        "tool_use": {"id": str, "name": str, "input": dict},
        "tool_result": {"tool_use_id": str},
    }.get(block["type"], {})
    problems = [
        f".{key}: must be a {kind.__name__}"
        for key, kind in needs.items()
        if not isinstance(block.get(key), kind)
    ]
    if block["type"] == "tool_result":
        content = block.get("content", "")
        parts = content if isinstance(content, list) else []
        if not isinstance(content, str | list) or not all(isinstance(c, dict) for c in parts):
            problems.append(".content: must be a string or a list of blocks")
        elif any(c.get("type") == "text" and not isinstance(c.get("text"), str) for c in parts):
            problems.append(".content: a text block needs its text")
        if not isinstance(block.get("is_error", False), bool):
            problems.append(".is_error: must be true or false")
    return problems


def _response_problems(response: dict) -> list[str]:
    if "error" in response:
        return (
            [] if response["error"] in ("connect", "timeout") else [".error: must be `connect` or `timeout`"]
        )
    status = response.get("status")
    if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
        return [".status: must be an HTTP status number"]
    headers = response.get("headers", {})
    problems = []
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        problems.append(".headers: must be an object of strings")
    if status == 200 and "stream" in response:
        problems += [f".stream{p}" for p in _stream_problems(response["stream"])]
    elif status == 200:
        problems += [f".body: {p}" for p in _message_problems(response.get("body"))]
    elif "stream" in response:
        problems.append(".stream: only a 200 response streams; an error response has a JSON `body`")
    elif not isinstance(response.get("body"), dict):
        problems.append(".body: an error response needs a JSON error body")
    return problems


def _message_problems(body) -> list[str]:
    """Whether a 200 body parses as the SDK's own `Message` type."""
    try:
        message = anthropic.types.Message.model_validate(body)
    except Exception as err:  # pydantic's ValidationError; its first line names the field
        return [f"not a valid Message ({_one_line(err)})"]
    return [] if message.type == "message" else ["`type` must be `message`"]


STREAM_EVENTS = {
    "message_start": anthropic.types.RawMessageStartEvent,
    "message_delta": anthropic.types.RawMessageDeltaEvent,
    "message_stop": anthropic.types.RawMessageStopEvent,
    "content_block_start": anthropic.types.RawContentBlockStartEvent,
    "content_block_delta": anthropic.types.RawContentBlockDeltaEvent,
    "content_block_stop": anthropic.types.RawContentBlockStopEvent,
}


def _stream_problems(events) -> list[str]:
    """A stream must be {event, data} pairs that add up to a Message (or end in an error event)."""
    if not isinstance(events, list) or not events:
        return [": must be a non-empty list of {event, data}"]
    problems = []
    for n, event in enumerate(events):
        if not isinstance(event, dict) or not isinstance(event.get("data"), dict):
            problems.append(f"[{n}]: must be {{event, data}} with a JSON object as data")
        elif event.get("event") != event["data"].get("type") or not isinstance(event.get("event"), str):
            problems.append(f"[{n}]: `event` must be a string equal to data's `type`, as the API sends it")
        elif event["event"] in STREAM_EVENTS:  # the SDK builds these without checking: check them here
            try:
                STREAM_EVENTS[event["event"]].model_validate(event["data"])
            except Exception as err:  # pydantic's ValidationError
                problems.append(f"[{n}]: not a valid {event['event']} event ({_one_line(err)})")
    problems += _block_order_problems(events) if not problems else []
    if problems:
        return problems
    try:  # a streaming loop reads the events, a plain one the Message they add up to: both must work
        message = events_to_message(events)
    except Exception as err:  # whatever a malformed stream raises, in the SDK's place
        return [f": the events do not add up to a Message ({type(err).__name__}: {_one_line(err)})"]
    if message.get("type") == "error":
        return [] if isinstance(message.get("error"), dict) else [": an error event needs an `error` object"]
    return [f": adds up to {p}" for p in _message_problems(message)]


def _block_order_problems(events: list[dict]) -> list[str]:
    """Blocks start in order 0, 1, 2 ... and every delta or stop names one already started."""
    started = 0
    for n, event in enumerate(events):
        kind, index = event["event"], event["data"].get("index")
        if not kind.startswith("content_block_"):
            continue
        if not isinstance(index, int) or isinstance(index, bool):
            return [f"[{n}]: `index` must be a whole number"]
        if kind == "content_block_start" and index != started:
            return [f"[{n}]: content block {index} starts where block {started} should"]
        if kind != "content_block_start" and not 0 <= index < started:
            return [f"[{n}]: content block {index} has not started"]
        started += kind == "content_block_start"
    return []


def _one_line(err: Exception) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return " ".join(lines[:3])[:200]


# -- the replay transport --------------------------------------------------------------------------


def sse_bytes(events: list[dict]) -> bytes:
    """Server-sent events in the wire format the API streams."""
    return b"".join(
        f"event: {e['event']}\ndata: {json.dumps(e['data'], ensure_ascii=False)}\n\n".encode() for e in events
    )


def message_to_events(message: dict) -> list[dict]:
    """A Message body as the SSE events the API streams for it: start, blocks in deltas, delta, stop."""
    usage = dict(message.get("usage") or {})
    start = {k: v for k, v in message.items() if k not in ("stop_details", "container")}
    start |= {"content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = usage | {"output_tokens": min(1, usage.get("output_tokens", 0))}
    events = [{"event": "message_start", "data": {"type": "message_start", "message": start}}]
    for index, block in enumerate(message.get("content", [])):
        events += _block_events(index, block)
    keys = ["stop_reason", "stop_sequence"] + [k for k in ("stop_details", "container") if k in message]
    delta = {k: message.get(k) for k in keys}
    last = {
        "type": "message_delta",
        "delta": delta,
        "usage": {"output_tokens": usage.get("output_tokens", 0)},
    }
    events += [{"event": "message_delta", "data": last}]
    return events + [{"event": "message_stop", "data": {"type": "message_stop"}}]


def _block_events(index: int, block: dict) -> list[dict]:
    """One content block as content_block_start, its deltas (text, tool input, thinking), stop."""
    kind, deltas = block.get("type"), []
    start = dict(block)
    if kind == "text":
        start["text"] = ""
        deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(block.get("text", ""))]
    elif kind in ("tool_use", "server_tool_use"):
        start["input"] = {}
        raw = json.dumps(block.get("input", {}), ensure_ascii=False)
        deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in _pieces(raw)]
    elif kind == "thinking":
        start |= {"thinking": "", "signature": ""}
        deltas = [
            {"type": "thinking_delta", "thinking": piece} for piece in _pieces(block.get("thinking", ""))
        ]
        deltas += [{"type": "signature_delta", "signature": block.get("signature", "")}]
    events = [{"event": "content_block_start", "data": {"type": "content_block_start", "index": index}}]
    events[0]["data"]["content_block"] = start
    for delta in deltas:
        data = {"type": "content_block_delta", "index": index, "delta": delta}
        events.append({"event": "content_block_delta", "data": data})
    return events + [{"event": "content_block_stop", "data": {"type": "content_block_stop", "index": index}}]


def _pieces(text: str, size: int = 24) -> list[str]:
    """Text cut into small deltas, the way a stream delivers it a few tokens at a time."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def events_to_message(events: list[dict]) -> dict:
    """The Message a stream of SSE events adds up to; an `error` event gives that error body instead."""
    message, tool_json = None, {}  # tool_json: block index -> partial_json received so far
    for event in events:
        data = event["data"]
        kind = data.get("type", event.get("event"))
        if kind == "error":
            return data
        if kind == "message_start":
            message = json.loads(json.dumps(data["message"])) | {"content": []}
        elif kind == "content_block_start":
            message["content"].append(json.loads(json.dumps(data["content_block"])))
        elif kind == "content_block_delta":
            _apply_delta(message["content"][data["index"]], data["delta"], tool_json, data["index"])
        elif kind == "message_delta":
            message |= data.get("delta", {})
            message["usage"] |= {k: v for k, v in data.get("usage", {}).items() if v is not None}
    if message is None:
        raise ValueError("the stream has no message_start event")
    for index, raw in tool_json.items():
        message["content"][index]["input"] = json.loads(raw) if raw else {}
    return message


def _apply_delta(block: dict, delta: dict, tool_json: dict, index: int) -> None:
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = block.get("text", "") + delta["text"]
    elif kind == "input_json_delta":
        tool_json[index] = tool_json.get(index, "") + delta["partial_json"]
    elif kind == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + delta["thinking"]
    elif kind == "signature_delta":
        block["signature"] = delta["signature"]
    elif kind == "citations_delta":
        block["citations"] = (block.get("citations") or []) + [delta["citation"]]


def http_response(response: dict, stream: bool | None = None) -> httpx2.Response:
    """Turn a recorded response into the httpx2 response the SDK will parse.

    `stream` is what the request asked for: a success recorded in the other form is converted (a
    JSON Message to its SSE events, or events to the Message), so one script of responses serves a
    streaming and a non-streaming loop alike. Strict replay has already rejected a `stream` mismatch.
    """
    if response.get("error") == "connect":
        raise httpx2.ConnectError("replayed connection failure")
    if response.get("error") == "timeout":
        raise httpx2.ReadTimeout("replayed read timeout")
    headers = dict(response.get("headers", {}))
    if stream is not None and response.get("status") == 200 and stream != ("stream" in response):
        converted = {"stream": message_to_events(response["body"])} if stream else {}
        response = converted or {"body": events_to_message(response["stream"])}
        response["status"] = 200
        headers.pop("content-type", None)
    if "stream" in response:
        headers.setdefault("content-type", "text/event-stream")
        return httpx2.Response(response["status"], headers=headers, content=sse_bytes(response["stream"]))
    headers.setdefault("content-type", "application/json")
    return httpx2.Response(response["status"], headers=headers, content=json.dumps(response["body"]).encode())


def recorded_message(response: dict) -> dict | None:
    """The Message a recorded response delivers, streamed or not; None for an error or a dropped link."""
    if response.get("status") != 200:
        return None
    message = events_to_message(response["stream"]) if "stream" in response else response.get("body")
    return message if isinstance(message, dict) and message.get("type") == "message" else None


MATCHES = ("strict", "shape")  # how a request is compared with the recorded one


@dataclass
class ReplayTransport:
    """Serves a fixture's responses in order; checks each request against the API and the recording.

    match="strict" compares the whole request with the recording (messages, text, system, tools);
    match="shape" only the conversation's shape, as the classroom server does (roles, block types,
    tool_use ids and the tool_result pairing), so any loop with its own prompt and tools (the SDK's
    tool runner, a student's) replays too. strict=False (lenient) keeps the API-rule check but skips
    the comparison: the fixture is then only a script of responses (used to rebuild fixtures and by
    the property tests). Server-held threads (threads.py) are served in every mode.
    """

    fixture: dict
    name: str = "fixture"
    strict: bool = True
    cursor: int = 0
    # Each request's bytes as the loop sent them: bytes are never scanned by the garbage collector,
    # where a parsed copy of every request (each holding the whole history) made long runs quadratic.
    sent: list[bytes] = field(default_factory=list)
    checked: bool = False  # the fixture came through load_fixture: its recorded requests keep the rules
    match: str = "strict"
    threads: Threads = field(default_factory=Threads)  # conversations held for thread requests

    @property
    def seen(self) -> list[dict]:
        """The request bodies in the order the loop sent them, parsed anew on each access."""
        return [json.loads(raw or b"{}") for raw in self.sent]

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(request.content)
        body = json.loads(request.content or b"{}")
        try:
            body, thread = self.threads.expand(body)  # a thread's request, whole again
        except Refusal as refusal:
            return httpx2.Response(refusal.status, json=refusal.body())
        exchanges = self.fixture["exchanges"]
        turn = self.cursor + 1
        if self.cursor >= len(exchanges):
            raise ReplayExhausted(
                f"{self.name}: the loop sent request {turn} but the fixture holds only {len(exchanges)} — "
                "the loop did not stop when the recording did"
            )
        recorded = exchanges[self.cursor]
        # Identical to a recording already checked: nothing to compare, no cost.
        if not (self.strict and self.checked and self.match == "strict" and body == recorded["request"]):
            self.check(body, recorded, turn)
        self.cursor += 1
        if thread:
            self.threads.hold(thread, body, recorded_message(recorded["response"]))
        return http_response(recorded["response"], bool(body.get("stream")))

    def check(self, body: dict, recorded: dict, turn: int) -> None:
        """The recording's own diff first, since it says what the loop did wrong; then the API's rules."""
        if self.strict:
            structure = recorded.get("match") == "structure"
            diff = request_diff(recorded["request"], body, structure, conversation_only=self.match == "shape")
            if diff:
                raise ReplayMismatch(f"{self.name}, turn {turn}: {diff}")
        check_api_rules(body, f"{self.name}, turn {turn}")

    def http_client(self) -> httpx2.Client:
        return anthropic.DefaultHttpxClient(transport=httpx2.MockTransport(self))


def replay_client(
    fixture: dict,
    name: str = "fixture",
    strict: bool = True,
    checked: bool = False,
    match: str = "strict",
    **client_options,
):
    """The real SDK client, talking to a ReplayTransport instead of the network.

    checked=True says the fixture came from load_fixture, so a request identical to its recording
    needs no further check (the per-turn cost then stays flat however long the history grows).
    match="shape" compares only the conversation's shape (see ReplayTransport); the default is strict.
    """
    if match not in MATCHES:
        raise WorkbookError(f"match={match!r}: use one of {', '.join(MATCHES)}")
    transport = ReplayTransport(fixture, name, strict, checked=checked, match=match)
    client = anthropic.Anthropic(api_key="replay", http_client=transport.http_client(), **client_options)
    return client, transport


# -- record mode: the real network, with every exchange kept -------------------------------------


class _TeeStream(httpx2.SyncByteStream):
    """Passes a streamed body through unchanged while keeping a copy for the fixture."""

    def __init__(self, stream, on_done):
        self.stream, self.on_done, self.chunks = stream, on_done, []

    def __iter__(self):
        for chunk in self.stream:
            self.chunks.append(chunk)
            yield chunk

    def close(self):
        self.stream.close()
        self.on_done(b"".join(self.chunks))


class RecordingTransport(httpx2.BaseTransport):
    """Sends requests to the real API and keeps each request body and response for the fixture.

    Only the request body is kept: never the request headers, so the API key cannot leak.
    """

    def __init__(self, inner: httpx2.BaseTransport | None = None, on_exchange=None):
        self.inner = inner or httpx2.HTTPTransport()
        self.exchanges: list[dict] = []
        self.on_exchange = on_exchange  # called after each exchange completes (record mode saves then)
        self.save_error: str | None = None  # the last failure of on_exchange, reported at the end

    def _completed(self) -> None:
        if self.on_exchange:
            try:
                self.on_exchange()
            except (WorkbookError, OSError) as err:  # a full disk must not stop the live run mid-turn
                self.save_error = _one_line(err)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        exchange = {"request": json.loads(request.read() or b"{}")}
        self.exchanges.append(exchange)
        try:
            response = self.inner.handle_request(request)
        except httpx2.TimeoutException:
            exchange["response"] = {"error": "timeout"}
            self._completed()
            raise
        except httpx2.TransportError:
            exchange["response"] = {"error": "connect"}
            self._completed()
            raise
        headers = {k: v for k, v in response.headers.items() if k.lower() in KEPT_RESPONSE_HEADERS}
        exchange["response"] = {"status": response.status_code, "headers": headers}

        def done(raw: bytes) -> None:
            exchange["response"].update(_parse_body(raw, headers))
            self._completed()

        tee = _TeeStream(response.stream, done)
        return httpx2.Response(response.status_code, headers=response.headers, stream=tee)


def _parse_body(raw: bytes, headers: dict) -> dict:
    """A recorded body as fixture JSON: SSE becomes a list of events, JSON stays JSON."""
    if "text/event-stream" in headers.get("content-type", ""):
        events = []
        for chunk in raw.decode("utf-8", errors="replace").split("\n\n"):
            fields = dict(line.split(": ", 1) for line in chunk.splitlines() if ": " in line)
            try:  # a stream cut off mid-event (Ctrl-C) ends at the last whole event
                events.append({"event": fields.get("event", "message"), "data": json.loads(fields["data"])})
            except (KeyError, ValueError):
                continue
        return {"stream": events}
    try:
        return {"body": json.loads(raw or b"null")}
    except json.JSONDecodeError:
        return {
            "body": {"type": "error", "error": {"type": "unparsed", "message": raw.decode(errors="replace")}}
        }


# -- temp folders: one place, cleaned up ----------------------------------------------------------

KEPT_RUNS = 10  # the newest replays' files (audit log, trace, saved conversation) kept; older ones go


def scratch_root() -> Path:
    """$TMPDIR/workbook-<uid>: every temp folder the workbook makes lives here, and only here.

    Private to this user (mode 700, owned, not a symlink); if something else holds the name, this
    process uses a folder of its own instead, removed when it exits.
    """
    uid = os.getuid() if hasattr(os, "getuid") else 0
    root = Path(tempfile.gettempdir()) / f"workbook-{uid}"
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        info = root.lstat()
        if stat.S_ISDIR(info.st_mode) and info.st_uid == uid:  # ours, and not a symlink planted for us
            if info.st_mode & 0o077:
                root.chmod(0o700)
            return root
    except OSError:
        pass
    global _PRIVATE_ROOT
    if _PRIVATE_ROOT is None:
        _PRIVATE_ROOT = Path(tempfile.mkdtemp(prefix=f"workbook-{uid}-"))
    return _PRIVATE_ROOT


_PRIVATE_ROOT: Path | None = None
_MADE_HERE: list[Path] = []  # run folders this process made, emptied of workspaces at exit


def new_run_folder() -> Path:
    """A fresh folder for one run (`<pid>-<random>`) under scratch_root(), after sweeping old ones."""
    for _ in range(3):  # another process may remove an empty root between our mkdir and mkdtemp
        root = scratch_root()
        sweep(root)
        try:
            folder = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root))
        except FileNotFoundError:
            continue
        _MADE_HERE.append(folder)
        return folder
    raise WorkbookError(f"cannot make a temp folder under {tempfile.gettempdir()} — is it writable?")


def sweep(root: Path) -> None:
    """Tidy what ended runs left: their workspace copies go; of their other files, the newest
    KEPT_RUNS runs' stay. A folder whose process still runs is never touched."""
    ended = []
    for folder in _entries(root):
        pid = folder.name.partition("-")[0]
        if folder.is_symlink() or not folder.is_dir() or not pid.isdigit() or _alive(int(pid)):
            continue
        release(folder)
        if folder.exists():
            ended.append(folder)
    ended.sort(key=_mtime, reverse=True)
    for folder in ended[KEPT_RUNS:]:
        _remove_tree(folder)


def release(folder: Path) -> None:
    """A run is over: remove its workspace copy, and the run folder too if nothing else is in it."""
    _remove_tree(folder / "workspace")
    try:
        folder.rmdir()  # only if empty: an audit log or a saved conversation keeps it
    except OSError:
        pass


def _release_all_at_exit() -> None:
    for folder in _MADE_HERE:
        release(folder)
    for root in {folder.parent for folder in _MADE_HERE}:
        try:
            root.rmdir()  # only if nothing is left in it at all
        except OSError:
            pass


atexit.register(_release_all_at_exit)


def _entries(root: Path) -> list[Path]:
    try:
        return list(root.iterdir())
    except OSError:
        return []


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists but is not ours
        return True
    return True


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _remove_tree(path: Path) -> None:
    """Remove a folder a run made, even where a tool left it read-only; never follows symlinks."""

    def writable_then_retry(function, name, _):
        try:
            os.chmod(os.path.dirname(name), 0o700)
            function(name)
        except OSError:
            pass

    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, onerror=writable_then_retry)


def copy_workspace(name: str) -> Path:
    """A fresh temp copy of fixtures/workspace/<name>: replayed tools never touch the reader's files.

    It lives in a run folder under scratch_root(), removed when the run ends (Run.finish), when this
    process exits, or by the next run's sweep if this one was killed.
    """
    problem = workspace_problem(name)
    if problem:
        raise FixtureError(f"workspace: {problem}")
    target = new_run_folder() / "workspace"
    if name:
        shutil.copytree(WORKSPACES / name, target, symlinks=True)
    else:
        target.mkdir()
    return target


# -- what a step script calls ----------------------------------------------------------------------


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (what is wrong, and --help), not the usage block too."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} — see --help\n")


def make_parser(doc: str, default_fixture: str) -> argparse.ArgumentParser:
    """The flags every step shares; a step adds its own to the parser this returns."""
    parser = OneLineParser(
        description=doc,
        epilog=f"With no task, replays {default_fixture} offline (with or without ANTHROPIC_API_KEY).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # `--rec` must not quietly mean --record
    )
    parser.add_argument("task", nargs="?", help="the task for a live run (needs ANTHROPIC_API_KEY)")
    parser.add_argument("--replay", metavar="FIXTURE", help="replay a recorded fixture, offline")
    parser.add_argument("--record", metavar="FIXTURE", help="run live and save the exchange as a fixture")
    parser.add_argument("--force", action="store_true", help="with --record: overwrite an existing file")
    parser.add_argument("--model", help="model id (default: $MODEL_ID, else the step's MODEL)")
    parser.add_argument(
        "--workspace", help="folder the tools act in for a live run (default: current folder)"
    )
    parser.set_defaults(default_fixture=default_fixture)
    return parser


@dataclass
class Run:
    """Everything a step needs to start: the client, the task, where tools act, and how we got here."""

    client: anthropic.Anthropic
    mode: str  # "live", "replay" or "record"
    task: str
    workspace: Path
    model: str
    banner: str
    fixture_path: Path | None = None
    transport: ReplayTransport | RecordingTransport | None = None
    fixture: dict | None = None  # the loaded fixture, in replay
    script: str = ""  # the step's name, kept in a recording
    trusted: bool = False  # a replay of a fixture on the trust list: its recorded commands run unasked
    fixture_args: list[str] = field(default_factory=list)  # the fixture's checked flags, paths made absolute
    folder: Path | None = None  # a replay's run folder: its workspace copy, and the files the step keeps

    def finish(self) -> str | None:
        """End the run: save what record mode captured (or what a rebuild observed), remove the
        replay's workspace copy. Returns a line for the reader, or None; never raises."""
        try:
            if self.mode == "record":
                return save_recording(self)
            if os.environ.get(REBUILD_ENV) and self.mode == "replay":
                return save_rebuild(self)
            return None
        except (WorkbookError, OSError) as err:
            return f"error: {err}"
        finally:
            if self.folder:
                release(self.folder)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc) -> None:
        self.finish()


def start(args: argparse.Namespace, model: str, script: str, **client_options) -> Run:
    """Pick the mode from the flags and the environment, and build the client for it.

    With no task: a replay (the step's default fixture unless --replay names one), key or no key.
    With a task: a live run, which needs ANTHROPIC_API_KEY. Flags that contradict each other stop here.
    """
    model = args.model or os.environ.get("MODEL_ID") or model
    conflict = flag_conflict(args)
    if conflict:
        raise WorkbookError(conflict)
    key = os.environ.get("ANTHROPIC_API_KEY")
    if args.record:
        if not key:
            raise WorkbookError("--record needs ANTHROPIC_API_KEY: set it, or use --replay to run offline")
        return _start_record(args, model, script, key, client_options)
    if not args.task:
        path = Path(args.replay) if args.replay else ROOT / args.default_fixture
        return _start_replay(path, model, client_options, script, args)
    if not key:
        raise WorkbookError("a live task needs ANTHROPIC_API_KEY — set it, or run with no task to replay")
    workspace = _live_workspace(args)
    client = anthropic.Anthropic(api_key=key, **client_options)
    where = public_endpoint(os.environ.get("ANTHROPIC_BASE_URL"))
    banner = f"live: {model} at {where}; tools act in {workspace}"
    return Run(client, "live", args.task, workspace, model, banner, script=script)


def flag_conflict(args: argparse.Namespace) -> str | None:
    """Flags that cannot all be meant at once: one line saying which, and what to do instead."""
    replay_, record, task = getattr(args, "replay", None), getattr(args, "record", None), args.task
    if replay_ and record:
        return "--replay plays a fixture offline and --record saves a live run: give one of them"
    if replay_ and task:
        return f"--replay runs the fixture's own task: drop {task!r}, or drop --replay to run it live"
    if record and not task:
        return '--record runs live: give a task too, e.g. --record fixtures/mine.json "list the files"'
    if getattr(args, "force", False) and not record:
        return "--force only applies to --record (to overwrite an existing recording)"
    if getattr(args, "workspace", None) and not task:
        return "--workspace is for a live run (give a task); a replay works in a temp copy of its own"
    return None


def _live_workspace(args) -> Path:
    workspace = Path(args.workspace or os.getcwd()).resolve()
    if not workspace.is_dir():
        raise WorkbookError(f"--workspace {args.workspace}: no such folder — create it or name another")
    return workspace


def _start_replay(path: Path, model: str, client_options: dict, script: str = "", args=None) -> Run:
    fixture, raw = _load(path)
    trusted = is_trusted(raw)
    name = _display_name(path)
    if not trusted and script in UNGATED and recorded_commands(fixture):
        raise FixtureError(
            f"{name}: {script} runs commands with no permission gate, and this fixture is not on the "
            f"trust list — read it, then `python replay.py trust {name}`, or replay it with s02 or later"
        )
    lenient = bool(os.environ.get(REBUILD_ENV))
    client, transport = replay_client(fixture, name, not lenient, True, **client_options)
    # The SDK's and the fixture's objects live as long as the process: freezing them spares every
    # later garbage collection (and the one at exit) from scanning them again. Measured in
    # docs/benchmarks.md: a whole replay drops to about the cost of `import anthropic` alone.
    gc.freeze()
    workspace = copy_workspace(fixture["workspace"])
    banner = f"offline replay of {name} ({fixture['provenance']}); no API key used"
    banner += "" if trusted else "; not on the trust list, so its commands go through the permission gate"
    if not getattr(args, "replay", None):
        step = f"{script or 'sNN_step'}.py"
        banner += f'; to run live, set ANTHROPIC_API_KEY and give a task: python {step} "list the files"'
    run = Run(client, "replay", fixture["task"], workspace, model, banner, path, transport, fixture)
    run.trusted, run.fixture_args, run.folder, run.script = (
        trusted,
        _absolute_args(fixture),
        workspace.parent,
        script,
    )
    return run


def _absolute_args(fixture: dict) -> list[str]:
    """A fixture's args as the step should parse them: a --resume file made absolute under the repo,
    so that the reader's current folder cannot change which file is read."""
    args = list(fixture.get("args", []))
    for i, arg in enumerate(args):
        flag, has_value, value = arg.partition("=")
        if flag == "--resume" and has_value:
            args[i] = f"--resume={(ROOT / value).resolve()}"
        elif arg == "--resume":
            args[i + 1] = str((ROOT / args[i + 1]).resolve())
    return args


def _start_record(args, model: str, script: str, key: str, client_options: dict) -> Run:
    target = Path(args.record)
    if target.is_dir():
        raise WorkbookError(f"--record {target}: is a folder — give a file name, e.g. {target}/mine.json")
    if target.parent.exists() and not target.parent.is_dir():
        raise WorkbookError(f"--record {target}: {target.parent} is not a folder — give a path in a folder")
    if target.exists() and not getattr(args, "force", False):
        raise WorkbookError(
            f"--record {target}: the file exists — pick another name, or add --force to replace it"
        )
    transport = RecordingTransport()
    http = anthropic.DefaultHttpxClient(transport=transport)
    client = anthropic.Anthropic(api_key=key, http_client=http, **client_options)
    workspace = _live_workspace(args)
    banner = f"recording a live run of {model} to {target}; tools act in {workspace}"
    run = Run(client, "record", args.task, workspace, model, banner, target, transport, script=script)
    transport.on_exchange = lambda: save_recording(run)  # kept after each exchange: kill -9 loses none
    return run


def _display_name(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except (ValueError, OSError):
        return str(path)


def save_recording(run: Run) -> str:
    """Write a live run as a fixture with provenance `recorded`: the endpoint without its userinfo or
    query, every secret this process holds scrubbed, atomically. Called after every exchange."""
    done = [e for e in run.transport.exchanges if not _exchange_problems(e)]  # whole ones: the file loads
    if not done:
        return f"nothing recorded: no exchange with the API completed ({run.fixture_path} not written)"
    fixture = {
        "script": run.script,
        "scenario": run.fixture_path.stem,
        "description": f"A live run of {run.script}: {run.task}",
        "provenance": "recorded",
        "recorded": {
            "date": datetime.now(UTC).date().isoformat(),
            "model": run.model,
            "sdk": f"anthropic {anthropic.__version__}",
            "endpoint": public_endpoint(os.environ.get("ANTHROPIC_BASE_URL")),
        },
        "task": run.task,
        "workspace": "",
        "match": "structure",  # live tool output (dates, sizes) differs between machines
        "exchanges": [dict(e, match="structure") for e in done],
    }
    write_json(run.fixture_path, fixture)
    return f"recorded {len(done)} exchanges to {run.fixture_path}"


def save_rebuild(run: Run) -> str:
    """Store the requests this run sent as the fixture's recorded requests, in the file `rebuild` named
    (REBUILD_ENV); `rebuild` checks it and only then replaces the fixture."""
    seen, exchanges = run.transport.seen, run.fixture["exchanges"]
    if len(seen) != len(exchanges):
        raise FixtureError(
            f"{run.fixture_path}: the run sent {len(seen)} requests for {len(exchanges)} responses"
        )
    for exchange, body in zip(exchanges, seen):
        exchange["request"] = body
    target = os.environ[REBUILD_ENV]
    write_json(target, run.fixture)
    return f"rebuilt {len(seen)} requests of {run.fixture_path}"


# -- command line ----------------------------------------------------------------------------------


def rebuild(path: str) -> int:
    """Re-run a scripted fixture's script against its responses and store the requests it sends.

    Only a trusted fixture (its commands run for real) naming one of the six steps; the result is
    checked before it replaces the fixture, and a fixture that was trusted stays trusted.
    """
    fixture, raw = _load(path)
    if fixture["provenance"] != "scripted":
        raise FixtureError(f"{path}: only scripted fixtures can be rebuilt; re-record a recorded one")
    if not is_trusted(raw):
        raise FixtureError(
            f"{path}: rebuild runs its commands — read it, then `python replay.py trust {path}`"
        )
    script = ROOT / f"{STEPS[STEPS.index(fixture['script'])]}.py"
    folder = new_run_folder()
    try:
        output = folder / "rebuilt.json"
        env = tool_environment() | {REBUILD_ENV: str(output)}
        command = [
            sys.executable,
            str(script),
            "--replay",
            str(Path(path).resolve()),
            *_absolute_args(fixture),
        ]
        code = subprocess.call(command, env=env)
        if code or not output.exists():
            raise FixtureError(f"{path}: the replay failed (exit {code}), so the fixture was left as it was")
        rebuilt = read_json(output)
        _checked(path, rebuilt)
        write_json(path, rebuilt)
        trust(path)
        return 0
    finally:
        _remove_tree(folder)


USAGE = "usage: python replay.py check|rebuild|trust FIXTURE... | serve FIXTURE | grade (see --help)"


def main(argv: list[str]) -> int:
    """`check`, `rebuild`, `trust`, `serve` or `grade` (see the module docstring)."""
    if not argv or argv[0] not in ("check", "rebuild", "trust", "serve", "grade"):
        print(USAGE, file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    try:
        if command == "serve":
            import replay_server

            return replay_server.main(rest)
        if command == "grade":
            import grade

            return grade.main(rest)
        if not rest:
            example = f"python replay.py {command} fixtures/*.json"
            print(f"error: {command} needs one or more fixture files, e.g. {example}", file=sys.stderr)
            return 2
        return max(_each(command, path) for path in rest)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _each(command: str, path: str) -> int:
    """One file through one command: `ok` or one error line naming it."""
    try:
        if command == "rebuild":
            return rebuild(path)
        if command == "trust":
            print(trust(path))
            return 0
        load_fixture(path)
        print(f"ok  {path}")
        return 0
    except WorkbookError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"error: {path}: {_one_line(err)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
