"""What the classroom server's terminal shows first: where it listens, to whom, and the caps it keeps.

Its first line holds the URL (a test reads it); a host every address of which is this machine's own is
announced as loopback, any other as open to the network.
"""

from __future__ import annotations

import ipaddress
import socket
import sys

from workbook.api.threads import PER_STUDENT_BYTES, TOTAL_BYTES
from workbook.classroom.caps import QUIET
from workbook.classroom.students import FIXTURE_HEADER


def banner(server, host: str) -> str:
    """What the teacher's terminal shows first; its first line holds the URL (a test reads it)."""
    if is_loopback(host):
        reach = "loopback only: this machine alone; --host 0.0.0.0 opens it to the classroom"
    else:
        reach = f"OPEN to the network on {host}: anyone who can reach this machine can use it"
    fixtures = [f"{name} ({len(f['exchanges'])} turns)" for name, f in server.classroom.fixtures.items()]
    return "\n".join(
        [
            f"replay server listening on {server.url}  ({reach})",
            f"fixtures: {', '.join(fixtures)}; the first is the default",
            f"students: ANTHROPIC_BASE_URL={server.url}  ANTHROPIC_API_KEY=<their name>",
            f'          another fixture: model "replay:NAME" or header {FIXTURE_HEADER}: NAME',
            f"teacher:  {server.url}/?token={server.teacher_token} (or /replay/status?token=...) for the "
            "class table; " + ("Enter prints it here; " if interactive() else "") + "Ctrl-C stops",
            *caps(server),
        ]
    )


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is this machine's own (`localhost`, 127.0.0.1, ::1)."""
    try:
        found = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(ipaddress.ip_address(f[4][0].split("%")[0]).is_loopback for f in found)


def caps(server) -> list[str]:
    """The caps that keep one student or one machine from holding the class, and how they are decided."""
    limits, per, mb = server.limits, server.caps, 2**20
    return [
        f"caps:     in all {limits.students} names, {limits.connections} connections, "
        f"{TOTAL_BYTES // mb} MB of threads",
        f"          per name (API key): one request judged at a time, "
        f"{PER_STUDENT_BYTES // mb} MB of threads",
        f"          per client address: {per.connections} connections, {per.names} names, "
        f"{per.held_bytes // mb} MB unanswered",
        f"          open files: room for {server.files.room:,} connections, {server.files.burst:,} accepted "
        "at one go",
        f"          a name counts for its address until it is quiet {QUIET // 60} min; when",
        "          the class is full, the name quiet longest gives up its place, and the",
        "          connection waiting longest, of the address holding most, is closed",
    ]


def interactive() -> bool:
    return bool(sys.stdin and sys.stdin.isatty())
