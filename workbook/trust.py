"""The trust list: which fixtures' recorded commands a replay runs unasked."""

from __future__ import annotations

import hashlib
from pathlib import Path

from workbook.paths import ROOT
from workbook.wire import events_to_message

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
