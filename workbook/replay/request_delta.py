"""A recording's requests stored as what is new since the previous request, rebuilt in full on load.

A loop resends its whole history every turn, so a recording that stores each request whole grows with
the square of its turns. Stored as a delta, each exchange holds only what its turn added, and the file
grows with the turns:

    {"request_delta": {"messages_kept": 4,           # the first 4 messages of the request before
                       "messages_added": [...],      # then these
                       "set": {"max_tokens": 64000},  # fields new or changed since the request before
                       "unset": ["tool_choice"]},    # fields it had that this one has not
     "response": {...}}

The first exchange (and one whose request is not a Messages request) holds a whole `request`. Both
forms load; everything after the loader (check, replay, the server, the grader, the notebooks) sees
whole requests. What a request may hold is judged once it is rebuilt, by workbook/api/contract.py; this
module only judges whether a delta applies to the request before it.
"""

from __future__ import annotations

import json

from workbook.api.messages import common_prefix

_ABSENT = object()  # a field the request before did not have
DELTA_FIELDS = ("messages_kept", "messages_added", "set", "unset")
MAX_REBUILT_MESSAGES = 5_000_000  # messages in all rebuilt requests (1,000 turns of s06: ~1,000,000)


def delta_of(previous: dict | None, request) -> dict:
    """The exchange field that stores `request`: `request_delta` against `previous`, or `request` whole
    when there is nothing to build on (the first exchange, or requests that are not Messages requests)."""
    if not _buildable(previous) or not _buildable(request):
        return {"request": request}
    old, new = previous["messages"], request["messages"]
    kept = common_prefix(old, new)
    delta = {"messages_kept": kept, "messages_added": new[kept:]}
    changed = {k: v for k, v in request.items() if k != "messages" and previous.get(k, _ABSENT) != v}
    gone = [k for k in previous if k != "messages" and k not in request]
    if changed:
        delta["set"] = changed
    if gone:
        delta["unset"] = gone
    return {"request_delta": delta}


def _buildable(request) -> bool:
    return isinstance(request, dict) and isinstance(request.get("messages"), list)


def applied(previous: dict, delta: dict) -> dict:
    """The whole request a checked delta stands for. Kept messages are the previous request's own
    objects, not copies: a 1,000-turn fixture holds each message once, not once per turn."""
    request = {k: v for k, v in previous.items() if k not in delta.get("unset", ())}
    request.update(delta.get("set", {}))
    request["messages"] = previous["messages"][: delta["messages_kept"]] + delta["messages_added"]
    return request


def delta_problem(previous, delta) -> str | None:
    """Why `delta` cannot be applied to `previous` (a place after `request_delta`, and what is wrong),
    or None. Fixtures are untrusted: every field is checked before anything is built from it."""
    if previous is None:
        return ": the first exchange needs a whole `request`: there is no request before it to build on"
    if not _buildable(previous):
        return ": the request before it is not an object with a `messages` list, so nothing builds on it"
    if not isinstance(delta, dict):
        return f": must be an object of {', '.join(DELTA_FIELDS)}"
    unknown = [k for k in delta if k not in DELTA_FIELDS]
    if unknown:
        return f".{_shown(unknown[0])}: not a field of a request delta ({', '.join(DELTA_FIELDS)})"
    kept, count = delta.get("messages_kept"), len(previous["messages"])
    if not isinstance(kept, int) or isinstance(kept, bool) or not 0 <= kept <= count:
        return f".messages_kept: must be a whole number from 0 to {count}, the messages of the request before"
    if not isinstance(delta.get("messages_added"), list):
        return ".messages_added: must be a list of the messages this request adds (may be empty)"
    changed, gone = delta.get("set", {}), delta.get("unset", [])
    if not isinstance(changed, dict):
        return ".set: must be an object of the request's fields that are new or changed"
    if not isinstance(gone, list) or not all(isinstance(name, str) for name in gone):
        return ".unset: must be a list of field names"
    for name in [*changed, *gone]:
        if name == "messages":
            return ".set/unset: `messages` changes only through messages_kept and messages_added"
    missing = [name for name in gone if name not in previous or name in changed]
    if missing:
        return f".unset: `{_shown(missing[0])}` is not a field of the request before, or is also set"
    return None


def _shown(name: str) -> str:
    """A field name from an untrusted file as a one-line message may show it: escapes stay escaped."""
    return name[:40] if name.isidentifier() else json.dumps(name)[:40]


def rebuilt_exchanges(exchanges: list) -> tuple[list, str | None]:
    """The exchanges with every `request_delta` rebuilt into a whole `request`, and the first problem
    (a place such as `exchanges[3].request_delta.messages_kept`, and what is wrong), or None.

    An exchange that is not an object is passed on as it is, for the fixture's own checks to name."""
    rebuilt, previous, total = [], None, 0
    for n, exchange in enumerate(exchanges):
        if isinstance(exchange, dict) and "request_delta" in exchange:
            if "request" in exchange:
                return rebuilt, f"exchanges[{n}]: holds both `request` and `request_delta` — keep one"
            problem = delta_problem(previous, exchange["request_delta"])
            if problem:
                return rebuilt, f"exchanges[{n}].request_delta{problem}"
            request = applied(previous, exchange["request_delta"])
            exchange = {"request": request} | {k: v for k, v in exchange.items() if k != "request_delta"}
        previous = exchange.get("request") if isinstance(exchange, dict) else None
        total += len(previous["messages"]) if _buildable(previous) else 0
        if total > MAX_REBUILT_MESSAGES:  # a few bytes of deltas must not rebuild into gigabytes
            too_many = f"the requests rebuilt so far hold over {MAX_REBUILT_MESSAGES:,} messages"
            return rebuilt, f"exchanges[{n}]: {too_many}"
        rebuilt.append(exchange)
    return rebuilt, None


def stored_exchanges(exchanges: list[dict]) -> list[dict]:
    """Whole exchanges as a fixture stores them: each request as a delta of the one before."""
    stored, previous = [], None
    for exchange in exchanges:
        request = exchange["request"]
        stored.append(delta_of(previous, request) | {k: v for k, v in exchange.items() if k != "request"})
        previous = request
    return stored
