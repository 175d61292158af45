"""JSON as the API takes it, read at a bounded cost: a request body, a fixture, a journal line.

What the API refuses, refused here before anything is built: NaN and Infinity (Python's json takes
them; JSON has no such numbers), and a lone surrogate (`"\\ud800"`: it parses, then breaks every
print and every write of it).

What a parse costs is measured on the bytes first, since Python's objects are far bigger than the text
they come from: `{}` is 3 bytes of JSON and about 90 bytes of heap (an empty dict and its slot in a
list). A body of bare `{}` blocks would weigh 30 times its size before any check could look at it, so
the objects and arrays a text holds are counted outside its strings, with one regular expression and
bytes.count (both in C), and a text holding more than one per MIN_BYTES_PER_CONTAINER bytes is refused
unread. Real recordings hold one per 90 bytes or more (fixtures/, tests/classroom/clients/). With
that cap a parse costs at most about 10 times the text's size: a string or a number costs at most that
much for its bytes, and objects and arrays are held to about 3 times.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate

MAX_DEPTH = 64  # a real request nests about 10 deep; far deeper only exhausts the stack
MIN_BYTES_PER_CONTAINER = 32  # at most one object or array per 32 bytes of text (see the docstring)
FREE_CONTAINERS = 10_000  # any text may hold this many (a small request of short blocks is fine)
# The API's own lowest cost per object (`{"type":"text","text":""}`) is 25 bytes; its recordings', 90.

JSON_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"')  # a JSON string, escapes included (unrolled)
NOT_BRACKETS = bytes(range(256)).translate(None, b"[]{}")
# Any escape, a surrogate pair taken whole: what is left that starts with \uD8..\uDF is half a pair.
ESCAPE = re.compile(rb"\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|.)")
MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


class JsonRefused(ValueError):
    """A JSON text the workbook will not read: one line saying why."""


def loads(raw: bytes | bytearray):
    """The JSON value of `raw`, or JsonRefused (one line): not UTF-8, not JSON, NaN or Infinity,
    a lone surrogate, nested past MAX_DEPTH, or more objects and arrays than its size allows."""
    return loads_measured(raw)[0]


def loads_measured(raw: bytes | bytearray) -> tuple[object, int]:
    """`loads`, and what the value costs on the heap (`measured`: for caps that count memory)."""
    problem, heap = measured(raw)
    if problem:
        raise JsonRefused(problem)
    return parsed(raw), heap


SHARED_PARSE_BYTES = 256 * 1024  # a text at least this big is parsed so that other threads run meanwhile


def parsed(raw: bytes | bytearray):
    """`raw` parsed, once measured() has found nothing wrong with it. json.loads holds the interpreter
    for the whole parse (about 150 ms for 17 MB of small blocks), and every other thread waits, the
    classroom's event loop among them; a hook written in Python, called for each object of a big text,
    lets the interpreter switch threads as it goes."""
    hook = {"object_pairs_hook": object_in_python} if len(raw) >= SHARED_PARSE_BYTES else {}
    try:
        return json.loads(bytes(raw).decode("utf-8"), parse_constant=refuse_constant, **hook)
    except RecursionError:
        raise JsonRefused(f"nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as err:  # not UTF-8, not JSON (JSONDecodeError), a number of 5,000 digits
        raise JsonRefused(" ".join(str(err).split())[:200]) from None


def object_in_python(pairs: list) -> dict:
    """A JSON object made by Python code (not C's `dict`), where the interpreter may switch threads."""
    return dict(pairs)


# What a parsed value costs on Python's heap beyond its text, measured on real requests (a dict with a few
# keys, a str's header): an estimate on the high side, for caps that count memory, not bytes.
CONTAINER_HEAP, STRING_HEAP = 120, 50


def measured(raw: bytes | bytearray) -> tuple[str | None, int]:
    """What makes `raw` too costly or not JSON as the API takes it, read from its bytes (None if
    fine), and what `raw` will cost on the heap once parsed (bytes, estimated from its objects, arrays
    and strings: a body of short blocks weighs 8 times its size, a recording 2)."""
    brackets, strings = outside_strings(raw)
    containers = brackets.count(b"{") + brackets.count(b"[")
    heap = len(raw) + CONTAINER_HEAP * containers + STRING_HEAP * strings
    return _problem(raw, brackets, containers), heap


WINDOW = 1 << 20  # bytes read at one go: the regular expression holds the interpreter while it runs


def outside_strings(raw: bytes | bytearray) -> tuple[bytes, int]:
    """The brackets of `raw` outside its strings, and how many strings it holds, read a WINDOW at a time
    so that other threads run between windows (one pass over 18 MB held every other thread for 360 ms).
    A string a window cuts is left whole for the next: with every string before it taken out, the first
    quote left in a window opens it."""
    pieces, strings, at = [], 0, 0
    window = WINDOW
    while at < len(raw):
        end = min(len(raw), at + window)
        stripped, n = JSON_STRING.subn(b"", raw[at:end])
        cut = stripped.find(b'"') if end < len(raw) else -1
        if cut == 0 and n == 0:  # one string longer than the window: read it whole
            window *= 2
            continue
        if cut >= 0:  # the window ends inside a string: it begins the next window
            end -= len(stripped) - cut
            stripped = stripped[:cut]
        pieces.append(stripped.translate(None, NOT_BRACKETS))
        strings, at, window = strings + n, end, WINDOW
    return b"".join(pieces), strings


def _problem(raw: bytes | bytearray, brackets: bytes, containers: int) -> str | None:
    most = max(FREE_CONTAINERS, len(raw) // MIN_BYTES_PER_CONTAINER)
    if containers > most and depth(brackets[: 2 * MAX_DEPTH]) > MAX_DEPTH:  # its start says enough
        return f"nested more than {MAX_DEPTH} levels deep"
    if containers > most:
        return (
            f"holds {containers:,} JSON objects and arrays in {len(raw):,} bytes; the workbook reads at "
            f"most one per {MIN_BYTES_PER_CONTAINER} bytes ({most:,} here): empty blocks are not content"
        )
    if depth(brackets) > MAX_DEPTH:
        return f"nested more than {MAX_DEPTH} levels deep"
    if MAYBE_SURROGATE.search(raw) and lone_surrogate(raw):
        return r"holds a lone surrogate (a \ud800-style escape that is half a character, not text)"
    return None


def depth(brackets: bytes) -> int:
    """How deeply a run of brackets nests (its strings already taken out)."""
    return max(accumulate(1 if c in b"[{" else -1 for c in brackets), default=0)


def text_depth(raw: bytes) -> int:
    """How deeply a JSON text nests, from its brackets outside strings: no parse, no tree walk."""
    return depth(JSON_STRING.sub(b"", raw).translate(None, NOT_BRACKETS))


def lone_surrogate(raw: bytes | bytearray) -> bool:
    """Whether an escape in `raw` is half a surrogate pair (escapes read left to right, so `\\\\ud800`,
    an escaped backslash before `ud800`, is text and not a surrogate)."""
    return any(m.group().startswith((b"\\ud", b"\\uD")) and m.group()[3:4] in b"89abcdefABCDEF"
               and len(m.group()) == 6 for m in ESCAPE.finditer(raw))  # fmt: skip


def refuse_constant(constant: str):
    """json.loads' parse_constant: NaN, Infinity and -Infinity are not JSON numbers."""
    raise JsonRefused(f"{constant} is not a JSON number")
