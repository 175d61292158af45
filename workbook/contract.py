"""The Messages API's rules: what a request may hold, and what a recorded response must be."""

from __future__ import annotations

import anthropic

from workbook.errors import ReplayMismatch, one_line
from workbook.wire import events_to_message


def api_rule_problems(messages: list) -> list[str]:
    """What the real API would reject in this messages list (empty when it is valid)."""
    if not isinstance(messages, list):
        return ["messages must be a list"]
    if not messages:
        return ["messages is empty"]
    shapeless = [i for i, m in enumerate(messages) if not isinstance(m, dict)]
    if shapeless:  # nothing below can read a message that is not an object
        return [f"messages[{i}]: must be an object with role and content" for i in shapeless]
    problems = []
    if messages[0].get("role") != "user":
        problems.append("messages[0] must come from the user")
    for i, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant"):
            problems.append(f"messages[{i}]: role must be user or assistant, not {message.get('role')!r}")
        if i and message.get("role") == messages[i - 1].get("role"):
            problems.append(f"messages[{i}]: two {message.get('role')} messages in a row")
        if message.get("content") in ("", [], None):
            problems.append(f"messages[{i}]: content is empty")
    problems += _tool_pairing_problems(messages)
    return problems


def _tool_pairing_problems(messages: list) -> list[str]:
    """Every tool_use answered once, first thing in the next user message; no orphan tool_result."""
    problems = []
    for i, message in enumerate(messages):
        blocks = _blocks(message)
        asked = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        previous = _blocks(messages[i - 1]) if i else []
        open_ids = {b.get("id") for b in previous if b.get("type") == "tool_use"}
        answered = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        if message.get("role") == "assistant" and asked:
            if i + 1 == len(messages):
                problems.append(f"messages[{i}]: the conversation ends on tool_use without results")
            continue
        for tool_id in answered:
            if tool_id not in open_ids:
                problems.append(
                    f"messages[{i}]: tool_result {tool_id} answers no tool_use in messages[{i - 1}]"
                )
            elif answered.count(tool_id) > 1:
                problems.append(f"messages[{i}]: tool_use {tool_id} answered {answered.count(tool_id)} times")
        for tool_id in sorted(open_ids - set(answered), key=str):
            problems.append(f"messages[{i}]: tool_use {tool_id} from messages[{i - 1}] has no tool_result")
        leading = [b.get("type") == "tool_result" for b in blocks[: len(answered)]]
        if answered and not all(leading):
            problems.append(f"messages[{i}]: tool_result blocks must come before any other content")
    return sorted(set(problems), key=problems.index)


def _blocks(message: dict) -> list[dict]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def check_api_rules(body: dict, where: str) -> None:
    """Raise ReplayMismatch naming the first rule this request body breaks."""
    problems = api_rule_problems(body.get("messages", []))
    if problems:
        raise ReplayMismatch(f"{where}: the API would reject this request — {problems[0]}")


def exchange_problems(exchange) -> list[str]:
    if not isinstance(exchange, dict) or not isinstance(exchange.get("request"), dict):
        return [": needs a `request` object"]
    request, response = exchange["request"], exchange.get("response")
    problems = [f".request{p}" for p in request_problems(request)]
    if not problems:
        problems = [f".request: {p}" for p in api_rule_problems(request["messages"])]
    if exchange.get("match", "structure") != "structure":
        problems.append(".match: must be `structure` or absent")
    if not isinstance(response, dict):
        return problems + [".response: must be an object"]
    return problems + [f".response{p}" for p in _response_problems(response)]


def request_problems(request: dict) -> list[str]:
    """Type problems in a recorded request body, each naming its place (`.messages[1].content[0]`)."""
    problems = [
        f".{key}: missing (the API requires it)" for key in ("model", "max_tokens") if key not in request
    ]
    kinds = {"model": str, "max_tokens": int, "stream": bool, "system": str | list, "tools": list}
    for key, kind in kinds.items():
        value = request.get(key)
        if key in request and (not isinstance(value, kind) or isinstance(value, bool) and kind is not bool):
            problems.append(f".{key}: has the wrong type")
    tools = request.get("tools", [])
    if isinstance(tools, list) and not all(
        isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools
    ):
        problems.append(".tools: each tool must be an object with a name")
    return problems + messages_problems(request.get("messages"))


def messages_problems(messages) -> list[str]:
    """Type problems in a messages list (`.messages[1].content[0]: ...`): a request's, or a saved one."""
    if not isinstance(messages, list):
        return [".messages: must be a list"]
    problems = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            problems.append(f".messages[{i}]: must be an object with role and content")
            continue
        content = message.get("content")
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            problems.append(f".messages[{i}].content: must be a string or a list of blocks")
            continue
        problems += [
            f".messages[{i}].content[{j}]{p}" for j, b in enumerate(content) for p in block_problems(b)
        ]
    return problems


def block_problems(block) -> list[str]:
    """What the transport's comparison would choke on in one content block."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        return [": must be an object with a `type`"]
    needs = {
        "text": {"text": str},
        "tool_use": {"id": str, "name": str, "input": dict},
        "tool_result": {"tool_use_id": str},
    }.get(block["type"], {})
    problems = [
        f".{key}: must be a {kind.__name__}"
        for key, kind in needs.items()
        if not isinstance(block.get(key), kind)
    ]
    if block["type"] == "tool_result":
        content = block.get("content", "")
        parts = content if isinstance(content, list) else []
        if not isinstance(content, str | list) or not all(isinstance(c, dict) for c in parts):
            problems.append(".content: must be a string or a list of blocks")
        elif any(c.get("type") == "text" and not isinstance(c.get("text"), str) for c in parts):
            problems.append(".content: a text block needs its text")
        if not isinstance(block.get("is_error", False), bool):
            problems.append(".is_error: must be true or false")
    return problems


def _response_problems(response: dict) -> list[str]:
    if "error" in response:
        return (
            [] if response["error"] in ("connect", "timeout") else [".error: must be `connect` or `timeout`"]
        )
    status = response.get("status")
    if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
        return [".status: must be an HTTP status number"]
    headers = response.get("headers", {})
    problems = []
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        problems.append(".headers: must be an object of strings")
    if status == 200 and "stream" in response:
        problems += [f".stream{p}" for p in _stream_problems(response["stream"])]
    elif status == 200:
        problems += [f".body: {p}" for p in _message_problems(response.get("body"))]
    elif "stream" in response:
        problems.append(".stream: only a 200 response streams; an error response has a JSON `body`")
    elif not isinstance(response.get("body"), dict):
        problems.append(".body: an error response needs a JSON error body")
    return problems


def _message_problems(body) -> list[str]:
    """Whether a 200 body parses as the SDK's own `Message` type."""
    try:
        message = anthropic.types.Message.model_validate(body)
    except Exception as err:  # pydantic's ValidationError; its first line names the field
        return [f"not a valid Message ({one_line(err)})"]
    return [] if message.type == "message" else ["`type` must be `message`"]


STREAM_EVENTS = {
    "message_start": anthropic.types.RawMessageStartEvent,
    "message_delta": anthropic.types.RawMessageDeltaEvent,
    "message_stop": anthropic.types.RawMessageStopEvent,
    "content_block_start": anthropic.types.RawContentBlockStartEvent,
    "content_block_delta": anthropic.types.RawContentBlockDeltaEvent,
    "content_block_stop": anthropic.types.RawContentBlockStopEvent,
}


def _stream_problems(events) -> list[str]:
    """A stream must be {event, data} pairs that add up to a Message (or end in an error event)."""
    if not isinstance(events, list) or not events:
        return [": must be a non-empty list of {event, data}"]
    problems = []
    for n, event in enumerate(events):
        if not isinstance(event, dict) or not isinstance(event.get("data"), dict):
            problems.append(f"[{n}]: must be {{event, data}} with a JSON object as data")
        elif event.get("event") != event["data"].get("type") or not isinstance(event.get("event"), str):
            problems.append(f"[{n}]: `event` must be a string equal to data's `type`, as the API sends it")
        elif event["event"] in STREAM_EVENTS:  # the SDK builds these without checking: check them here
            try:
                STREAM_EVENTS[event["event"]].model_validate(event["data"])
            except Exception as err:  # pydantic's ValidationError
                problems.append(f"[{n}]: not a valid {event['event']} event ({one_line(err)})")
    problems += _block_order_problems(events) if not problems else []
    if problems:
        return problems
    try:  # a streaming loop reads the events, a plain one the Message they add up to: both must work
        message = events_to_message(events)
    except Exception as err:  # whatever a malformed stream raises, in the SDK's place
        return [f": the events do not add up to a Message ({type(err).__name__}: {one_line(err)})"]
    if message.get("type") == "error":
        return [] if isinstance(message.get("error"), dict) else [": an error event needs an `error` object"]
    return [f": adds up to {p}" for p in _message_problems(message)]


def _block_order_problems(events: list[dict]) -> list[str]:
    """Blocks start in order 0, 1, 2 ... and every delta or stop names one already started."""
    started = 0
    for n, event in enumerate(events):
        kind, index = event["event"], event["data"].get("index")
        if not kind.startswith("content_block_"):
            continue
        if not isinstance(index, int) or isinstance(index, bool):
            return [f"[{n}]: `index` must be a whole number"]
        if kind == "content_block_start" and index != started:
            return [f"[{n}]: content block {index} starts where block {started} should"]
        if kind != "content_block_start" and not 0 <= index < started:
            return [f"[{n}]: content block {index} has not started"]
        started += kind == "content_block_start"
    return []
