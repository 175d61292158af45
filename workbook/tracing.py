"""The trace: one JSON line per event of a run, and a trace turned back into a fixture."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from workbook.api.messages import plain
from workbook.api.wire import message_to_events
from workbook.errors import FixtureError, WorkbookError, one_line
from workbook.files import MAX_JSON_DEPTH, read_bytes, text_depth, write_json
from workbook.scratch import new_run_folder
from workbook.scrub import dumps


def trace(path: Path | None, event: str, **fields) -> None:
    """Append one line to the trace (see append_line)."""
    if path is not None:
        append_line(path, {"event": event, **fields})


def append_line(path: Path, value) -> None:
    """One JSON line appended with a single write() and no buffer, every secret scrubbed first: a crash,
    even kill -9, loses nothing written before it and leaves no half line (trace, audit log). Only a
    regular file is written (a FIFO is not waited on, a device not written); a failure is one line."""
    line = dumps(plain(value), ensure_ascii=False) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
    except OSError as err:
        raise WorkbookError(f"{path}: cannot write the trace or audit log there ({one_line(err)})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise WorkbookError(f"{path}: not a regular file (a device or a pipe) — give a file to write")
        os.write(fd, line.encode(errors="backslashreplace"))  # a lone surrogate the model sent, escaped
    except OSError as err:
        raise WorkbookError(f"{path}: cannot write the trace or audit log ({one_line(err)})") from None
    finally:
        os.close(fd)


def trace_to_fixture(path: Path, script: str = "s10_trace") -> dict:
    """A trace as a fixture: each model_call line becomes an exchange, its request rebuilt from the
    start line and the messages the call added, so any traced run replays offline (`--replay run.jsonl`).
    The tools run again, in the workspace the `run` line names (a fixture's, when the trace came from a
    replay; a live run's folder is not copied: put its files in fixtures/workspace/<name>/ and set
    `workspace`). Live tool output differs from machine to machine, so requests are compared by structure."""
    raw = read_bytes(path, "trace")  # a regular file of sane size, or one line saying why not
    try:
        if text_depth(raw) > MAX_JSON_DEPTH:
            raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep")
        lines = [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
        return fixture_from_trace(lines, path, script)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as err:  # not what --trace writes
        raise FixtureError(
            f"{path}: not a JSON-lines trace ({err!r:.120}) — give a file --trace wrote"
        ) from None


def fixture_from_trace(lines: list, path: Path, script: str) -> dict:
    """trace_to_fixture's work, on the trace's parsed lines."""
    runs = [i for i, line in enumerate(lines) if line.get("event") == "run"] or [0]
    lines = lines[runs[-1] :]  # a trace file appended to by several runs: the last one
    start = next((line for line in lines if line.get("event") == "start"), {})
    about = next((line for line in lines if line.get("event") == "run"), {})
    base = {k: start[k] for k in ("model", "max_tokens", "system", "tools") if k in start}
    messages, exchanges = [], []
    for call in (line for line in lines if line.get("event") == "model_call" and "request" in line):
        sent = call["request"]
        messages = messages[: sent["new_from"]] + sent["new_messages"]
        extra = {k: v for k, v in sent.items() if k not in ("messages_count", "new_from", "new_messages")}
        request = base | {"messages": messages, "stream": start.get("stream")} | extra
        request = {k: v for k, v in request.items() if k != "stream" or v}  # a plain call sends no `stream`
        exchanges.append(
            {"request": request, "response": traced_response(call, request), "match": "structure"}
        )
    if not exchanges:
        raise FixtureError(f"{path}: no model calls in this trace — was it written by s10 or later?")
    refuse_what_cannot_replay(lines, about, path)
    return {
        "script": script,
        "scenario": Path(path).stem,
        "description": f"Converted from the trace {Path(path).name} by trace_to_fixture.",
        "provenance": about.get("provenance", "recorded"),
        "task": about.get("task") or exchanges[0]["request"]["messages"][0]["content"],
        "workspace": about.get("workspace", ""),
        "args": about.get("args", []),
        "match": "structure",
        "exchanges": exchanges,
    } | ({"environment": about["environment"]} if about.get("environment") else {})


STARTS_EMPTY = {"write_file"}  # the tools that need nothing in the workspace: they run alike in an empty one


def refuse_what_cannot_replay(lines: list, about: dict, path: Path) -> None:
    """A trace no replay could follow, refused before it starts, saying what to do: a run a Ctrl-C
    stopped (a replay presses no keys, so it would run on), and a live run whose tools used files of its
    own folder (`workspace` empty: a replay starts in an empty one, where they are not)."""
    stops = [line.get("reason", "") for line in lines if line.get("event") == "stop"]
    if stops and str(stops[-1]).startswith("interrupted by the user"):
        raise FixtureError(
            f"{path}: this run was stopped by a Ctrl-C, which a replay cannot press — go on from the "
            "conversation it saved instead, with --resume"
        )
    replies = [line.get("response") or {} for line in lines if line.get("event") == "model_call"]
    used = {b.get("name") for r in replies for b in r.get("content") or [] if b.get("type") == "tool_use"}
    if about.get("live") and not about.get("workspace") and used - STARTS_EMPTY:
        raise FixtureError(
            f"{path}: a live run's trace, whose tools used files of its own folder, which a replay "
            'does not have — put them in fixtures/workspace/NAME/, then set "workspace": "NAME" in '
            "the trace's first line"
        )


def traced_response(call: dict, request: dict) -> dict:
    """A model_call line's outcome as a fixture response: a Message (streamed if the request was), an
    error event inside a stream, or an HTTP error."""
    error = call.get("error")
    if error is None and request.get("stream"):
        return {"status": 200, "stream": message_to_events(call["response"])}
    if error is None:
        return {"status": 200, "body": call["response"]}
    if error["status"] == 200:  # an error event inside the stream
        return {"status": 200, "stream": [{"event": "error", "data": error["body"]}]}
    return {"status": error["status"], "body": error["body"]}


def fixture_file(trace_file: str, script: str) -> str:
    """s10: convert a trace to a fixture file in a temp folder, for --replay."""
    target = new_run_folder() / (Path(trace_file).stem + ".json")  # removed with the run's copies
    write_json(target, trace_to_fixture(Path(trace_file), script))
    return str(target)
