"""The terminal: what the reader sees of a run.

Everything goes through one `console`, which a notebook or a test swaps once, here.
"""

from __future__ import annotations

import difflib
import json
import re
import textwrap
from contextlib import contextmanager
from functools import cache
from types import SimpleNamespace

from workbook import scrub
from workbook.text import clip

import anthropic
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table

# What the model and the tools said is shown as they said it: no colour guessed for numbers (highlight),
# and no `:fire:` turned into an emoji (a rich default that also costs every print a search).
console = Console(highlight=False, emoji=False)

# What a terminal would obey rather than show: OSC (title, clipboard: ESC ] ... BEL), CSI (clear the
# screen: ESC [ 2 J), other escapes, control characters but tab and newline, and the bidirectional
# overrides and isolates that make a line read otherwise than it runs (U+202E). Text from a fixture or
# a model passes through printable() before it is printed, as the classroom server escapes it in HTML.
CONTROL = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b\[[0-?]*[ -/]*[@-~]|\x1b.?|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
    r"|[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def printable(text: str) -> str:
    """`text` with every control sequence removed, so that printing it cannot drive the terminal, and
    every secret this process holds (and any sk-ant- key) removed, so that no error body shows one."""
    return scrub.redact_keys(CONTROL.sub("", text))


def say(text: str, style: str = "dim") -> None:
    """One line of plain text (never read as markup), in a style. console.out, not print: no markup,
    wrapping or pretty-printing to work out, which costs a turn more than the rest of its output."""
    console.out(printable(text), style=style, highlight=False)


def error(label: str, text: str) -> None:
    """The one line a run ends with when something stops it: `label: what happened and what to do`."""
    console.print(f"[red]{label}:[/] {escape(printable(text))}", soft_wrap=True)  # the terminal wraps it


def show_stop(reason: str) -> None:
    """The one line that says why a run stopped (s05 on); the terminal wraps it, nothing is cut."""
    console.print(f"[bold]run ended:[/] {escape(printable(reason))}", soft_wrap=True)


@cache
def spinner(on: Console):
    """One spinner for a whole run (a new one every turn costs more than the turn itself)."""
    return on.status("waiting for the model…")


def rule(title: str) -> None:
    """A line across the screen, titled: where a model call's output begins."""
    console.rule(title)


_last_call: list = []  # the last call shown (its tool, its input, what it gave): a repeat is not shown twice


@contextmanager
def waiting(turn: int | str | None, streamed: bool = False):
    """A turn opens with its rule, so what happens while the model answers (a retry, a streamed reply's
    text) shows under the turn it belongs to; a call sent again within its turn (None) opens none. A
    whole reply is waited for with a spinner, at a terminal."""
    if turn is None:
        say("the same request, sent again:")
    else:
        rule(f"turn {turn}")
    if str(turn) == "1":  # a new run: a call of the last one is not "just before"
        _last_call.clear()
    status = spinner(console) if console.is_terminal and not streamed else None
    if status:
        status.start()
    try:
        yield
    finally:
        if status:
            status.stop()


def show_turn(response: anthropic.types.Message, streamed: bool = False) -> None:
    """A reply: the model's text (unless it was streamed as it came), then the stop reason and tokens."""
    if not streamed:
        for block in response.content:
            if block.type == "text":
                console.print(f"[bold]model:[/] {escape(printable(block.text))}")
    tokens = f"tokens in {response.usage.input_tokens} / out {response.usage.output_tokens}"
    say(f"stop_reason={response.stop_reason}  {tokens}")


RESULT_LINES = 4  # a tool result shows at most this many lines (and its last); the rest are counted
READ_LINES = 8  # a file read shows this many: a short file whole, so the line that matters is there
DIFF_LINES = 8  # an edit or a write shows at most this many of its changed lines; the rest are counted
TELLING = {  # the argument that says most about a call, shown on its one line
    "bash": "command",
    "read_file": "path",
    "write_file": "path",
    "edit_file": "path",
    "grep": "pattern",
    "list_files": "glob",
}


def as_text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def changed_text(block) -> tuple[str, str] | None:
    """(old, new) text of an edit or a write the model asked for, to show as a diff; None for any other
    call, or an input the tool would refuse."""
    data = block.input if isinstance(block.input, dict) else {}
    if block.name == "edit_file" and isinstance(data.get("old_text"), str):
        old, new = data["old_text"], data.get("new_text")
    elif block.name == "write_file":
        old, new = "", data.get("content")
    else:
        return None
    return (old, new) if isinstance(new, str) and isinstance(data.get("path"), str) else None


def diff_lines(old: str, new: str, width: int | None = None) -> list[str]:
    """What an edit takes out (-) and puts in (+), with a line of context around it: the change itself,
    which is the point of the call, in at most DIFF_LINES lines; the rest counted."""
    width = width or console.width
    diff = list(difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=1))[2:]
    lines = [line for line in diff if not line.startswith("@@")]
    if len(lines) > DIFF_LINES:
        lines = lines[: DIFF_LINES - 1] + [f" … ({len(lines) - DIFF_LINES + 1} more changed lines)"]
    return [clip("  " + line, width) for line in lines]


def call_line(block, width: int | None = None, diff_below: bool = False) -> str:
    """A tool call in one line, as the model sent it: `$ command` for bash, else the tool's name and its
    most telling argument (TELLING). An input without that argument, a misspelt key say, is shown as the
    JSON it is. Whatever the line leaves out (other arguments, the rest of a long one) is counted:
    `… (617 chars)`."""
    data = block.input
    key = TELLING.get(block.name)
    if not (isinstance(data, dict) and isinstance(data.get(key), str)):
        return counted(f"{block.name} ", as_text(data), 0, width or console.width)
    head = "$ " if block.name == "bash" else f"{block.name} "
    telling = (data[key].splitlines() or [""])[0]
    others = sum(len(as_text(value)) for value in data.values()) - len(telling)
    if diff_below:  # the text it changed is shown below the line, as a diff
        others = 0
    return counted(head, telling, others, width or console.width)


def counted(head: str, text: str, others: int, width: int) -> str:
    """`head` and `text` on one line of at most `width` cells, anything cut or left out counted."""
    if not others and cell_len(head + text) <= width:
        return head + text
    room = max(0, width - len(head) - len(f" … ({len(text) + others} chars)"))
    shown = clip(text, room).removesuffix("…") if cell_len(text) > room else text
    return f"{head}{shown} … ({len(text) - len(shown) + others} chars)"


def result_lines(output: str, width: int | None = None, most: int = RESULT_LINES) -> list[str]:
    """A tool's output in a few lines, indented under its call: the first ones and the last (where an
    exit code is), each cut to the width; the lines between are counted."""
    width = width or console.width
    lines = output.splitlines() or [""]
    if len(lines) > most + 1:
        hidden = len(lines) - most
        lines = lines[: most - 1] + [f"… ({hidden} more lines, sent to the model, not shown)"] + lines[-1:]
    return [clip("  " + line, width) for line in lines]


def error_lines(output: str, width: int | None = None) -> list[str]:
    """An error or a refusal, indented under its call and wrapped to the width: whole, never cut, since
    every word of it is what the model is told."""
    width = width or console.width
    wrap = dict(initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False)
    lines = output.splitlines() or [""]
    return [part for line in lines for part in textwrap.wrap(line, width, **wrap) or [""]]


def show_tool(block, output: str, is_error: bool = False) -> None:
    """A tool call as one line, then what it returned: an error or a refusal whole, under the call's
    line marked ✗ (s01's answers say so by opening with `error:`); other output in a few lines, or, when
    the same call just gave the same, a line that says so. An edit or a write shows its change as a
    diff: in colour above its result when it was made; dimmed below the refusal when it was not, since
    what the refused change was is the point of refusing it."""
    changed = changed_text(block)
    text = printable(output)  # no control sequences
    failed = is_error or text.startswith("error:")
    if failed:  # marked, so that a refused call's line never reads as if it ran
        say("✗ " + call_line(block, console.width - 2, diff_below=bool(changed)), "red")
    else:
        say(call_line(block, diff_below=bool(changed)), "cyan")
    most = READ_LINES if block.name == "read_file" else RESULT_LINES
    shown = error_lines(text) if failed else result_lines(text, most=most)
    if not failed and _last_call[:] == [block.name, block.input, text]:  # a call repeated, result and all
        shown = ["  same output as above, sent to the model again (not printed twice)"]
    _last_call[:] = [block.name, block.input, text]
    if changed and not is_error:
        show_diff(changed, {"-": "red", "+": "green"})
    console.out("\n".join(shown), highlight=False)
    if changed and is_error:
        say("  the change it asked for, not made:")
        show_diff(changed, {})


def show_diff(changed: tuple[str, str], colours: dict) -> None:
    """An edit's or a write's (old, new) text as diff lines, each coloured by its -/+ (none: dimmed)."""
    for line in diff_lines(*(printable(text) for text in changed)):
        console.out(line, style=colours.get(line[2:3], "dim"), highlight=False)


# A summary of a long run shows this many of its first turns and as many of its last; the rest are counted.
SUMMARY_ENDS = 10


def numbered_rows(rows: list) -> list:
    """(turn number, row) for each row a summary table shows: every turn of a short run; of a long one,
    the first and last SUMMARY_ENDS and, between them, (None, how many turns are left out). A table of
    a thousand rows tells a reader no more than its ends and its total, and costs a turn's work each."""
    numbered = list(enumerate(rows, 1))
    if len(numbered) <= 2 * SUMMARY_ENDS + 1:
        return numbered
    hidden = len(numbered) - 2 * SUMMARY_ENDS
    return numbered[:SUMMARY_ENDS] + [(None, hidden)] + numbered[-SUMMARY_ENDS:]


def show_summary(turns: list) -> None:
    """A table of the run's turns (numbered_rows): how each ended and what it cost, then the totals."""
    rows = [(r.stop_reason, r.usage.input_tokens, r.usage.output_tokens) for r in turns]
    table = Table(title="summary")
    for column in ("turn", "stop_reason", "tokens in", "tokens out"):
        table.add_column(column)
    for n, row in numbered_rows(rows):
        if n is None:
            table.add_row("…", f"{row:,} more turns", "", "")
            continue
        stop_reason, tokens_in, tokens_out = row
        table.add_row(str(n), stop_reason, str(tokens_in), str(tokens_out))
    table.add_row("total", "", str(sum(r[1] for r in rows)), str(sum(r[2] for r in rows)))
    console.print(table)


def show_budget(budget) -> None:
    """s05's summary: the run's model calls (numbered_rows), their tokens and estimated cost, the totals.
    A row a call, not a turn: from s06 on, a turn's call can be sent again, and the budget pays for each."""
    table = Table(title="summary: a row per model call, as the budget counts them")
    for column in ("call", "stop_reason", "tokens in", "tokens out", "cost (est.)"):
        table.add_column(column, justify="left" if column == "stop_reason" else "right")
    for n, row in numbered_rows(budget.rows):
        if n is None:
            table.add_row("…", f"{row:,} more calls", "", "", "")
            continue
        stop_reason, tokens_in, tokens_out, dollars = row
        table.add_row(str(n), stop_reason, f"{tokens_in:,}", f"{tokens_out:,}", f"${dollars:.4f}")
    tokens_in, tokens_out = sum(row[1] for row in budget.rows), sum(row[2] for row in budget.rows)
    table.add_row("total", "", f"{tokens_in:,}", f"{tokens_out:,}", f"${budget.cost:.4f}")
    console.print(table)


def label(block, limit: int = 44) -> str:
    """A call in a few words: its tool and the first line of its first input."""
    first = next(iter(block.input.values()), "") if isinstance(block.input, dict) else ""
    return printable(f"{block.name} {(str(first).splitlines() or [''])[0]}")[:limit]  # a fixture's name


TIMELINE_RESOLUTION = 0.005  # s: a turn shorter than this is drawn by group, not by time


def show_timeline(timeline: list, width: int | None = None) -> None:
    """Which calls ran together and how long each took: one line per call, its bar on the turn's time
    axis, fitted to the terminal; then, per group, whether its calls really overlapped. Calls too quick
    to time get no bars (they could only draw noise), and a turn of one call shows nothing."""
    if len(timeline) < 2:
        return
    calls = sorted(timeline, key=lambda t: t.index)
    names = [label(t.block, 36) for t in calls]
    name_width = max(map(len, names))
    bar_width = max(10, (width or console.width) - name_width - 20)  # " g1  name  12345 ms  |bar|"
    start, end = min(t.started for t in calls), max(t.ended for t in calls)
    timed = end - start >= TIMELINE_RESOLUTION
    axis = "bars: time" if timed else "too quick to time: no bars"
    console.print(f"tool calls by group (a group's reads run together; {axis})", style="dim")
    for t, name in zip(calls, names):
        line = f" g{t.group:<2} {name:<{name_width}}  {(t.ended - t.started) * 1000:5.0f} ms"
        if timed:
            scale = bar_width / (end - start)
            left, length = round((t.started - start) * scale), max(1, round((t.ended - t.started) * scale))
            line += f"  |{(' ' * left + '█' * length)[:bar_width].ljust(bar_width)}|"
        console.print(line, markup=False, highlight=False)
    for group in sorted({t.group for t in calls}):
        console.print(
            f"   group {group}: {together([t for t in calls if t.group == group], timed)}", style="dim"
        )


def together(calls: list, timed: bool) -> str:
    """One group in words: alone, ran together (their times overlap), or one after another."""
    if len(calls) == 1:
        return f"{label(calls[0].block, 36)}, alone"
    if not timed:
        return f"{len(calls)} reads sent to the thread pool together (each too quick to time)"
    most = at_once(calls)
    if most == 1:  # sent together, but each ended before the next one began (quick reads, or one worker)
        return f"{len(calls)} reads sent to the thread pool together; none overlapped another"
    return f"{len(calls)} reads ran together, up to {most} at once"


def at_once(calls: list) -> int:
    """The most calls running at the same moment (an end and a start at one instant do not overlap)."""
    events = sorted([(t.started, 1) for t in calls] + [(t.ended, -1) for t in calls])
    running = most = 0
    for _, change in events:
        running += change
        most = max(most, running)
    return most


def show_tools(calls: list, results: list[dict], timeline: list) -> None:
    """s04 on: each call with its answer, in tool_use order, then the timeline of what ran together."""
    for block, result in zip(calls, results):
        show_tool(block, result["content"], result["is_error"])
    show_timeline(timeline)


_streamed_line: list[str] = []  # off a terminal (a notebook, a file): the model's text so far on this line


def show_event(event) -> None:
    """s06: the model's text as it streams in. At a terminal each piece shows at once; anywhere else
    (a notebook, a log) whole lines, so that no word is split across outputs. A tool call is shown
    once, with its result, when it has run (show_tools)."""
    at_terminal = console.is_terminal
    if event.type == "content_block_start" and event.content_block.type == "text":
        if at_terminal:
            console.out("model: ", style="bold", end="", highlight=False)
        _streamed_line[:] = ["model: "]
    elif event.type == "text" and at_terminal:
        console.out(printable(event.text), end="", highlight=False)
    elif event.type == "text":
        *whole, rest = "".join([*_streamed_line, printable(event.text)]).split("\n")
        for line in whole:
            show_model_line(line)
        _streamed_line[:] = [rest]
    elif event.type == "content_block_stop" and event.content_block.type == "text":
        if at_terminal:
            console.out("")
        else:
            show_model_line("".join(_streamed_line))
        _streamed_line.clear()


def show_model_line(line: str) -> None:
    """One whole line of streamed text, wrapped between words: the first one opens with `model:`."""
    if line.startswith("model: "):
        console.print(
            f"[bold]model:[/] {escape(printable(line.removeprefix('model: ')))}"
        )  # whole: a key too
    else:
        console.print(line, markup=False)


def show_spend(budget, warning: str | None) -> None:
    """s05: what the run has spent so far, and the cost warning the first time it applies."""
    say(f"run so far: {budget.tokens:,} tokens, about ${budget.cost:.4f}")
    if warning:
        console.print(f"[yellow]cost warning:[/] {escape(warning)}")


def show_transition(transition: str, why: str) -> None:
    """s06: the transition an iteration ends in, and why."""
    colour = {"done": "green", "fail": "red", "next_turn": "dim"}.get(transition, "magenta")
    say(f"→ {transition}  {why}", colour)


def show_prompt(label: str, text: str) -> None:
    """Words the harness itself sends the model (s06's request to go on), under a label: whole and
    wrapped, since the model reads every one."""
    say(f"{label}:", "magenta")
    console.out("\n".join(error_lines(printable(text))), highlight=False)


def show_hook(command: str, output: str, passed: bool) -> None:
    """s07: the stop hook as it ran, and what it said: whole if it failed (the model reads every word)."""
    say(f"stop hook: $ {command}", "cyan")
    text = printable(output)
    console.out("\n".join(result_lines(text) if passed else error_lines(text)), highlight=False)


def show_context(before: int, after: int) -> None:
    """s08: what collapse or compaction made of the context."""
    say(f"context {before:,} → {after:,} characters")


def show_resumed(messages: list) -> None:
    """s09's --resume: where the saved conversation stopped, its last turn's calls each with the answer
    saved for it (a call a Ctrl-C cut short says so)."""
    asked = messages[-2] if len(messages) > 1 and messages[-1]["role"] == "user" else {}
    answers = [b for b in messages[-1]["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
    answered = {b.get("tool_use_id"): b for b in answers} if asked else {}
    for call in asked.get("content", []) if isinstance(asked.get("content"), list) else []:
        if call.get("type") == "tool_use" and call.get("id") in answered:
            block = SimpleNamespace(name=call.get("name"), input=call.get("input"), id=call.get("id"))
            answer = answered[call["id"]]
            show_tool(block, str(answer.get("content", "")), bool(answer.get("is_error")))


SCREEN_LINES, SCREEN_CHARS = 40, 4_000  # a message shown for the reader: a screen of it at most


def screenful(text: str) -> str:
    """`text` as a screen shows it: at most SCREEN_LINES lines and SCREEN_CHARS characters, and a mark
    that counts the rest (a 4 MB hand-over message printed 50,062 lines: red team five)."""
    lines = text[:SCREEN_CHARS].split("\n")[:SCREEN_LINES]
    kept = "\n".join(lines)
    left = len(text) - len(kept)
    return kept if left <= 0 else f"{kept}\n… {left:,} more characters not shown"


def show_handoff(source: str, saved: int, opening: str) -> None:
    """s11's --handoff: which saved conversation a fresh session starts from, and a screenful of its one
    message, wrapped (the model reads every word of it; the reader sees where it goes)."""
    say(f"fresh session: the {saved} messages saved in\n  {source}\nhand over one message:", "bold")
    console.print(escape(screenful(printable(opening))), style="dim", highlight=False)


def show_trace(path, most: int = 30) -> None:
    """A trace (s10) as it was written, a line an event, each in a few words (the first `most` lines)."""
    if path is None or not path.is_file():
        return
    say("the trace it wrote, one JSON object a line, each in a few words:", "bold")
    width, count = console.width, 0
    with path.open() as lines:  # a line at a time: a long run's trace is long
        for count, raw in enumerate(lines, 1):
            line = json.loads(raw) if count <= most else None
            shown = f"  {line['event']:<11} {trace_line_in_words(line)}" if line else ""
            if shown:
                say(shown if len(shown) <= width else shown[: width - 1] + "…")
    if count > most:
        say(f"  … ({count - most} more lines)")


def trace_line_in_words(line: dict) -> str:
    """What a trace line holds, in a few words."""
    event, request = line["event"], line.get("request") or {}
    if event == "model_call" and "response" in line:
        added = len(request.get("new_messages", []))
        reply = line["response"].get("stop_reason")
        if "tool_choice" in request:  # s08's request for a summary, beside the conversation
            return f"request {line.get('step')}: for a summary, {added} messages, reply {reply}"
        return f"request {line.get('step')}: {added} new messages sent, reply {reply}"
    if event == "model_call":
        return f"request {line.get('step')}: error {(line.get('error') or {}).get('status')}"
    words = {
        "run": line.get("task"),
        "start": f"{line.get('model')}, {len(line.get('tools') or [])} tools",
        "transition": f"{line.get('name')}: {line.get('why')}",
        "tools": f"{len(line.get('results') or [])} results, then {line.get('next')}",
        "context": f"{line.get('transition')}: {line.get('before')} -> {line.get('after')} characters",
        "stop": line.get("reason"),
    }
    return str(words.get(event, ""))
