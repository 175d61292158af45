"""The trust list: which fixtures' recorded commands a replay runs unasked.

fixtures/TRUSTED holds, in `sha256sum` format, the digest of each trusted fixture's bytes, and the
digest of each workspace folder those fixtures' commands run in (`fixtures/workspace/<name>/`, its
files' names, bytes, execute bits and links: tree_digest). A fixture is trusted only when both match:
an edited `check.sh` in its workspace makes it a stranger's again, until someone reads it and runs
`python -m workbook trust` on the fixture.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
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
    name = fixture.get("workspace") if isinstance(fixture, dict) else _workspace_named_in(raw)
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
#
# Each rule's evidence is an object handed to the one who needs it, never a table the gate searches:
#   1. load_fixture returns a LoadedFixture, whose `vouched` holds what its trusted bytes recorded;
#   2. the gate's person (RecordedPerson) is given the replay's transport, which says where it is;
#   3. copy_workspace's WorkspaceCopy says what it copies and whether it matched; the person takes it.


@dataclass(frozen=True)
class Vouched:
    """What a fixture's bytes proved when they were loaded: they, and the workspace they name, are on
    the trust list. The calls are kept as text, as they were then: editing the dict later adds none."""

    workspace: str
    calls: tuple[dict, ...]  # per exchange: tool_use id -> (name, input as JSON)


class LoadedFixture(dict):
    """A fixture as load_fixture returns it: the dict, and `vouched` (None for a stranger's bytes).

    Trust is this object's alone: a copy of it (copy, deepcopy, pickle, `|`, dict()) is a plain dict,
    which vouches for nothing, like any fixture a notebook builds in memory."""

    def __init__(self, fixture: dict, vouched: Vouched | None):
        super().__init__(fixture)
        self.vouched = vouched

    def __copy__(self) -> dict:
        return dict(self)

    def __deepcopy__(self, memo: dict) -> dict:
        return copy.deepcopy(dict(self), memo)

    def __reduce__(self):
        return dict, (dict(self),)


def loaded(fixture: dict, raw: bytes) -> LoadedFixture:
    """The fixture parsed (and checked) from `raw`, holding what those bytes vouch for if trusted."""
    vouched = None
    if is_trusted(raw, fixture):
        vouched = Vouched(fixture["workspace"], tuple(_calls(exchange) for exchange in fixture["exchanges"]))
    return LoadedFixture(fixture, vouched)


def vouched_by(fixture) -> Vouched | None:
    """What a fixture vouches for: only a trusted file, as load_fixture returned it, vouches at all."""
    return fixture.vouched if isinstance(fixture, LoadedFixture) else None


@dataclass
class WorkspaceCopy:
    """A folder copy_workspace made: a fresh copy of fixtures/workspace/<name>.

    `trusted`: the copy, digested as it was made, is that workspace as the trust list has it (so the
    files a command will run are the ones whose digest was checked). `taken`: a run's person has made
    it its own, and no other run's recording may vouch for a call there."""

    folder: Path
    name: str
    trusted: bool
    taken: bool = False

    def take(self) -> bool:
        """Make the copy the caller's: True for the first caller only."""
        first, self.taken = not self.taken, True
        return first


# The folders copy_workspace made in this process, by resolved path: what a gate is given is a path,
# and only a folder this process made (and digested) can be a fixture's fresh copy.
_COPIES_MADE_HERE: dict[Path, WorkspaceCopy] = {}


def fresh_copy(workspace: Path, name: str) -> WorkspaceCopy:
    """copy_workspace made `workspace`, a fresh copy of fixtures/workspace/<name>, taken by no run yet.
    Whether it is the workspace as the trust list has it is judged on the copy itself."""
    try:
        trusted = name == "" or workspace_trusted(name, digest=tree_digest(workspace))
    except OSError:
        trusted = False
    made = WorkspaceCopy(Path(workspace).resolve(), name, trusted)
    _COPIES_MADE_HERE[made.folder] = made
    return made


def copy_made_here(workspace) -> WorkspaceCopy | None:
    """The copy copy_workspace made at `workspace`, or None for any other folder."""
    try:
        return _COPIES_MADE_HERE.get(Path(workspace).resolve())
    except (OSError, TypeError, ValueError):
        return None


class RecordedPerson:
    """The person a replay's gate asks (s02's `ask`), made of what trust needs: the transport playing
    the fixture (which exchange it has served), the workspace the run's tools act in, and `otherwise`,
    who answers any call the recording does not vouch for (the person at the terminal, if one is there).

    For a call its trusted recording made at this exchange, in its own fresh workspace copy, the
    recording says yes, unless the call is dangerous (a recording cannot give a person's yes to that: no
    answer). Made, it takes the copy: a copy another run's person took first is no fixture's own."""

    def __init__(self, transport, workspace: Path, otherwise: Callable | None = None):
        self.transport, self.otherwise = transport, otherwise
        self.copy = copy_made_here(workspace)
        self.owns_copy = self.copy is not None and self.copy.take()
        self._served: tuple[int, dict] = (0, {})  # (cursor, the calls of the response served there)

    def __call__(self, call, danger: str | None, why: str | None = None) -> bool | None:
        if not self.vouches_for(call):
            return self.otherwise(call, danger, why) if self.otherwise else None
        answer = None if danger else True  # a recording cannot give a person's yes to what needs one
        show_question(call, danger, answer, why)
        return answer

    def vouches_for(self, call) -> bool:
        """Whether this call may run without the gate (the three rules above). A live model's call, or a
        stranger's, never may."""
        vouched = vouched_by(self.transport.fixture)
        return vouched is not None and self._in_own_copy(vouched) and self._recorded_here(vouched, call)

    def _in_own_copy(self, vouched: Vouched) -> bool:
        """Rule 3: a fresh copy of the fixture's own workspace, as trusted, taken by this person first."""
        return self.owns_copy and self.copy.trusted and self.copy.name == vouched.workspace

    def _recorded_here(self, vouched: Vouched, call) -> bool:
        """Rule 2: the call as recorded at load, as served now, and as the loop asks is one call."""
        cursor = self.transport.cursor
        if not 0 < cursor <= len(vouched.calls):
            return False
        call_id = getattr(call, "id", None)
        recorded = vouched.calls[cursor - 1].get(call_id)
        served = self._served_calls(cursor).get(call_id)
        return recorded is not None and recorded == served == _call(call.name, call.input)

    def _served_calls(self, cursor: int) -> dict:
        """The calls in the response the transport served at `cursor`, worked out once per exchange."""
        if self._served[0] != cursor:
            exchanges = self.transport.fixture["exchanges"]
            self._served = (cursor, _calls(exchanges[cursor - 1]) if cursor <= len(exchanges) else {})
        return self._served[1]


def show_question(call, danger: str | None, answer: bool | None, why: str | None = None) -> None:
    """The gate's question as it is asked live (the call, at most MAX_SHOWN_LINES of it), and the
    answer a replay's person gives: yes to what its recording ran, none to a dangerous call."""
    from workbook.asking import MAX_SHOWN_LINES, call_lines, question  # here: copying a workspace must
    from workbook.display import console, say  # not load the SDK

    console.print(question(call, danger, why))
    lines = call_lines(call.input, console.width)
    if len(lines) > MAX_SHOWN_LINES:  # bounded, whatever a recording holds
        lines = [*lines[: MAX_SHOWN_LINES - 1], f"  … ({len(lines) - MAX_SHOWN_LINES + 1} more lines)"]
    say("\n".join(lines), "default")
    said = (
        "y (the replay answers for the person: its fixture ran this call)"
        if answer
        else "no answer (the replay answers for the person, and never yes to danger)"
    )
    say(f"[y/N] {said}")


def recorded_person(transport, workspace: Path, otherwise: Callable | None = None) -> RecordedPerson:
    """The person at the gate of a replay that `transport` plays, with its tools in `workspace`."""
    return RecordedPerson(transport, workspace, otherwise)


def recording_says_yes(call, danger: str | None, why: str | None = None) -> bool | None:
    """The answer of a trusted fixture about its own stop hook: yes, unless the hook is dangerous."""
    return None if danger else True


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
