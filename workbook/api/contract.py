"""The Messages API's rules, in one place: what a request may hold, and what a recorded response must be.

Shapes come from the SDK's own types, not from code of ours: workbook/api/sdk_types.py builds checks
from `MessageCreateParams` (and `Message`, `ErrorResponse`, `RawMessageStreamEvent`), with every object
of a request closed, as the API refuses unknown fields.

What the types cannot say is written once, below, as rules: consecutive same-role turns are combined
(the SDK's own docstring: "Consecutive `user` or `assistant` turns in your request will be combined
into a single turn"), every tool_use answered by id in the next user turn, tool_results first, ids
unique, and the beta headers that change a rule. Every problem reads as the API's 400 does: the field
path (`messages.1.content.0.content`), then what was expected.

Four users ask it: `check` and the fixture loader, the in-process replay, the classroom server and the
grader. docs/faults.md's fidelity table lists each rule, what the API does, and what the workbook does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from workbook.api.explain import KINDS, explain
from workbook.api.sdk_types import message_validator, schema, validator
from workbook.api.wire import events_to_message, header_problems

MID_CONVERSATION_SYSTEM = "mid-conversation-system-2026-04-07"  # a beta name; a system message needs none
THREADS_BETA = "message-threads-2026-08-12"  # the beta `thread` needs (workbook/api/threads.py sends it too)
COMPACTION_BETA = "compact-2026-09-04"  # the beta `compaction` needs (workbook/api/compaction.py)


@dataclass(frozen=True)
class Problem:
    """One thing the API would refuse: where (the API's dotted path) and what was expected."""

    path: str  # "messages.1.content.0.content", or "" for the request as a whole
    text: str  # "Input should be a valid list"

    def __str__(self) -> str:
        return f"{self.path}: {self.text}" if self.path else self.text

    def under(self, place: str) -> str:
        """The problem placed inside a larger document: `.request` + `messages.1` -> `.request.messages.1`."""
        return f"{place}.{self}" if self.path else f"{place}: {self.text}"


@dataclass(frozen=True)
class Betas:
    """The betas a request names in its anthropic-beta header: some change a rule (SDK 2.14 sends a beta
    call to the same /v1/messages as any other, so the header is all that tells them apart)."""

    names: frozenset = field(default_factory=frozenset)

    @classmethod
    def of(cls, headers: Mapping) -> Betas:
        return cls(
            frozenset(n.strip() for n in (headers.get("anthropic-beta") or "").split(",") if n.strip())
        )


NO_BETAS = Betas()  # a request to the plain API, with no anthropic-beta header


# -- shapes: the SDK's types (workbook/api/sdk_types.py), each problem in the API's words ------------------


def shape_problems(name: str, value) -> list[Problem]:
    """Where `value` is not the SDK type `name` (empty when it is): the first problem, in the API's words."""
    if fits(name, value):
        return []
    root = schema(name)
    try:
        found = explain(root, root, value, [])
    except RecursionError:  # nested deeper than the words can follow
        found = None
    return [Problem(".".join(map(str, found[0])), found[1]) if found else Problem("", "Input is not valid")]


def fits(name: str, value) -> bool:
    """Whether `value` is the SDK type `name` (see workbook/api/sdk_types.py)."""
    return _valid(validator(name), value)


def message_fits(name: str, message) -> bool:
    """Whether one message is a message of the request type `name` ("request" or "beta_request")."""
    return _valid(message_validator(name), message)


def _valid(check, value) -> bool:
    import pydantic_core

    try:
        check.validate_python(value)
        return True
    except (pydantic_core.ValidationError, RecursionError, TypeError, ValueError):
        return False


# -- the rules the types cannot say ----------------------------------------------------------------


@dataclass
class Turn:
    """Consecutive same-role messages as the API reads them: one turn, each block with its own place."""

    role: str
    first: int  # index of its first message in the request
    blocks: list = field(default_factory=list)  # (message index, block index, block)
    dups: list = field(default_factory=list)  # its tool_use blocks whose id came before: Problems


def combined(messages: list) -> list[Turn]:
    """The conversation as the API reads it: consecutive user (or assistant) messages are one turn."""
    turns: list[Turn] = []
    for i, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        if not turns or turns[-1].role != role:
            turns.append(Turn(role, i))
        turns[-1].blocks += [(i, j, block) for j, block in enumerate(blocks) if isinstance(block, dict)]
    return turns


def combined_messages(messages: list) -> list[dict]:
    """The combined conversation as plain messages (role and a list of blocks): what is compared."""
    return [{"role": t.role, "content": [b for _, _, b in t.blocks]} for t in combined(messages)]


def conversation_problems(messages, betas: Betas = NO_BETAS) -> list[Problem]:
    """What the API would refuse in a well-shaped messages list that no type can say (empty when none)."""
    return Requests().rule_problems(messages, betas)


MALFORMED = Problem("messages", "Input should be a valid list of {role, content} objects")
REPEATED_ID = "`tool_use` ids must be unique"
EMPTY = "all messages must have non-empty content except for the optional final assistant message"
MISSING = "`tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` \
block must have a corresponding `tool_result` block in the next message."


@dataclass
class Conversation:
    """A messages list judged message by message, with the verdict the API gives it whole: each message's
    shape (the SDK's types) and the rules no type can say.

    `grown(messages)` judges only what `messages` add to the messages judged so far (when they start
    with them; else it judges them all, from nothing): a loop resends its whole history every turn, and
    each request then costs what its turn added. Judged from nothing, it is the one verdict there is.
    The rules, as the API reads a conversation: consecutive same-role messages are one turn, a `system`
    message between them is no turn of its own (_placement_problems: where it may stand); a turn is
    settled once another begins, and the last turn and the last message are judged as last.
    """

    shapes: bool = True  # whether each message's shape is judged too (not when its request's already was)
    messages: list = field(default_factory=list)  # the messages judged, as given
    fits: bool = True  # every message so far is a message of the SDK's MessageCreateParams
    malformed: bool = False  # a message that is not an object
    last: dict | None = None  # the last message
    empty: list = field(default_factory=list)  # messages with no content that are not the last
    systems: list = field(default_factory=list)  # indexes of `role: "system"` messages
    first_role: str | None = None
    settled: list = field(default_factory=list)  # the tool problems of every turn before `before`
    before: Turn | None = None  # the turn before the last one
    turn: Turn | None = None  # the last turn: more messages of its role join it
    seen: set = field(default_factory=set)  # every tool_use id so far

    def grown(self, messages: list) -> Conversation:
        """This conversation extended by what `messages` add to it, or `messages` judged afresh."""
        known = len(self.messages)
        extends = len(messages) >= known and messages[:known] == self.messages
        grown = self.copy() if extends else Conversation(self.shapes)
        for i in range(len(grown.messages), len(messages)):
            grown.add(i, messages[i])
        grown.messages = list(messages)
        return grown

    def copy(self) -> Conversation:
        turn = self.turn and Turn(
            self.turn.role, self.turn.first, list(self.turn.blocks), list(self.turn.dups)
        )
        return Conversation(
            self.shapes, self.messages, self.fits, self.malformed, self.last, list(self.empty),
            list(self.systems), self.first_role, list(self.settled), self.before, turn, set(self.seen),
        )  # fmt: skip

    def add(self, i: int, message) -> None:
        """Judge message `i`, the next one."""
        if not isinstance(message, dict):
            self.malformed, self.fits = True, False
            return
        if self.shapes and not (self.fits and message_fits("request", message)):
            self.fits = False
            if not message_fits("beta_request", message):  # its shape is the verdict: no rule needs
                return  # its blocks, were there a million of them
        if self.last is not None and _empty(self.last):
            self.empty.append(i - 1)
        self.last = message
        role, content = message.get("role"), message.get("content")
        if role == "system":
            self.systems.append(i)
            return
        if self.turn is None:
            self.first_role = role
        if self.turn is None or self.turn.role != role:
            self.settle()
            self.turn = Turn(role, i)
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for j, block in enumerate(blocks if isinstance(blocks, list) else []):
            if isinstance(block, dict):
                self.turn.blocks.append((i, j, block))
                if block.get("type") == "tool_use":
                    if block.get("id") in self.seen:
                        self.turn.dups.append(Problem(f"messages.{i}.content.{j}", REPEATED_ID))
                    self.seen.add(block.get("id"))

    def settle(self) -> None:
        """The last turn is followed now: its problems and its predecessor's can no longer change."""
        if self.turn is not None:
            self.settled += self.turn_problems(self.before, self.turn)
            self.before = self.turn

    def turn_problems(self, before: Turn | None, turn: Turn) -> list[Problem]:
        """Before's tool_use ids left unanswered by `turn`, then turn's own: repeated ids, its results."""
        problems = _missing_problems(before, turn) if before is not None else []
        problems += turn.dups
        if turn.role == "user":
            problems += _result_problems(turn, _asked_ids(before))
        return problems

    def problems(self, betas: Betas = NO_BETAS) -> list[Problem]:
        """The rules' verdict on the messages judged, as the last of them stand (empty when none)."""
        if self.malformed:
            return [MALFORMED]
        if not self.messages:
            return [Problem("messages", "at least one message is required")]
        problems = [Problem(f"messages.{i}", EMPTY) for i in self.empty]
        if _empty(self.last) and self.last.get("role") != "assistant":
            problems.append(Problem(f"messages.{len(self.messages) - 1}", EMPTY))
        problems += [p for i in self.systems for p in _placement_problems(self.messages, i)]
        if self.turn is not None and self.first_role != "user":
            problems.append(Problem("messages", 'first message must use the "user" role'))
        problems += self.settled
        if self.turn is not None:
            problems += self.turn_problems(self.before, self.turn) + _missing_problems(self.turn, None)
        return problems


# A `role: "system"` message: no beta; after a user message (or an assistant ending in server-tool use), last
# or before an assistant, text only (docs: build-with-claude/mid-conversation-system-messages, "Limitations").
SYSTEM_AFTER = (
    "a system message must immediately follow a user message (or an assistant message ending in server "
    "tool use); to instruct the model from the start, use the top-level `system` field"
)
SYSTEM_BEFORE = "a system message must be the last message or be followed by an assistant message"
SYSTEM_TEXT = "a system message may hold only text"


def _placement_problems(messages: list, i: int) -> list[Problem]:
    """Where the system message `messages[i]` stands against the documented placement (see SYSTEM_AFTER)."""
    before, after = messages[i - 1] if i else {}, messages[i + 1] if i + 1 < len(messages) else None
    last = (before.get("content") or [None])[-1] if isinstance(before.get("content"), list) else None
    kind = last.get("type", "") if isinstance(last, dict) and before.get("role") == "assistant" else ""
    srv = kind in ("server_tool_use", "mcp_tool_use") or (kind.endswith("_tool_result") and kind[0] != "t")
    where, content = f"messages.{i}.role", messages[i].get("content")
    problems = [] if before.get("role") == "user" or srv else [Problem(where, SYSTEM_AFTER)]
    if isinstance(after, dict) and after.get("role") != "assistant":
        problems.append(Problem(where, SYSTEM_BEFORE))
    if not isinstance(content, str) and {b.get("type") if isinstance(b, dict) else 0 for b in content} - {
        "text"
    }:
        problems.append(Problem(f"messages.{i}.content", SYSTEM_TEXT))
    return problems


def _empty(message: dict) -> bool:
    return message.get("content") in ("", [])


def _asked_ids(turn: Turn | None) -> set:
    return {b.get("id") for _, _, b in turn.blocks if b.get("type") == "tool_use"} if turn else set()


def _missing_problems(turn: Turn, following: Turn | None) -> list[Problem]:
    """An assistant turn's tool_use ids that the turn following it does not answer."""
    if turn.role != "assistant":
        return []
    answered = {b.get("tool_use_id") for _, _, b in following.blocks} if following else set()
    asked = [b.get("id") for _, _, b in turn.blocks if b.get("type") == "tool_use"]
    missing = [tool_id for tool_id in asked if tool_id not in answered]
    if not missing:
        return []
    return [Problem(f"messages.{turn.first}", MISSING.format(", ".join(map(str, missing))))]


UNEXPECTED = "unexpected `tool_use_id` found in `tool_result` blocks: {}. Each `tool_result` block must have \
a corresponding `tool_use` block in the previous message."
REPEATED = "each tool_use must have a single result. Found multiple `tool_result` blocks with id: {}"
NOT_FIRST = "`tool_result` blocks must come first in the user turn, before any other content"


def _result_problems(turn: Turn, open_ids: set) -> list[Problem]:
    problems, answered, others_yet = [], set(), False
    for i, j, block in turn.blocks:
        if block.get("type") != "tool_result":
            others_yet = True
            continue
        tool_id, where = block.get("tool_use_id"), f"messages.{i}.content.{j}"
        if tool_id not in open_ids:
            problems.append(Problem(where, UNEXPECTED.format(tool_id)))
        elif tool_id in answered:
            problems.append(Problem(where, REPEATED.format(tool_id)))
        elif others_yet:
            problems.append(Problem(where, NOT_FIRST))
        answered.add(tool_id)
    return problems


# Fields the API documents (docs.anthropic.com/en/api/messages, with ranges) that SDK 2.x's types dropped:
# "All of our models support these parameters" (anthropics/anthropic-sdk-python#376, a maintainer).
# Newer models refuse them ("`temperature` is deprecated for this model"): a model's rule, not judged here.
SAMPLING = {"temperature": ("number", 0, 1), "top_p": ("number", 0, 1), "top_k": ("integer", 0, None)}


def sampling_problems(body: dict) -> tuple[list[Problem], dict]:
    """The fields in SAMPLING, judged by their type and range: their problems, and the body without them."""
    problems = []
    for key, (kind, lo, hi) in ((k, SAMPLING[k]) for k in SAMPLING if k in body):
        if not KINDS[kind][0](body[key]):
            problems.append(Problem(key, f"Input should be {KINDS[kind][1]}"))
        elif body[key] < lo or (hi is not None and body[key] > hi):
            edge = f"greater than or equal to {lo}" if body[key] < lo else f"less than or equal to {hi}"
            problems.append(Problem(key, f"Input should be {edge}"))
    return problems, {k: v for k, v in body.items() if k not in SAMPLING} if body.keys() & SAMPLING else body


# The most output tokens any model takes (Claude's largest, 128K, as of 2026): the API refuses more, naming
# the model's own maximum; the workbook knows no model's, so it holds every model to the largest.
MAX_OUTPUT_TOKENS = 128_000


def max_tokens_problem(max_tokens: int) -> Problem:
    """max_tokens below 1, or above any model's output (the SDK's type says only `int`)."""
    if max_tokens < 1:
        return Problem("max_tokens", "Input should be greater than or equal to 1")
    return Problem(
        "max_tokens",
        f"{max_tokens} > {MAX_OUTPUT_TOKENS}, which is the most output tokens any model takes",
    )


class Requests:
    """Requests judged one after another (a recording's, a loop's), each at the cost of what its
    messages add to those of the request before (see Conversation): the verdict is always the API's
    on the whole request. A new Requests judges its first request whole, as request_problems does."""

    def __init__(self):
        self.sent = Conversation()  # the messages of the last request, as sent
        self.sent_list: list | None = None  # that request's own list, for rule_problems to know it again
        self.whole = Conversation(shapes=False)  # the last conversation judged by its rules

    def problems(self, body, betas: Betas = NO_BETAS) -> list[Problem]:
        """Everything the API would refuse in a request body (empty when none): shape, then the rules.
        A thread's conversation is judged once expanded (workbook/api/threads.py), so its rules wait."""
        problems = self.sent_problems(body, betas)
        if problems or body.get("thread") is not None:
            return problems
        return self.rule_problems(body["messages"], betas)

    def sent_problems(self, body, betas: Betas = NO_BETAS) -> list[Problem]:
        """What the API would refuse in a request as sent, before a thread is expanded: its shape (the
        SDK's MessageCreateParams, or its beta params, which the SDK sends to the same endpoint with no
        mark of their own) and the beta its `thread` needs."""
        if not isinstance(body, dict):
            return [Problem("", "the request body must be a JSON object with model, max_tokens and messages")]
        messages = body.get("messages")
        sent = self.sent.grown(messages) if isinstance(messages, list) else None
        fields = body | {"messages": []}  # each message is judged in `sent`, the rest of the request here
        if sent is None or not (sent.fits and fits("request", fields)):
            problems = request_shape_problems(body)  # whole: the beta params, and the words if neither
            if problems:
                return problems
        self.sent, self.sent_list = sent or Conversation(), messages
        if "max_tokens" in body and not 1 <= body["max_tokens"] <= MAX_OUTPUT_TOKENS:
            return [max_tokens_problem(body["max_tokens"])]
        for name, beta in (("thread", THREADS_BETA), ("compaction", COMPACTION_BETA)):
            if body.get(name) is not None and beta not in betas.names:
                return [Problem(name, f"requires the beta header `anthropic-beta: {beta}`")]
        return []

    def rule_problems(self, messages, betas: Betas = NO_BETAS) -> list[Problem]:
        """What the API would refuse in a well-shaped conversation that no type can say (empty when none)."""
        if not isinstance(messages, list):
            return [MALFORMED]
        self.whole = self.sent if messages is self.sent_list else self.whole.grown(messages)
        return self.whole.problems(betas)


def sent_problems(body, betas: Betas = NO_BETAS) -> list[Problem]:
    """What the API would refuse in a request as sent (see Requests.sent_problems)."""
    return Requests().sent_problems(body, betas)


def request_problems(body, betas: Betas = NO_BETAS) -> list[Problem]:
    """Everything the API would refuse in a request body, judged whole (see Requests.problems)."""
    return Requests().problems(body, betas)


def api_rule_problems(messages) -> list[str]:
    """What the real API would reject in this messages list, in its words (empty when it is valid)."""
    return [str(p) for p in conversation_problems(messages, BETA_ALL)]


def messages_problems(messages) -> list[str]:
    """Shape problems in a messages list alone (a saved conversation): each `.messages.1.content...`."""
    if not isinstance(messages, list):
        return [".messages: Input should be a valid list"]
    probe = {"model": "m", "max_tokens": 1, "messages": messages}
    return [f".{p}" for p in request_shape_problems(probe)]


def request_shape_problems(body) -> list[Problem]:
    """Where a request is neither the SDK's MessageCreateParams nor its beta params (the beta's are
    sent to the same endpoint with no mark of their own), in the beta params' words (SAMPLING's apart)."""
    problems, body = sampling_problems(body) if isinstance(body, dict) else ([], body)
    if problems:
        return problems[:1]
    if fits("request", body):
        return []
    return shape_problems("beta_request", body)


def refusal_body(problem: Problem | str, hint: str = "") -> dict:
    """The API's 400 for a refused request; the workbook's hint for a student after its own words."""
    message = str(problem) + (f" — {hint}" if hint else "")
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


# -- recorded responses ----------------------------------------------------------------------------

STATUSES = (200, *range(400, 600))  # what the Messages API answers: a Message, or an error


def exchange_problems(exchange, requests: Requests | None = None) -> list[str]:
    """What is wrong with one recorded exchange, each naming its place (`.request.messages.1...`);
    `requests`: a recording's exchanges judged in order, each request on what it adds."""
    if not isinstance(exchange, dict) or not isinstance(exchange.get("request"), dict):
        return [": needs a `request` object"]
    request, response = exchange["request"], exchange.get("response")
    requests = requests or Requests()
    problems = [p.under(".request") for p in requests.problems(request, BETA_ALL)]
    if not isinstance(response, dict):
        return problems + [".response: must be an object"]
    found = response_problems(response)
    if not found and not problems:
        found = reply_rule_problems(response, requests.sent.seen)
    return problems + [f".response{p}" for p in found]


def reply_rule_problems(response: dict, asked_before: set) -> list[str]:
    """What the types cannot say of a valid recorded reply: its tool_use ids are new (each one is
    answered by id, so two alike cannot both be), and no usage count is below zero."""
    if response.get("status") != 200:
        return []
    where, message = (
        (".stream", events_to_message(response["stream"]))
        if "stream" in response
        else (".body", response.get("body"))
    )
    seen = set(asked_before)
    for j, block in enumerate(message.get("content") or []):
        if block.get("type") == "tool_use":
            if block.get("id") in seen:
                return [f"{where}.content.{j}.id: {REPEATED_ID} (this id was used before)"]
            seen.add(block.get("id"))
    negative = _negative_count(message.get("usage"), "usage")
    return [f"{where}.{negative}: a token count is never below zero"] if negative else []


def _negative_count(value, place: str) -> str | None:
    """The place of the first number below zero in a usage object (they nest: server_tool_use...)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        return place
    for key, item in value.items() if isinstance(value, dict) else ():
        found = _negative_count(item, f"{place}.{key}")
        if found:
            return found
    return None


# A recording keeps no request headers: a recorded request may use any beta a rule depends on.
BETA_ALL = Betas(frozenset({MID_CONVERSATION_SYSTEM, THREADS_BETA, COMPACTION_BETA}))


def response_problems(response: dict) -> list[str]:
    """A recorded response: a status the API sends, headers a client reads, a body or stream the SDK reads."""
    if "error" in response:
        return (
            [] if response["error"] in ("connect", "timeout") else [".error: must be `connect` or `timeout`"]
        )
    status = response.get("status")
    if not isinstance(status, int) or isinstance(status, bool) or status not in STATUSES:
        return [".status: must be 200 or an error status (400 to 599), as the Messages API answers"]
    problems = [f".headers{p}" for p in header_problems(response.get("headers", {}))]
    if status == 200 and "stream" in response:
        return problems + [f".stream{p}" for p in stream_problems(response["stream"])]
    if "stream" in response:
        return problems + [".stream: only a 200 response streams; an error response has a JSON `body`"]
    name = "message" if status == 200 else "error"
    return problems + [p.under(".body") for p in shape_problems(name, response.get("body"))]


EVENT_NAMES = ("message_start", "message_delta", "message_stop", "content_block_start",
               "content_block_delta", "content_block_stop", "ping", "error")  # fmt: skip


def stream_problems(events) -> list[str]:
    """{event, data} pairs the SDK parses (RawMessageStreamEvent, ping, error) that add up to a Message."""
    if not isinstance(events, list) or not events:
        return [": must be a non-empty list of {event, data}"]
    for n, event in enumerate(events):
        problem = _event_problem(event)
        if problem:
            return [f"[{n}]{problem}"]
    problems = _block_order_problems(events)
    if problems:
        return problems
    try:  # a streaming loop reads the events, a plain one the Message they add up to: both must work
        message = events_to_message(events)
    except Exception as err:  # whatever a malformed stream raises, in the SDK's place
        return [f": the events do not add up to a Message ({type(err).__name__})"]
    if message.get("type") == "error":
        return []
    return [f": adds up to a Message that is not valid: {p}" for p in shape_problems("message", message)]


def _event_problem(event) -> str | None:
    if not isinstance(event, dict) or not isinstance(event.get("data"), dict):
        return ": must be {event, data} with a JSON object as data"
    name = event.get("event")
    if name not in EVENT_NAMES:
        return f".event: must be one of the API's events ({', '.join(EVENT_NAMES)})"
    if event["data"].get("type") != name:
        return ".event: must equal data's `type`, as the API sends it"
    kind = {"ping": None, "error": "error"}.get(name, "event")
    problems = shape_problems(kind, event["data"]) if kind else []
    return problems[0].under(".data") if problems else None


def _block_order_problems(events: list[dict]) -> list[str]:
    """Blocks start in order 0, 1, 2 ... and every delta or stop names one already started."""
    started = 0
    for n, event in enumerate(events):
        kind, index = event["event"], event["data"].get("index")
        if not kind.startswith("content_block_"):
            continue
        if kind == "content_block_start" and index != started:
            return [f"[{n}]: content block {index} starts where block {started} should"]
        if kind != "content_block_start" and not 0 <= index < started:
            return [f"[{n}]: content block {index} has not started"]
        started += kind == "content_block_start"
    return []
