"""reasons — judging one rung's run, and saying why in the student's terms.

The replay server (the contract) says what was wrong with a request; its words are kept, and the
grader's hint comes after them. A run is the student's loop's work, not the library's: a request the
SDK retried by itself (`x-stainless-retry-count` above 0) fails the rung unless the teacher accepts
it, and a stop that only an uncaught exception made is not the loop stopping. The protocol's own
recoveries (the thread fallback) are not mistakes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from workbook.api import compare
from workbook.api.messages import result_text
from workbook.api.wire import stop_reason

SDK_RETRY_FIX = "Set max_retries=0 and retry in your loop (s03)"
STDIN_CLOSED = "stdin is closed when graded: read the task from the last argument or from AGENT_TASK"
NO_REQUEST = (
    "the grader sets ANTHROPIC_BASE_URL to its replay server and gives the task as the last argument "
    "and in AGENT_TASK"
)
READ_STDIN = re.compile(r"\bEOF|\bstdin\b", re.IGNORECASE)  # EOFError, "EOF when reading", "…through stdin"
HELPERS = {  # x-stainless-helper values -> the library feature, in words
    "BetaToolRunner": "the SDK's tool runner ran the loop",
    "compaction": "the SDK compacted the conversation",
}
TABLE_DRAWING = re.compile(r"[\u2500-\u259f]")  # box drawing and block elements: a summary table's
ESCAPE_CODE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


@dataclass
class Seen:
    """One request as the replay server answered it, and what the client's own headers said."""

    turn: int
    body: object
    mistake: str | None
    retry_count: int = 0  # x-stainless-retry-count: how many times the SDK had already tried this
    helpers: tuple = ()  # x-stainless-helper: the SDK helpers that sent it
    fallback: bool = False  # a thread refused as documented: the client falls back, it is no mistake
    side: bool = False  # a side request (a title, a quota probe, count_tokens): answered, no turn used


@dataclass
class Outcome:
    """What a rung's run left behind: the requests in order, the exit code, what the program printed."""

    seen: list[Seen]
    code: int | None  # None: stopped by the timeout
    output: str
    server_log: list[str]

    @property
    def last_line(self) -> str:
        """The program's last words: the error it crashed on, with where (a traceback, a Node.js stack
        trace), else the last line it printed."""
        return crash_line(self.output) or last_line(self.output)


@dataclass
class Verdict:
    """A rung's judgement: the first problem (None: passed) and the library features the run used."""

    problem: str | None
    library: list[str] = field(default_factory=list)


def last_line(output: str) -> str:
    """The last thing the program printed, in one short line: no colours, no table rows, no controls."""
    lines = [ESCAPE_CODE.sub("", line).strip() for line in output.splitlines()]
    lines = [line for line in lines if re.search(r"\w", line) and not TABLE_DRAWING.search(line)]
    if not lines:
        return ""
    return one_line(lines[-1])


def one_line(text: str, most: int = 160) -> str:
    return "".join(c for c in text if c.isprintable())[:most]


PY_FRAME = re.compile(r'\s+File "(?P<file>[^"]+)", line (?P<line>\d+)')
JS_FRAME = re.compile(r"\s+at (?:async )?(?:.*? \()?(?P<file>[^\s()]+?):(?P<line>\d+):\d+\)?(?: \{)?$")
LIBRARY = re.compile(r"site-packages|dist-packages|/lib/python\d|node_modules|^node:|^<frozen")


def crash_line(output: str) -> str | None:
    """When the program ended in an uncaught error, that error's own line and the place in the program's
    own code it came from ("TypeError: x is null (at loop.js:12)"), not the runtime's last words (Node.js
    prints its version last); None when it did not."""
    lines = [ESCAPE_CODE.sub("", line).rstrip() for line in output.splitlines()]
    found = python_crash(lines) or node_crash(lines)
    if found is None:
        return None
    error, frames = found
    own = [f for f in frames if not LIBRARY.search(f.group("file"))]
    where = f" (at {own[-1].group('file').rsplit('/', 1)[-1]}:{own[-1].group('line')})" if own else ""
    room = 160 - len(where)
    error = one_line(error, room + 1)
    return (error if len(error) <= room else error[: room - 1] + "…") + where


def python_crash(lines: list[str]):
    """A traceback's exception line and its frames (innermost last), or None."""
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    if not starts:
        return None
    tail = lines[starts[-1] + 1 :]
    errors = [line for line in tail if line and not line[0].isspace()]
    frames = [m for m in map(PY_FRAME.match, tail) if m]
    return (errors[-1], frames) if errors else None


def node_crash(lines: list[str]):
    """A Node.js crash (it ends in `Node.js vNN`): the error's first line and its stack frames, or None."""
    words = [line for line in lines if line.strip()]
    if not words or not re.match(r"Node\.js v\d", words[-1]):
        return None
    for i, line in enumerate(lines[:-1]):
        if line and not line[0].isspace() and JS_FRAME.match(lines[i + 1]):
            frames = []
            for following in lines[i + 1 :]:
                frame = JS_FRAME.match(following)
                if not frame:
                    break
                frames.append(frame)
            return line, frames[::-1]  # innermost last, as in a traceback
    return None


def judge(rung, fixture: dict, out: Outcome, allow_sdk_retries: bool = False) -> Verdict:
    """The first mistake of the run, in the student's terms, and what the library did for it."""
    library = library_features(out.seen)
    exchanges = fixture["exchanges"]
    least = rung.least or len(exchanges)
    reached = 0  # the last recorded turn the program got an answer for
    requests = [seen for seen in out.seen if not seen.fallback and not seen.side]
    for n, request in enumerate(requests, 1):
        if request.retry_count and not allow_sdk_retries:
            return Verdict(f"{sdk_retries(out.seen)}. {SDK_RETRY_FIX}", library)
        if request.mistake is not None and request.turn <= len(exchanges):
            return Verdict(explain_mistake(request, exchanges), library)
        if request.mistake is not None or request.turn <= reached:  # past the end, or started over
            if reached >= least:
                return Verdict(asked_too_often(exchanges, reached, n), library)
            return Verdict(dropped_reply(request, reached) or started_over(reached), library)
        problem = (
            not_streamed(rung, request)
            or reply_not_verbatim(request, exchanges, rung.stream)
            or error_not_returned(rung, request)
            or output_missing(rung, request)
        )
        if problem:
            return Verdict(problem, library)
        reached = request.turn
    if out.code is None:
        where = f"your program did not finish in time; it had reached turn {reached} of {len(exchanges)}"
        return Verdict(where + (f" ({NO_REQUEST})" if not requests else ""), library)
    if reached < least:
        return Verdict(stopped_early(exchanges, reached, out), library)
    return Verdict(wrong_exit(rung, exchanges, out) or crashed(exchanges, out), library)


def library_features(seen: list[Seen]) -> list[str]:
    """What the library did that a rung could credit to the loop: its retries, its helpers."""
    features = [sdk_retries(seen)] if any(s.retry_count for s in seen) else []
    for helper in sorted({h for s in seen for h in s.helpers}):
        if helper in HELPERS:
            features.append(f"{HELPERS[helper]} (x-stainless-helper: {helper})")
    return features


def sdk_retries(seen: list[Seen]) -> str:
    """The SDK's retries in the run, by the x-stainless-retry-count values its requests carried: one
    wording for the reason and for the library field, so the two never name different counts."""
    counts = sorted({s.retry_count for s in seen if s.retry_count})
    return f"the SDK retried for you (x-stainless-retry-count: {', '.join(map(str, counts))})"


# -- a request the server refused ------------------------------------------------------------------


def explain_mistake(request: Seen, exchanges: list) -> str:
    """The server's own words, then what the loop did wrong in the student's terms, if we can tell."""
    recorded = exchanges[request.turn - 1]["request"]["messages"]
    sent = request.body.get("messages") if isinstance(request.body, dict) else None
    hint = cut_reply_sent_on(exchanges, request.turn, sent)
    if hint is None and well_formed(sent):
        hint = shape_hint(recorded, sent, exchanges, request.turn)
    if hint and hint in request.mistake:  # the server said it already (a split turn): one explanation
        hint = None
    return f"turn {request.turn}: {request.mistake}" + (f". Hint: {hint}" if hint else "")


def cut_reply_sent_on(exchanges: list, turn: int, sent) -> str | None:
    """After a reply cut by max_tokens, a request holding more turns than the recording's: the loop ran
    the cut call or sent it back. Judged on the turns alone (compare.conversation_form), so every client
    gets it, whatever it adds around them (Claude Code's system messages and reminders)."""
    if turn < 2 or stop_reason(exchanges[turn - 2]["response"]) != "max_tokens" or not readable(sent):
        return None
    recorded = exchanges[turn - 1]["request"]["messages"]
    if len(compare.conversation_form(sent)) <= len(compare.conversation_form(recorded)):
        return None
    return extra_messages(exchanges, turn, len(recorded))


def readable(messages) -> bool:
    """Messages the comparison can read: objects with a role and content, a client's system ones too."""
    return isinstance(messages, list) and all(
        isinstance(m, dict)
        and m.get("role") in ("user", "assistant", "system")
        and isinstance(m.get("content"), (str, list))
        and all(isinstance(b, dict) for b in (m["content"] if isinstance(m["content"], list) else []))
        for m in messages
    )


def well_formed(messages) -> bool:
    """A list of user and assistant turns, each with content: the shapes the hints know how to read."""
    return isinstance(messages, list) and all(
        isinstance(m, dict)
        and m.get("role") in ("user", "assistant")
        and isinstance(m.get("content"), (str, list))
        and all(isinstance(b, (str, dict)) for b in (m["content"] if isinstance(m["content"], list) else []))
        for m in messages
    )


def shape_hint(recorded: list, sent: list, exchanges: list, turn: int) -> str | None:
    """The loop's usual mistakes, named: a reply or its results not appended, a turn's blocks that differ.
    (Results in another order are no mistake: the API pairs each with its tool_use by id.)"""
    want, got = compare.normalize_messages(recorded), compare.normalize_messages(sent)
    for k, expected in enumerate(want):
        if k >= len(got) or got[k]["role"] != expected["role"]:
            if expected["role"] == "assistant":
                return (
                    f"your loop did not append the assistant's reply; messages[{k}] should be the assistant "
                    f"turn with {blocks_in_words(expected['content'])}"
                )
            return (
                f"your loop did not send the tool results; messages[{k}] should be the user turn with "
                f"{blocks_in_words(expected['content'])}, one per tool_use in messages[{k - 1}]"
            )
        if len(got[k]["content"]) != len(expected["content"]):
            return (
                f"messages[{k}]: expected {compare.block_types(expected)}; got {compare.block_types(got[k])}"
            )
    if len(got) > len(want):
        return extra_messages(exchanges, turn, len(want))
    return None


def blocks_in_words(content: list) -> str:
    """[text, tool_use, tool_use] -> "1 text block and 2 tool_use blocks"."""
    kinds = [block.get("type", "?") for block in content]
    counts = {kind: kinds.count(kind) for kind in kinds}
    words = [f"{n} {kind} block" + ("s" if n > 1 else "") for kind, n in counts.items()]
    return " and ".join(words) if len(words) < 3 else ", ".join(words[:-1]) + " and " + words[-1]


def extra_messages(exchanges: list, turn: int, expected: int) -> str:
    """The loop sent more than the recording holds: what it should have done after the last reply."""
    stop = stop_reason(exchanges[turn - 2]["response"]) if turn > 1 else None
    if stop == "max_tokens":
        return (
            f"turn {turn - 1}'s reply was cut off by max_tokens inside a tool_use, and your loop ran it or "
            "sent it back; a cut tool_use is incomplete: send the same request again, without the cut "
            "reply, with a larger max_tokens"
        )
    if stop == "pause_turn":
        return (
            "after a pause_turn, send the conversation back with the paused assistant turn last; "
            "do not add a user message"
        )
    return (
        f"your request holds more messages than the recording's {expected}: "
        "append only the reply and its results"
    )


# -- requests the server answered ------------------------------------------------------------------


def reply_not_verbatim(request: Seen, exchanges: list, streamed: bool = False) -> str | None:
    """Every assistant turn the loop sends back must be the reply as it came (None values aside). A
    client's `role: "system"` messages are not turns of the conversation: the turns are matched without
    them, and named by their place in the request as sent."""
    recorded = compare.normalize_messages(exchanges[request.turn - 1]["request"]["messages"])
    sent = compare.normalize_messages(request.body["messages"])
    turns = [(i, m) for i, m in enumerate(sent) if m["role"] != "system"]
    for want, (i, got) in zip(recorded, turns):
        if want["role"] != "assistant":
            continue
        for j, (a, b) in enumerate(zip(want["content"], got["content"])):
            if without_nulls(a) != without_nulls(b):
                field_name = next((k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)), "?")
                fix = "append response.content unchanged"
                if streamed and field_name == "input":
                    fix = "a streamed tool_use's input is all of its input_json_delta pieces, put together"
                return (
                    f"turn {request.turn}: messages[{i}].content[{j}] ({a.get('type')}) is not the reply "
                    f"as it came: its {field_name} differs; {fix}"
                )
    return None


def without_nulls(value):
    """A block with null fields dropped at any depth: a client may leave out what the API sent as null."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def error_not_returned(rung, request: Seen) -> str | None:
    """The rung's calls that cannot succeed must come back to the model with is_error: true."""
    for message in request.body["messages"]:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            why = rung.must_fail.get(block.get("tool_use_id")) if isinstance(block, dict) else None
            if why and block.get("is_error") is not True:
                return (
                    f"turn {request.turn}: the call {block['tool_use_id']} {why}, but your tool_result for "
                    "it has no is_error: true; send a failure back as an error result so the model can "
                    "correct itself"
                )
    return None


def not_streamed(rung, request: Seen) -> str | None:
    """A rung whose replies stream grades the streaming loop: a request that does not ask for the stream
    gets the reply whole, and would pass without putting anything together."""
    if not rung.stream or request.body.get("stream") is True:
        return None
    return (
        f"turn {request.turn}: this rung's replies stream, but your request did not ask for the stream "
        "(stream: true); stream the reply and put each tool_use's input together from its "
        "input_json_delta pieces (s06)"
    )


def output_missing(rung, request: Seen) -> str | None:
    """The rung's calls whose output is known: their tool_result must hold it, so the command really ran,
    whole, as the model asked."""
    for message in request.body["messages"]:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            wanted = rung.must_output.get(block.get("tool_use_id")) if isinstance(block, dict) else None
            if wanted and wanted not in result_text(block):
                return output_missing_reason(request, block, wanted)
    return None


def output_missing_reason(request: Seen, result: dict, wanted: str) -> str:
    """What the tool_result holds instead of the command's output. Its tool_use came back as the reply
    held it (reply_not_verbatim comes first), so the input was put together whole; what differed is the
    run: an error result (a tool the loop does not have under that name), or other output."""
    call = tool_use_answered(request.body["messages"], result["tool_use_id"]) or {}
    said = compare.quoted(result_text(result).strip() or "nothing", 160)
    start = f"turn {request.turn}: your tool_result for {result['tool_use_id']}"
    if result.get("is_error") is True:
        return (
            f"{start} is an error, {said}, so the command never ran: the model called the tool "
            f"`{call.get('name', '?')}` with {compare.quoted(json.dumps(call.get('input')), 120)}; run that "
            f"call under that name (a tool name is case-sensitive) and send back what it printed ({wanted!r})"
        )
    return (
        f"{start} holds {said}, not {wanted!r}, which the command prints when it runs: run the whole command "
        "the tool_use's input holds, and send back what it printed"
    )


def tool_use_answered(messages: list, tool_use_id: str) -> dict | None:
    """The tool_use block with this id, in the assistant turns the request sent back."""
    for message in messages:
        content = message.get("content") if message.get("role") == "assistant" else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("id") == tool_use_id:
                return block
    return None


def dropped_reply(request: Seen, reached: int) -> str | None:
    """Two user turns in a row: the assistant's reply between them was dropped. The API reads the two
    as one, so the request looks like turn 1 again, but the loop did not start over: it lost a reply."""
    messages = request.body.get("messages") if isinstance(request.body, dict) else None
    roles = [m.get("role") if isinstance(m, dict) else None for m in messages or []]
    k = next((k for k in range(1, len(roles)) if roles[k - 1] == roles[k] == "user"), None)
    if k is None:
        return None
    return (
        f"turn {reached + 1}: your loop dropped the assistant's reply: messages[{k - 1}] and messages[{k}] "
        "are both user turns, which the API reads as one; append each reply before the next user turn"
    )


def started_over(reached: int) -> str:
    """A request holding the first message alone, mid-way: the loop lost its history."""
    return (
        f"turn {reached + 1}: your program sent the first message alone again, so the conversation started "
        "over; keep the whole history in messages"
    )


def asked_too_often(exchanges: list, reached: int, requests: int) -> str:
    """A request past the recording's end: what the program should have done instead."""
    last = exchanges[reached - 1]["response"]
    status = last.get("status")
    if status in (400, 401, 403, 404, 413):
        return (
            f"turn {reached}: the API answered {status} and your program sent the request again; a {status} "
            "fails the same way every time: stop with a clear message"
        )
    if "error" in last or status != 200:  # a recorded failure it kept retrying
        return f"your program kept retrying: {requests} attempts, where this rung allows at most {reached}"
    stop = stop_reason(last)
    if stop == "tool_use":
        return (
            f"your loop was still calling the model after {reached} turns of the same repeated call; "
            "it must notice the repetition and stop by itself"
        )
    return (
        f"turn {reached}: the reply's stop_reason was {stop}, but your loop asked again; "
        "stop when it is not tool_use"
    )


# -- how the program ended -------------------------------------------------------------------------


def stopped_early(exchanges: list, reached: int, out: Outcome) -> str:
    """The program ended (or was refused) before the recording did: what it met last, and its last words."""
    said = f" (exit {out.code}" + (f": {out.last_line}" if out.last_line else "") + ")"
    if not [s for s in out.seen if not s.fallback and not s.side]:
        logged = re.search(r"\b[1-5]\d\d\b.*", out.server_log[-1]) if out.server_log else None
        heard = f"; the server logged: {logged.group(0)}" if logged else ""
        hint = f"your program read stdin, but {STDIN_CLOSED}" if READ_STDIN.search(out.output) else NO_REQUEST
        return f"your program sent no request the replay server could answer{said}{heard}; {hint}"
    response = exchanges[reached - 1]["response"]
    todo = {
        "tool_use": "run the tools and send their results",
        "max_tokens": "send the request again with a larger max_tokens",
        "pause_turn": "send the paused turn back unchanged so the model can finish",
    }.get(stop_reason(response) or "", "retry it, waiting as retry-after asks")
    if "error" in response:
        met = "your program stopped on the dropped connection"
    elif response.get("status") != 200:
        kind = response["body"].get("error", {}).get("type", "an error")
        met = f"your program stopped on the {response['status']} ({kind})"
    else:
        met = f"the reply's stop_reason was {stop_reason(response)} and your program stopped"
    return f"turn {reached} of {len(exchanges)}: {met}{said}; {todo}"


def wrong_exit(rung, exchanges: list, out: Outcome) -> str | None:
    """The exit code the rung asks for: 0 after a finished task, non-zero after a failure it cannot fix."""
    if rung.exit == "zero" and out.code != 0:
        return (
            f"your program walked all {len(exchanges)} turns but exited with code {out.code}: {out.last_line}"
        )
    if rung.exit == "nonzero" and out.code == 0:
        return (
            "your program stopped but exited with code 0; a run that failed must end with a non-zero exit "
            "so scripts and CI see it"
        )
    return None


def crashed(exchanges: list, out: Outcome) -> str | None:
    """A recording that ends in an error the loop must stop on: an uncaught exception is the runtime
    stopping the program, not the loop, and the student never sees a clear message."""
    if stop_reason(exchanges[-1]["response"]) is not None:
        return None
    error = uncaught_exception(out.output)
    if error is None:
        return None
    return (
        f"your program crashed with an uncaught {error}: the runtime stopped it, not your loop; "
        "catch the API's error and stop with a clear message (s03)"
    )


def uncaught_exception(output: str) -> str | None:
    """The exception's name, when the output ends in a Python traceback or a Node.js stack trace."""
    lines = [line for line in output.splitlines() if line.strip()]
    if any(line.startswith("Traceback (most recent call last)") for line in lines):
        named = [re.match(r"([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))\b", line) for line in lines]
        names = [m.group(1) for m in named if m]
        return names[-1] if names else "exception"
    if any(re.match(r"\s+at .+:\d+:\d+\)?$", line) for line in lines) and any(
        line.startswith("Node.js v") for line in lines
    ):
        return "JavaScript exception"
    return None


def passed_reason(rung, out: Outcome) -> str:
    """What a passing run did, in a few words."""
    turns = max((s.turn for s in out.seen), default=0)
    if rung.least:
        return f"stopped by itself after {turns} requests (exit {out.code})"
    return f"walked the whole recording: {turns} turn{'s' * (turns != 1)} (exit {out.code})"
