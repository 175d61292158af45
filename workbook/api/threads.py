"""threads — server-held conversations (the SDK's message threads), for replay and the classroom server.

With the beta `message-threads-2026-08-12`, a client sends the whole conversation once, with
`thread: {"type": "create"}`. The server holds it, the reply included, under the reply's `id`. Each
later request carries `thread: {"type": "continue", "previous_message_id": <that id>}` and only the
new messages; `system` and `tools` stay with the thread and are not sent again. The response looks
as always: the client reads the next `previous_message_id` from the reply's own `id`. The SDK's
tool runner (`client.beta.messages.tool_runner`) works this way by default (anthropic 2.14,
`lib/threads/_thread_state.py`).

Replay serves a thread by rebuilding the request the client would have sent without one: what the
thread holds, then what came now. That request is then checked by the API's rules and compared with
the recording like any other. What replay cannot hold is refused as the API refuses it, a 400 with
`error.details.error_code: "thread_unsupported_request"`; the SDK then drops the thread and sends the
whole history itself.

What is held is bounded: each thread is kept as its compact JSON (about the size of the request that
made it, where parsed objects took three times that), at most PER_STUDENT_BYTES for one client and
TOTAL_BYTES for the whole process, the oldest dropped first. A continue the replay refuses once its
thread is opened drops that thread too, so that sending it again costs a lookup, not the thread's
expansion. A dropped thread, continued later, gets the API's 404 `thread_not_found`, and the SDK sends
the whole conversation again under a new thread.
"""

from __future__ import annotations

import itertools
import json
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass

BETA = "message-threads-2026-08-12"  # the anthropic-beta value the SDK sends along with `thread`
HELD_BY_THREAD = ("system", "tools")  # a continue takes these from the thread; the API refuses them resent
# Fields whose effect on a held conversation happens on the server (edits, another model answering):
# replay cannot reproduce that, so a thread with them is refused and the SDK falls back by itself.
CANNOT_HOLD = ("context_management", "fallbacks")
THREAD_SHAPES = '{"type": "create"} or {"type": "continue", "previous_message_id": "msg_..."}'
PER_STUDENT_BYTES = 64 * 2**20  # threads one client holds: above, its oldest are dropped
TOTAL_BYTES = 256 * 2**20  # threads every client holds together: above, the oldest of all are dropped


class Refusal(Exception):
    """A thread request answered with the API's own error: HTTP status, error type, message, error_code."""

    def __init__(self, status: int, kind: str, message: str, code: str | None = None, **details):
        super().__init__(message)
        self.status, self.kind = status, kind
        self.details = {"error_code": code, **details} if code else None

    def body(self) -> dict:
        error = {"type": self.kind, "message": str(self)}
        if self.details:
            error["details"] = self.details
        return {"type": "error", "error": error}


@dataclass
class Held:
    """One thread as the server keeps it after a reply: compact JSON, parsed again when continued."""

    data: bytes  # {"fields": system and tools as the `create` sent them, "messages": the conversation}

    @classmethod
    def of(cls, fields: dict, messages: list) -> Held:
        text = json.dumps({"fields": fields, "messages": messages}, ensure_ascii=False, separators=(",", ":"))
        return cls(text.encode())

    def open(self) -> tuple[dict, list]:
        held = json.loads(self.data)
        return held["fields"], held["messages"]


class Ledger:
    """The bytes every Threads in the process holds, oldest first; above `most`, the oldest are dropped."""

    def __init__(self, most: int = TOTAL_BYTES):
        self.most, self.total = most, 0
        self.entries: OrderedDict[tuple[int, str], tuple[weakref.ref, int]] = OrderedDict()
        self.lock = threading.Lock()  # the classroom judges big requests on worker threads
        self.released: list[tuple[int, str]] = []  # (owner, reply id) of clients collected meanwhile

    def add(self, owner: Threads, reply_id: str, size: int) -> None:
        with self.lock:
            self.settle()
            self.entries[(owner.number, reply_id)] = (weakref.ref(owner), size)
            self.total += size
            while self.total > self.most and self.entries:
                (_, oldest), (ref, dropped) = self.entries.popitem(last=False)
                self.total -= dropped
                keeper = ref()
                if keeper is not None:
                    keeper.forget(oldest)

    def remove(self, owner_id: int, reply_id: str) -> None:
        with self.lock:
            self.settle()
            self.forget(owner_id, reply_id)

    def forget(self, owner_id: int, reply_id: str) -> None:
        _, size = self.entries.pop((owner_id, reply_id), (None, 0))
        self.total -= size

    def settle(self) -> None:
        """Stop counting the threads of clients collected since (queued by `release`, lock-free, since
        the collector may run inside any allocation, this ledger's own included)."""
        while self.released:
            self.forget(*self.released.pop())


LEDGER = Ledger()  # the process's: one classroom server, or the notebooks' in-process replays
NUMBERS = itertools.count()  # each Threads' own number in the ledger (an id() is reused once freed)


class Threads:
    """The threads one client has on a replay, by the id of the reply each ends with.

    A replay's reply ids come from its recording, so there are never more threads than recorded replies;
    their bytes are bounded per client (`most`) and, through the ledger, for the whole process.
    """

    def __init__(self, most: int = PER_STUDENT_BYTES, ledger: Ledger = LEDGER):
        self.held: dict[str, Held] = {}  # oldest first
        self.continued: set[str] = set()  # replies a continue has moved on from: each is continued once
        self.most, self.bytes, self.ledger, self.number = most, 0, ledger, next(NUMBERS)
        # When this client's threads are collected, the ledger stops counting them.
        weakref.finalize(self, release, ledger, self.number, self.held)

    def expand(self, body: dict) -> tuple[dict, dict | None]:
        """The request as it would be without a thread (what is held comes first), and its `thread` field.

        A request without `thread` comes back unchanged. A thread replay cannot serve raises Refusal.
        """
        thread = body.get("thread")
        if thread is None:
            return body, None
        if not isinstance(thread, dict) or thread.get("type") not in ("create", "continue"):
            raise Refusal(400, "invalid_request_error", f"thread: must be {THREAD_SHAPES}")
        unsupported = [name for name in CANNOT_HOLD if body.get(name) is not None]
        if unsupported:
            raise Refusal(
                400,
                "invalid_request_error",
                f"a replay cannot hold a thread with {', '.join(unsupported)}: "
                "send the whole conversation without `thread`",
                "thread_unsupported_request",
                unsupported=unsupported,
            )
        request = {key: value for key, value in body.items() if key != "thread"}
        if thread["type"] == "create":
            return request, thread
        held = self.find(thread.get("previous_message_id"), body)
        if not isinstance(body.get("messages"), list):
            raise Refusal(400, "invalid_request_error", "messages: must be a list of {role, content} objects")
        fields, messages = held.open()
        return fields | request | {"messages": messages + body["messages"]}, thread

    def find(self, previous, body: dict) -> Held:
        """The thread a continue names; the API's error when there is none, or it moved on, or is resent."""
        if not isinstance(previous, str) or not previous:
            raise Refusal(400, "invalid_request_error", "thread.previous_message_id: a continue needs the id")
        if previous in self.continued:
            raise Refusal(
                400,
                "invalid_request_error",
                f"thread.previous_message_id: {previous} was already continued, and a reply is continued "
                "once — continue from the thread's latest reply id",
                "thread_already_continued",
            )
        held = self.held.get(previous)  # read once: another client's new thread may drop it meanwhile
        if held is None:
            raise Refusal(
                404,
                "not_found_error",
                f"thread.previous_message_id: no thread here ends with the reply {previous} — send the "
                'whole conversation with thread {"type": "create"}',
                "thread_not_found",
            )
        resent = [name for name in HELD_BY_THREAD if name in body]
        if resent:
            raise Refusal(
                400,
                "invalid_request_error",
                f"{' and '.join(resent)}: a continue takes these from the thread and must not send them; "
                "to change them, start a new thread with the whole conversation",
            )
        return held

    def hold(self, thread: dict | None, request: dict, reply: dict | None) -> None:
        """After a reply to a thread request: hold the conversation, reply included, under the reply's id.

        `request` is the expanded request (see `expand`); `reply` is the Message served, None for an
        error, which holds nothing new (a refused continue lets its thread go: see `let_go`).
        """
        if thread is None or reply is None or not isinstance(reply.get("id"), str):
            return
        if thread["type"] == "continue":
            previous = thread["previous_message_id"]
            self.drop(previous)
            self.continued.add(previous)
        fields = {name: request[name] for name in HELD_BY_THREAD if name in request}
        reply_id = reply["id"]
        self.continued.discard(reply_id)  # a replay restarted from turn 1 hands out the same ids again
        self.drop(reply_id)
        held = Held.of(fields, with_reply(request["messages"], reply.get("content", [])))
        self.held[reply_id], self.bytes = held, self.bytes + len(held.data)
        while self.bytes > self.most:  # this client's oldest first, the one just made last
            self.drop(next(iter(self.held)))
        if reply_id in self.held:
            self.ledger.add(self, reply_id, len(held.data))

    def let_go(self, thread: dict | None) -> None:
        """After a refused continue: the thread it named is not kept (a create, or no thread: nothing)."""
        if thread is not None and thread["type"] == "continue":
            self.drop(thread["previous_message_id"])

    def drop(self, reply_id: str) -> None:
        """Let go of one thread (continued, or the oldest over a cap); a continue of it is then a 404."""
        if self.forget(reply_id):
            self.ledger.remove(self.number, reply_id)

    def forget(self, reply_id: str) -> bool:
        """Remove one thread from this client's own (the ledger calls this when it drops the oldest)."""
        held = self.held.pop(reply_id, None)
        if held is not None:
            self.bytes -= len(held.data)
        return held is not None


def release(ledger: Ledger, owner_id: int, held: dict) -> None:
    """A client's threads are gone (its transport or cursor was collected): the ledger stops counting them."""
    ledger.released.extend((owner_id, reply_id) for reply_id in list(held))


def with_reply(messages: list, content: list) -> list:
    """The conversation with the reply appended. A conversation that ends on the assistant (a turn
    paused with pause_turn, resumed by a continue with no new messages) is continued by the reply, so
    its content joins that message, as the API holds one turn."""
    last = messages[-1] if messages else {}
    if last.get("role") != "assistant":
        return [*messages, {"role": "assistant", "content": content}]
    before = last.get("content")
    before = [{"type": "text", "text": before}] if isinstance(before, str) else list(before or [])
    return [*messages[:-1], {"role": "assistant", "content": before + content}]
