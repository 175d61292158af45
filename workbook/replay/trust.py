"""The trust list: which fixtures' recorded commands a replay runs unasked.

fixtures/TRUSTED holds, in `sha256sum` format, the digest of each trusted fixture's bytes, and the
digest of each workspace folder those fixtures' commands run in (`fixtures/workspace/<name>/`, its
files' names, bytes, execute bits and links: tree_digest). A fixture is trusted only when both match:
an edited `check.sh` in its workspace makes it a stranger's again, until someone reads it and runs
`python -m workbook trust` on the fixture.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import weakref
from functools import partial
from pathlib import Path

from workbook.api.wire import recorded_message
from workbook.paths import ROOT, WORKSPACES

TRUST_FILE = ROOT / "fixtures" / "TRUSTED"  # sha256 and path of each fixture (and workspace) trusted


def fixture_digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def workspace_entry(name: str) -> str:
    """How the trust list names a workspace folder: `fixtures/workspace/<name>/`."""
    return f"fixtures/workspace/{name}/"


def workspace_line(name: str) -> str:
    """The trust list's line for fixtures/workspace/<name> as it is now."""
    return f"{tree_digest(WORKSPACES / name)}  {workspace_entry(name)}"


def tree_digest(folder: Path) -> str:
    """sha256 over a folder as a command run in it sees it: every entry's path, kind, and for a file
    its bytes and execute bit, for a link its target (never followed). Sorted, so any copy matches."""
    digest = hashlib.sha256()
    for path in sorted(_entries(Path(folder))):
        name = path.relative_to(folder).as_posix().encode("utf-8", "surrogateescape")
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            digest.update(b"L\0" + name + b"\0" + os.fsencode(os.readlink(path)) + b"\0")
        elif stat.S_ISDIR(info.st_mode):
            digest.update(b"D\0" + name + b"\0")
        elif stat.S_ISREG(info.st_mode):
            executable = b"x" if info.st_mode & 0o111 else b"-"
            digest.update(b"F\0" + name + b"\0" + executable + _file_digest(path))
        else:  # a FIFO, a socket, a device: named, never opened
            digest.update(b"O\0" + name + b"\0")
    return digest.hexdigest()


def _entries(folder: Path) -> list[Path]:
    found = []
    for parent, folders, files in os.walk(folder, followlinks=False):
        found += [Path(parent) / name for name in folders + files]
    return found


def _file_digest(path: Path) -> bytes:
    """A file's sha256, opened without following a link or waiting on a FIFO."""
    digest = hashlib.sha256()
    with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.digest()


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


def is_trusted(raw: bytes, fixture: dict | None = None) -> bool:
    """Whether a fixture with exactly these bytes is on the trust list, and its workspace folder as it
    is now (so its commands run unasked). `fixture` is what `raw` parses to, when the caller has it."""
    listed = trusted_digests()
    digest = fixture_digest(raw)
    if digest not in listed:
        return False
    name = fixture.get("workspace") if isinstance(fixture, dict) else _WORKSPACE_OF.get(digest)
    if name is None:
        name = _workspace_named_in(raw)
    return workspace_trusted(name, listed)


def workspace_trusted(name, listed: dict | None = None, digest: str | None = None) -> bool:
    """Whether fixtures/workspace/<name> (or a copy of it whose tree_digest is `digest`) is on the trust
    list as it is. "" (an empty folder) always is; a name that is not a folder under it never is."""
    if name == "":
        return True
    folder = WORKSPACES / name if isinstance(name, str) else None
    try:
        if folder is None or not folder.resolve().is_relative_to(WORKSPACES.resolve()) or not folder.is_dir():
            return False
        digest = digest or tree_digest(folder)
    except (OSError, ValueError):
        return False
    return (listed if listed is not None else trusted_digests()).get(digest) == workspace_entry(name)


def _workspace_named_in(raw: bytes):
    try:
        fixture = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return fixture.get("workspace") if isinstance(fixture, dict) else None


def recorded_commands(fixture: dict) -> list[str]:
    """The commands a replay of this fixture would run: its stop hook, and every bash tool_use."""
    args = fixture.get("args", [])
    commands = [args[i + 1] for i, flag in enumerate(args[:-1]) if flag == "--stop-hook"]
    commands += [flag.partition("=")[2] for flag in args if flag.startswith("--stop-hook=")]
    for exchange in fixture["exchanges"]:
        for block in (recorded_message(exchange["response"]) or {}).get("content", []):
            if block.get("type") == "tool_use" and block.get("name") == "bash":
                commands.append(str(block.get("input", {}).get("command", "")))
    return commands


# -- trust belongs to a loaded fixture, never to a string ------------------------------------------
#
# A replay runs a tool call unasked only when all three hold:
#   1. the fixture that this replay plays was trusted when it was loaded (its exact bytes are listed);
#   2. the call is the one that fixture recorded at the exchange the replay has just served;
#   3. the workspace is that fixture's own fresh copy (made by copy_workspace, used by no other run), and
#      the copy is the workspace folder as the trust list has it (its tree_digest, taken of the copy).
# A command string alone proves nothing: an untrusted fixture can write its own `test_utils.py` and
# then ask for the very `python3 test_utils.py` a trusted one recorded.

_LOADED: dict[int, tuple[dict, list[dict]]] = {}  # id(fixture) -> (fixture, its calls per exchange)
_PLAYING: dict[int, weakref.ref] = {}  # id(transport) -> the replay transports alive in this process
_CURRENT: dict[int, tuple] = {}  # id(transport) -> (its cursor, the calls of the response it served last)
_COPIES: dict[
    str, list
] = {}  # a fresh workspace copy -> [the workspace it copies, its user, trusted as copied]
_WORKSPACE_OF: dict[str, str] = {}  # a loaded fixture's digest -> the workspace it names
LIVE = "live"  # the user of a workspace copy that a live model's calls reached first


def remember(fixture: dict, raw: bytes) -> None:
    """A fixture was loaded from `raw`: if those bytes are trusted, keep what it recorded at each
    exchange, as it was then (a notebook that edits the dict later cannot add a call)."""
    if isinstance(fixture.get("workspace"), str):
        _WORKSPACE_OF[fixture_digest(raw)] = fixture["workspace"]
    if is_trusted(raw, fixture):
        _LOADED[id(fixture)] = (fixture, [_calls(exchange) for exchange in fixture["exchanges"]])


def follow(transport) -> None:
    """A replay transport now serves a fixture: the gate asks it which exchange it is at."""
    key = id(transport)
    _PLAYING[key] = weakref.ref(transport, partial(_forget, key))


def _forget(key: int, _ref) -> None:
    _PLAYING.pop(key, None)
    _CURRENT.pop(key, None)


def fresh_copy(workspace: Path, name: str) -> None:
    """copy_workspace made `workspace`, a fresh copy of fixtures/workspace/<name>, used by no run yet.
    Whether the copy is the workspace as the trust list has it is judged on the copy itself: the files
    the commands will run are the ones whose digest was checked."""
    try:
        trusted = name == "" or workspace_trusted(name, digest=tree_digest(workspace))
    except OSError:
        trusted = False
    _COPIES[str(Path(workspace).resolve())] = [name, None, trusted]


def recorded_person(workspace: Path, otherwise=None):
    """The person a replay's gate asks (s02's `ask`): for a call its trusted recording made at this
    exchange, in its own fresh workspace copy, the recording says yes, unless the call is dangerous (a
    recording cannot give a person's yes to that: no answer); any other call is `otherwise`'s to answer
    (the person at the terminal, if one is there). Trust lives here; the gate only asks."""

    def ask(call, danger: str | None) -> bool | None:
        if unasked(call, workspace):
            if danger:
                return None
            from workbook.display import say  # here: copying a workspace must not load the SDK

            say(f"the recording says yes to this {call.name} call: it ran when the fixture was made")
            return True
        return otherwise(call, danger) if otherwise else None

    return ask


def recording_says_yes(call, danger: str | None) -> bool | None:
    """The answer of a trusted fixture about its own stop hook: yes, unless the hook is dangerous."""
    return None if danger else True


def unasked(block, workspace: Path) -> bool:
    """Whether this tool call may run without the gate: a trusted fixture's call, replayed where it was
    recorded (see the three rules above). A live model's call, or a stranger's, is never unasked."""
    workspace = str(Path(workspace).resolve())
    serving = _serving(block)
    trusted = [
        transport for transport, recorded in serving if _vouched(transport, recorded, block, workspace)
    ]
    user = _claim(workspace, (trusted or [transport for transport, _ in serving] or [LIVE])[0])
    return any(user is transport for transport in trusted)


def _vouched(transport, recorded: tuple, block, workspace: str) -> bool:
    """Rules 1 and 2, and the copy is of the fixture's workspace (rule 3's `own` is _claim's)."""
    fixture, calls = _LOADED.get(id(transport.fixture), (None, None))
    copy = _COPIES.get(workspace)
    if fixture is not transport.fixture or copy is None or copy[0] != fixture.get("workspace") or not copy[2]:
        return False
    return calls[transport.cursor - 1].get(block.id) == recorded == _call(block.name, block.input)


def _serving(block) -> list[tuple]:
    """(replay transport, the call as it recorded it), for each transport whose latest response holds
    a call with this id: usually one; a notebook may keep several replays alive."""
    found = []
    for ref in list(_PLAYING.values()):
        transport = ref()
        if transport is not None and 0 < transport.cursor <= len(transport.fixture["exchanges"]):
            recorded = _current_calls(transport).get(getattr(block, "id", None))
            if recorded is not None:
                found.append((transport, recorded))
    return found


def _current_calls(transport) -> dict:
    """The calls in the response a transport served last, worked out once per exchange."""
    cached = _CURRENT.get(id(transport))
    if cached is None or cached[0] != transport.cursor:
        cached = (transport.cursor, _calls(transport.fixture["exchanges"][transport.cursor - 1]))
        _CURRENT[id(transport)] = cached
    return cached[1]


def _claim(workspace: str, user) -> object:
    """The first run whose calls reach a fresh copy makes it its own (a stranger's write there makes the
    copy no trusted fixture's); returns who owns it, or None for a folder copy_workspace did not make."""
    entry = _COPIES.get(workspace)
    if entry is None:
        return None
    if entry[1] is None:
        entry[1] = weakref.ref(user) if user is not LIVE else LIVE
    return entry[1] if entry[1] is LIVE else entry[1]()


def _calls(exchange) -> dict:
    """tool_use id -> (name, input), for every call in one exchange's response."""
    message = recorded_message(exchange.get("response", {})) if isinstance(exchange, dict) else None
    found = {}
    for block in (message or {}).get("content", []) or []:
        if isinstance(block, dict) and block.get("type") == "tool_use":
            found[block.get("id")] = _call(block.get("name"), block.get("input"))
    return found


def _call(name, tool_input) -> tuple:
    """A call as text, so that a later edit of the dict it came from cannot change what was recorded."""
    return name, json.dumps(tool_input, sort_keys=True, default=str)
