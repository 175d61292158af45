"""notebook_view — how the notebooks show a run: every request the loop sent, one line per block.

Every notebook shows its main fixture in this one format, so a reader sees the `messages` list grow
the same way in all six steps:

    REQUEST 2  model=claude-sonnet-5  max_tokens=8000  tools=[bash]
      messages: 3  (+2 since request 1)
      [0] user      text         "Look at the files here, create hello_agent.txt containing Hello, …"
      [1] assistant tool_use     id=toolu_01A8…  bash {"command": "ls"}
      [2] user      tool_result  for=toolu_01A8…  "README.md\\nnotes.txt\\n[exit code 0]"
    RESPONSE 2  stop_reason=end_turn  tokens in 671 / out 22
      text         "Done: hello_agent.txt is created and reads \\"Hello from Agent Loop!\\"."

Requests are JSON bodies as they went over the wire (a replay transport's `seen`, or a fixture's
recorded `request`s). A response can be the SDK's `Message`, a Message as JSON, or a recorded response
(JSON, a server-sent event stream, an error status, a dropped connection). When the list changes in
another way than growing (a retry, s05's resumed conversation, s06's collapsed results, its compaction
and continuation), the `messages:` line says how. No line is wider than WIDTH characters.

The charts the notebooks draw (matplotlib) are here too: input tokens per turn, and their running sum.
Nothing here is lesson: it only reads what the loop did.
"""

from __future__ import annotations

import io
import itertools
import json
import sys
import tempfile
import textwrap
from pathlib import Path

from workbook.api.messages import blocks, common_prefix, plain, result_text
from workbook.text import clip

WIDTH = 200  # no line this module prints is wider
TEXT_LIMIT = 110  # characters of a text block shown on its one line
INPUT_LIMIT = 80  # characters of a tool's input, as JSON
RESULT_LIMIT = 90  # characters of a tool result
ID_CHARS = 10  # "toolu_01A8…": enough to tell a request's ids apart (more if they share a prefix)
LONG_RUN_COMMAND = "seq 1 500 # {n}"  # about 1.9 kB of output a call: a file read's worth
EXPAND_LINES = 12  # a rewritten text (s06's compaction summary) is shown whole, up to this many lines


# -- one value, one line ---------------------------------------------------------------------------


def short(value, limit: int = TEXT_LIMIT) -> str:
    """A value as one line of JSON (a string quoted, newlines as \\n), cut to `limit` characters."""
    return clip(json.dumps(value, ensure_ascii=False), limit)


def id_names(ids) -> dict[str, str]:
    """Each id -> its short form: the first ID_CHARS characters, more if two ids would look alike."""
    ids = sorted(set(ids))
    width = ID_CHARS
    while width < max(map(len, ids), default=0) and len({i[:width] for i in ids}) < len(ids):
        width += 2
    return {i: i if len(i) <= width else i[:width] + "…" for i in ids}


def ids_in(*bodies) -> list[str]:
    """Every tool id in request bodies, messages or responses (any nesting of dicts and lists)."""
    found = []

    def walk(value):
        if isinstance(value, dict):
            for key in ("id", "tool_use_id"):
                if isinstance(value.get(key), str) and value.get("type") != "message":
                    found.append(value[key])
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for body in bodies:
        walk(body)
    return found


# -- blocks and messages ---------------------------------------------------------------------------


def block_line(block: dict, ids: dict | None = None) -> str:
    """One content block on one line: its type, then what matters for that type."""
    ids = ids or {}
    kind = block.get("type")

    def name(key: str) -> str:  # the block's id under `key`, shortened
        return ids.get(block.get(key), block.get(key))

    if kind == "text":
        return f"text         {short(block['text'])}"
    if kind in ("tool_use", "server_tool_use"):
        what = f"{block['name']} {short(block.get('input', {}), INPUT_LIMIT)}"
        return f"{kind:<12} id={name('id')}  {what}"
    if kind == "tool_result":
        flag = "ERROR " if block.get("is_error") else ""
        text = short(result_text(block), RESULT_LIMIT)
        return f"tool_result  for={name('tool_use_id')}  {flag}{text}"
    if kind == "web_search_tool_result":
        found = block.get("content") or []
        titles = "; ".join(r.get("title", "?") for r in found) if isinstance(found, list) else found
        return f"{kind} for={name('tool_use_id')}  {len(found)} results: {clip(str(titles), RESULT_LIMIT)}"
    if kind == "thinking":
        return f"thinking     {short(block.get('thinking', ''))}"
    rest = {key: value for key, value in block.items() if key != "type"}
    return f"{kind:<12} {short(rest, RESULT_LIMIT)}"


def message_lines(messages: list, ids: dict | None = None, start: int = 0, expand=()) -> list[str]:
    """`  [i] role      block`, one line per block, from message `start` on. A long text block of a
    message in `expand` is shown whole below its line (wrapped), up to EXPAND_LINES lines."""
    ids = ids if ids is not None else id_names(ids_in(messages))
    width = len(str(len(messages) - 1)) + 2
    lines = []
    for i, message in enumerate(messages[start:], start):
        head = f"  {f'[{i}]':<{width}} {message['role']:<9} "
        for j, block in enumerate(blocks(message)):
            lines.append(clip((head if j == 0 else " " * len(head)) + block_line(block, ids), WIDTH))
            if i in expand and block.get("type") == "text" and len(short(block["text"])) >= TEXT_LIMIT:
                lines += whole_text(block["text"], indent=len(head) + 4)
    return lines


def whole_text(text: str, indent: int) -> list[str]:
    """A long text wrapped under its block line, cut after EXPAND_LINES lines."""
    wrapped = [
        line for paragraph in text.splitlines() for line in textwrap.wrap(paragraph, 100 - indent) or [""]
    ]
    more = len(wrapped) - EXPAND_LINES
    shown = wrapped[:EXPAND_LINES] + ([f"… ({more} more lines)"] if more > 0 else [])
    return [clip(" " * indent + line, WIDTH) for line in shown]


# -- how the list changed since the request before -------------------------------------------------


def extends(before: dict, after: dict) -> bool:
    """`after` is `before` with more blocks at its end (a paused turn resumed into the same message)."""
    old, new = blocks(before), blocks(after)
    return before["role"] == after["role"] and len(new) > len(old) and new[: len(old)] == old


def change(before: list | None, after: list, n: int) -> tuple[str, int]:
    """(what happened to the list since request n-1, the first message worth showing again)."""
    if before is None:
        if len(after) > 1:
            return f"(the run starts with {len(after)} messages: a resumed conversation)", 0
        return "", 0
    same = common_prefix(before, after)
    if same == len(before) == len(after):
        return f"(the same messages as request {n - 1}: sent again)", len(after)
    if same == len(before):
        return f"(+{len(after) - same} since request {n - 1})", same
    if len(after) < len(before):
        return f"(down from {len(before)}: rewritten from [{same}] on)", same
    changed = [i for i in range(same, len(before)) if before[i] != after[i]]
    how = [
        f"[{i}] {'extended' if extends(before[i], after[i]) else 'changed'}"
        for i in changed
        if i < len(after)
    ]
    added = f", +{len(after) - len(before)}" if len(after) > len(before) else ""
    return f"({', '.join(how)}{added} since request {n - 1})", same


# -- requests and responses ------------------------------------------------------------------------


def request_header(n: int, body: dict) -> str:
    """REQUEST n and what the request set besides its messages."""
    tools = [tool.get("name", tool.get("type")) for tool in body.get("tools", [])]
    parts = [f"REQUEST {n}", f"model={body.get('model')}", f"max_tokens={body.get('max_tokens')}"]
    parts.append(f"tools=[{', '.join(tools)}]")
    if body.get("tool_choice"):
        parts.append(f"tool_choice={body['tool_choice'].get('type')}")
    if body.get("stream"):
        parts.append("stream")
    return clip("  ".join(parts), WIDTH)


def request_lines(
    n: int, body: dict, before: dict | None = None, ids: dict | None = None, new_only: bool = False
) -> list[str]:
    """Request n: its header, the system prompt when it is new, `messages: k` and how the list
    changed, then one line per block (with new_only, only from the first new or changed message)."""
    messages = body.get("messages", [])
    ids = ids if ids is not None else id_names(ids_in(body))
    lines = [request_header(n, body)]
    if before is None or before.get("system") != body.get("system"):
        lines.append(clip(f"  system: {short(system_text(body.get('system')))}", WIDTH))
    note, first_new = change(before.get("messages") if before else None, messages, n)
    lines.append(f"  messages: {len(messages)}" + (f"  {note}" if note else ""))
    start = first_new if new_only else 0
    if new_only and start:
        kept = "[0]" if start == 1 else f"[0]–[{start - 1}]"
        lines.append(f"  … {kept} as in request {n - 1}")
    old = before.get("messages", []) if before else []
    rewritten = {i for i in range(min(len(old), len(messages))) if old[i] != messages[i]}
    return lines + message_lines(messages, ids, start, expand=rewritten)


def system_text(system) -> str:
    """The system prompt as text (a string, or its text blocks joined)."""
    return system if isinstance(system, str) or system is None else result_text({"content": system})


def as_message(response) -> dict:
    """A response in any form this module takes, as a dict: a Message, or {"status", "error", …}."""
    if not isinstance(response, dict):  # the SDK's typed Message
        return plain(response)
    if response.get("type") == "message":
        return response
    if response.get("error") in ("connect", "timeout"):
        return {"status": None, "error": response["error"]}
    if "stream" in response:
        from workbook.api.wire import events_to_message  # only here: the view itself needs no replay

        message = events_to_message(response["stream"])
        return message if message.get("type") == "message" else {"status": 200, "in_stream": message}
    if response.get("status") not in (200, None):
        return {"status": response["status"], "body": response.get("body") or {}}
    return response.get("body", response)


def response_lines(n: int, response, ids: dict | None = None) -> list[str]:
    """RESPONSE n: the stop_reason and tokens, then one line per block; or what went wrong instead."""
    message = as_message(response)
    if message.get("type") != "message":
        return [clip(f"RESPONSE {n}  {failure(message)}", WIDTH)]
    ids = ids if ids is not None else id_names(ids_in(message))
    usage = message.get("usage") or {}
    head = f"RESPONSE {n}  stop_reason={message.get('stop_reason')}"
    head += f"  tokens in {usage.get('input_tokens')} / out {usage.get('output_tokens')}"
    return [head] + [clip("  " + block_line(block, ids), WIDTH) for block in message.get("content", [])]


def failure(answer: dict) -> str:
    """A response that is not a Message, in words: no answer, an error status, an error in a stream."""
    if answer.get("status") is None:
        return f"no answer: the connection failed ({answer.get('error')})"
    if "in_stream" in answer:
        error = answer["in_stream"].get("error") or {}
        return f"200, then an error event inside the stream: {error.get('type')}: {error.get('message')}"
    error = answer.get("body", {}).get("error") or {}
    return f"{answer['status']} {error.get('type')}: {error.get('message')}"


def exchange_lines(
    n: int, body: dict, response=None, before: dict | None = None, new_only: bool = False, ids=None
) -> list[str]:
    """Request n, then (if given) the response it got."""
    ids = ids if ids is not None else id_names(ids_in(body, plain(response)))
    lines = request_lines(n, body, before, ids, new_only)
    return lines + ([] if response is None else response_lines(n, response, ids))


def run_lines(
    requests: list[dict], responses: list | None = None, new_only: bool = False, only=None
) -> list[str]:
    """Every request in order (each compared with the one before), each followed by its response.
    `only`: the request numbers to show (1-based); the others are still compared with."""
    responses = list(responses or [])
    ids = id_names(ids_in(requests, [plain(r) for r in responses]))  # one short form per id, all run long
    lines = []
    for i, body in enumerate(requests):
        if only is not None and i + 1 not in only:
            continue
        response = responses[i] if i < len(responses) else None
        before = requests[i - 1] if i else None
        lines += exchange_lines(i + 1, body, response, before, new_only, ids) + [""]
    return lines[:-1]


# -- what the notebooks call -----------------------------------------------------------------------


def show_wrapped(text: str, width: int = 100, prefix: str = "") -> None:
    """Print a long text (a fixture's description, a list of names) wrapped to `width` columns."""
    print(textwrap.fill(text, width, initial_indent=prefix, subsequent_indent=" " * len(prefix)))


def show_run(requests: list[dict], responses: list | None = None, new_only: bool = False, only=None) -> None:
    """Print every request (and response) of a run, one line per block."""
    print("\n".join(run_lines(requests, responses, new_only, only)))


def show_transport(transport, new_only: bool = False, only=None) -> None:
    """Print what a replay transport saw: each request the loop sent, then the recorded response it got."""
    responses = [e["response"] for e in transport.fixture["exchanges"][: len(transport.seen)]]
    show_run(transport.seen, responses, new_only, only)


def show_messages(messages: list) -> None:
    """Print a messages list alone, one line per block (a recorded request's, or what a loop built)."""
    print("\n".join(message_lines(messages)))


def show_exchange(transport, n: int, new_only: bool = False) -> None:
    """Print request n that a replay transport saw (compared with request n-1), and its response."""
    before = transport.seen[n - 2] if n > 1 else None
    response = transport.fixture["exchanges"][n - 1]["response"]
    print("\n".join(exchange_lines(n, transport.seen[n - 1], response, before, new_only)))


# -- a step's map ----------------------------------------------------------------------------------


def step_lines(module) -> list[str]:
    """What a step takes from the steps before it (its imports, step by step) and what it defines
    itself: the new pieces above its loop, then the loop and the command line."""
    import ast
    import inspect

    source = inspect.getsource(module)
    tree = ast.parse(source)
    taken: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("s0"):
            taken.setdefault(node.module, []).extend(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("s0"):
                    taken.setdefault(alias.name, []).insert(
                        0, f"(the module, as {alias.asname or alias.name})"
                    )
    loop_at = next(
        (n for n, line in enumerate(source.splitlines(), 1) if line.startswith("# -- the loop")), 0
    )
    mine = [(node.lineno, name) for node in tree.body for name in defined(node)]
    lines = [f"{module.__name__} takes from the steps before it:"]
    for step, names in sorted(taken.items()):
        lines += wrapped(f"{step}: {', '.join(names)}", "  ")
    lines += [] if taken else ["  nothing"]
    lines += wrapped(", ".join(name for at, name in mine if at < loop_at), "new: ")
    lines += wrapped(", ".join(name for at, name in mine if at > loop_at), "then: ")
    return lines


def defined(node) -> list[str]:
    """The names a top-level statement defines: a function, a class, or constants assigned."""
    import ast

    if isinstance(node, ast.FunctionDef | ast.ClassDef):
        return [node.name]
    targets = (
        node.targets
        if isinstance(node, ast.Assign)
        else [node.target]
        if isinstance(node, ast.AnnAssign)
        else []
    )
    return [t.id for t in targets if isinstance(t, ast.Name)]


def wrapped(text: str, prefix: str, width: int = 100) -> list[str]:
    """A long list of names as lines under `prefix`, the rest indented beneath it."""
    return textwrap.wrap(text, width, initial_indent=prefix, subsequent_indent=" " * (len(prefix) + 2))


def show_step(module) -> None:
    """Print a step's map: what it imports from each earlier step, what it adds itself."""
    print("\n".join(step_lines(module)))


# -- charts ----------------------------------------------------------------------------------------


def answered_input_tokens(responses: list) -> list[int]:
    """usage.input_tokens of every answered request (an error or a dropped connection is not billed)."""
    messages = [as_message(response) for response in responses]
    return [m["usage"]["input_tokens"] for m in messages if m.get("type") == "message"]


def running_sum(values: list[int]) -> list[int]:
    return list(itertools.accumulate(values))


def tokens_chart(series: dict[str, list[int]], title: str, limit: int | None = None):
    """Two panels for each series of per-request input tokens: per request (with the context `limit`
    as a dashed line, if given), and their running sum, which is what is billed. Returns the
    matplotlib Figure; `show_chart` shows it inline."""
    from matplotlib.figure import Figure  # only the charts need matplotlib
    from matplotlib.ticker import FuncFormatter

    figure = Figure(figsize=(10, 3.6), dpi=80)
    per_turn, total = figure.subplots(1, 2)
    for label, values in series.items():
        turns = range(1, len(values) + 1)
        per_turn.plot(turns, values, label=label)
        total.plot(turns, running_sum(values), label=label)
    if limit:
        per_turn.axhline(limit, color="grey", linestyle="--", linewidth=1, label=f"context limit {limit:,}")
    per_turn.set(title="input tokens of each request", xlabel="request", ylabel="tokens")
    total.set(title="sum so far: what is billed", xlabel="request", ylabel="tokens")
    for axes in (per_turn, total):
        axes.grid(alpha=0.3)
        axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
        axes.legend(loc="upper left", fontsize="small")
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def show_chart(figure) -> None:
    """Show a Figure inline as a PNG: made here, so the notebook needs no matplotlib backend set up."""
    from IPython.display import Image, display

    display(Image(data=png(figure)))


def png(figure) -> bytes:
    """The Figure as PNG bytes, without the matplotlib version stamp (the same bytes on every run here)."""
    out = io.BytesIO()
    figure.savefig(out, format="png", metadata={"Software": None})
    return out.getvalue()


def long_run(turns: int, step: str, context_limit: int | None = None) -> dict:
    """A long scripted run of `step`'s own loop (workbook/scripted_run.py): one bash call per turn whose
    output is about 1.9 kB. With `context_limit`, a request over it gets the API's 400 "prompt is too
    long" (for s06). Returns the input tokens of every answered request, and how many requests were
    refused as too long or asked for a summary (compaction)."""
    import importlib

    from workbook import paths, scripted_run

    model = scripted_run.ScriptedModel(
        scripted_run.scripted_responses(turns, LONG_RUN_COMMAND), context_limit
    )
    with tempfile.TemporaryDirectory(prefix="long-run-") as workspace:
        scripted_run.run_loop(
            importlib.import_module(paths.step_module(step)),
            model,
            Path(workspace),
            console_class=plain_console,
        )
    answered = [e for e in model.exchanges if e["response"].get("status") == 200]
    return {
        "tokens": [scripted_run.estimate_tokens(e["request"]) for e in answered],
        "refused": sum(e["response"].get("status") == 400 for e in model.exchanges),
        "summaries": sum(
            (e["request"].get("tool_choice") or {}).get("type") == "none" for e in model.exchanges
        ),
    }


def plain_console(**options):
    """A rich Console that writes where it is told, even inside Jupyter (where rich would draw cells)."""
    from rich.console import Console

    return Console(force_jupyter=False, **options)


# -- refreshing the committed outputs ----------------------------------------------------------------


def refresh(path: str | Path) -> None:
    """Re-run one notebook and save its outputs as nbval compares them: no cell timings, and runs of
    stream output merged into one (nbval merges them too), so streamed text reads as text."""
    import nbformat
    from nbclient import NotebookClient

    path = Path(path)
    notebook = nbformat.read(path, as_version=4)
    folder = {"metadata": {"path": str(path.parent)}}
    NotebookClient(notebook, timeout=600, record_timing=False, resources=folder).execute()
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = merged_streams(cell.outputs)
    nbformat.write(notebook, path)


def merged_streams(outputs: list) -> list:
    """Consecutive outputs to the same stream (stdout, stderr) as one."""
    merged = []
    for output in outputs:
        last = merged[-1] if merged else None
        if last and output.output_type == last.output_type == "stream" and output.name == last.name:
            last.text += output.text
        else:
            merged.append(output)
    return merged


# python -m workbook.notebook_view notebooks/s05_budget.ipynb ...: refresh their outputs
if __name__ == "__main__":
    for name in sys.argv[1:]:
        refresh(name)
