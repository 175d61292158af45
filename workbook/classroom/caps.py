"""caps — who may come into the classroom and hold what: connections and names, per address and in all.

A whole class may come from one address (a lab behind one NAT, a JupyterHub, one laptop running 200
loops), so the caps per address are generous, and what keeps one address from holding the class is that
a full class makes room: the connection that has waited longest on its client, of the address holding
the most, is closed for a new one; the name quiet the longest, if quiet QUIET seconds, gives its place
to a new name. The caps per name are the classroom's (workbook/classroom/students.py) and the threads'.
"""

from __future__ import annotations

import asyncio
import resource
import time
from dataclasses import dataclass, field, replace

from workbook.classroom.students import Classroom, Limits, Reply, api_error

import psutil

HELD_BYTES = 512 * 2**20  # request bodies read and not yet answered, from every address together
QUIET = 10 * 60  # seconds after its last request that a name stops counting for its address


FILES_KEPT = 32  # descriptors kept for what is not a connection: fixtures read, logs, worker threads' files


@dataclass(frozen=True)
class OpenFiles:
    """What the open-file limit leaves the server: every connection holds a descriptor, and so does
    each one asyncio accepts at one go (up to the listen backlog) before any is counted or refused."""

    room: int  # connections open at once
    burst: int  # connections accepted at one go: the listen backlog


def open_files() -> OpenFiles:
    """Raise the soft open-file limit to the hard one (as far as 65,536) where the system allows, and
    split what is left between connections and a burst of accepts. Linux starts a shell at 1,024 and
    macOS at 256: past them, accept() fails (EMFILE), and asyncio retries it, printing a traceback."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 65_536 if hard == resource.RLIM_INFINITY else min(hard, 65_536)
    if wanted > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):  # macOS refuses above kern.maxfilesperproc: keep what there is
            pass
    free = resource.getrlimit(resource.RLIMIT_NOFILE)[0] - psutil.Process().num_fds() - FILES_KEPT
    burst = min(1024, max(4, free // 4))  # a class connecting at once waits in the kernel's queue
    return OpenFiles(max(2, free - burst), burst)


def within_open_files(limits: Limits, caps: AddressCaps, room: int) -> tuple[Limits, AddressCaps]:
    """The connection caps, lowered where the open-file limit leaves less room than they allow: one
    address then keeps at most half of it, so that a full class can always make room for another."""
    in_all, per_address = min(limits.connections, room), min(caps.connections, max(1, room // 2))
    return replace(limits, connections=in_all), replace(caps, connections=per_address)


@dataclass
class AddressCaps:
    """What one client address (one machine) may hold. Generous, because a lab behind one NAT, a
    JupyterHub, or one laptop running a whole class of 200 comes from one address: what keeps one
    address from taking the class is that a full class makes room (`Admission.opened`, `seat`)."""

    connections: int = 500  # open at once
    names: int = 300  # names (API keys) it brought that sent a request in the last QUIET seconds
    held_bytes: int = 128 * 2**20  # request bodies read and not yet answered (429 above)


@dataclass
class Seat:
    """A name the class has heard: the address it last came from, when, and its turn to be judged."""

    address: str
    last: float  # time.monotonic() of its last request
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)  # its requests are judged one at a time
    asking: int = 0  # its requests being read, waiting their turn or judged


class Held:
    """Bytes of request bodies read and not yet answered, per client address and in all."""

    def __init__(self, per_address: int, in_all: int = HELD_BYTES):
        self.per_address, self.in_all = per_address, in_all
        self.by_address: dict[str, int] = {}
        self.total = 0

    def take(self, address: str, n: int) -> Reply | None:
        """None when `n` more bytes fit; else the error that says why not (the SDK retries either)."""
        if not n:
            return None
        held = self.by_address.get(address, 0)
        if held + n > self.per_address:
            return api_error(
                429,
                "rate_limit_error",
                f"this machine has sent over {self.per_address // 2**20} MB of requests the server has "
                "not answered yet, its most: send again in a moment",
            )
        if self.total + n > self.in_all:
            return api_error(529, "overloaded_error", "the replay server holds all the requests it can")
        self.by_address[address] = held + n
        self.total += n
        return None

    def give_back(self, address: str, n: int) -> None:
        if n:
            self.total -= n
            self.by_address[address] -= n
            if not self.by_address[address]:
                del self.by_address[address]


class Holding:
    """The bytes one request holds of its address's share, taken as its body comes, given back at once."""

    def __init__(self, held: Held, address: str):
        self.held, self.address, self.bytes = held, address, 0

    def take(self, n: int) -> Reply | None:
        refused = self.held.take(self.address, n)
        if refused is None:
            self.bytes += n
        return refused

    def give_back(self) -> None:
        self.held.give_back(self.address, self.bytes)
        self.bytes = 0


class Admission:
    """The connections and names the class holds, and the bytes of requests not yet answered.

    A connection (workbook/classroom/protocol.py) is counted from `opened` to `closed`; what the
    admission reads of it is its address, what it waits for from its client and since when, and
    `close_now`."""

    def __init__(self, classroom: Classroom, limits: Limits, caps: AddressCaps):
        self.classroom, self.limits, self.caps = classroom, limits, caps
        self.open_connections = 0
        self.open_from: dict[str, dict] = {}  # client address -> its open connections (in order)
        self.seats: dict[str, Seat] = {}  # student -> their seat
        self.held = Held(caps.held_bytes)

    # -- connections: per address and in all -------------------------------------------------------------

    def opened(self, connection) -> bool:
        """A new connection, counted; False (and a log line) when its address has its most open already.
        When the class has its most, the connection that has waited longest on its client, of the
        address holding the most, is closed to make room; False only when none is waiting."""
        address, mine = connection.address, self.open_from.get(connection.address, {})
        full = None
        if len(mine) >= self.caps.connections:
            full = f"{self.caps.connections} open already from this address (its most)"
        elif self.open_connections >= self.limits.connections and not self.make_room():
            full = f"{self.limits.connections} open already, each busy"
        if full:
            self.classroom.log("?", "-", "", f"{address}: closed, {full}")
            return False
        self.open_from.setdefault(address, {})[connection] = None
        self.open_connections += 1
        connection.counted = True
        return True

    def make_room(self) -> bool:
        busiest = max(self.open_from.values(), key=len)
        waiting = [c for c in busiest if c.waiting and not c.transport.is_closing()]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda c: c.since)
        idle = oldest.loop.time() - oldest.since
        oldest.log(f"closed after {idle:.0f} s waiting for its client: the class has its most connections")
        self.closed(oldest)
        oldest.close_now()
        return True

    def closed(self, connection) -> None:
        if connection.counted:
            connection.counted = False
            self.open_connections -= 1
            mine = self.open_from[connection.address]
            del mine[connection]
            if not mine:
                del self.open_from[connection.address]

    # -- names: per address, and who gives up their place when the class is full -------------------

    def seat(self, student: str, address: str) -> Seat | Reply:
        """The student's seat, taken for one request; a 403 for a new name from an address that has
        brought its most. A name heard before is always its own again, from any address."""
        now = time.monotonic()
        seat = self.seats.get(student)
        if seat is None:
            brought = sum(1 for s in self.seats.values() if s.address == address and now - s.last < QUIET)
            if brought >= self.caps.names:
                most = self.caps.names
                self.classroom.log("?", "-", "", f"{address}: 403 a new name over this address's {most}")
                return api_error(
                    403,
                    "permission_error",
                    f"this machine has brought {brought} names to the class in the last {QUIET // 60} "
                    "minutes, its most: use a name you used before, or ask the teacher to restart with a "
                    "higher --max-names-per-address",
                )
            if len(self.classroom.desks) >= self.limits.students:
                self.give_up_a_place(now)
            seat = self.seats[student] = Seat(address, now)
        seat.address, seat.last = address, now
        seat.asking += 1
        return seat

    def give_up_a_place(self, now: float) -> None:
        """The class is full: the name quiet the longest, if quiet QUIET seconds, leaves it (and starts
        over if it comes back). If none has, the classroom refuses the new name itself (a 403)."""
        quiet = [(s.last, name) for name, s in self.seats.items() if not s.asking and now - s.last >= QUIET]
        if quiet:
            last, name = min(quiet)
            del self.seats[name]
            self.classroom.forget(name)
            self.classroom.log(
                name, "-", "", f"quiet {(now - last) / 60:.0f} min: its place given to a new name"
            )

    def stand_up(self, student: str, seat: Seat) -> None:
        """One request of the student's answered; a seat that never became a student's is let go."""
        seat.asking -= 1
        if not seat.asking and student not in self.classroom.desks and self.seats.get(student) is seat:
            del self.seats[student]
