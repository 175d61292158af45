"""s03_errors.py — Errors are data: a failed model call is retried, or reported.

A tool's failure is already data (s02: an `is_error` result the model reads).
The model call can fail too: overloaded, rate limited, a lost connection.
Adds over s02: every model call goes through one retry layer, `call_model()`,
which retries only what can pass on its own (backoff, jitter, a cap,
retry-after) and shows each attempt; a tool call is never re-run. What
retrying cannot fix stops the run: one line saying what to do, the
conversation saved, exit 1; so does a broken harness (the workspace gone).

    user task
        |
        v
    +==============+  stop_reason != tool_use   +------+
    | call_model() | -------------------------> | done |
    +==============+                            +------+
        ^      | tool_use    new in s03: 408, 409, 429, 5xx (529: overloaded)
        |      |             and lost connections retried (backoff, jitter,
        |      |             a cap, retry-after), each attempt shown; 400,
        |      v             401, 403, 404, 413 or attempts spent: exit 1
        |  +----------------------------------+
        +--| execute() each tool_use, as in   |  new in s03: a workspace
           | s02: a failure is an is_error    |  that is gone stops the
           | result the model reads           |  run (HarnessError)
           +----------------------------------+

Run: python s03_errors.py   replay: a tool error read; a 529 and a 429 retried
     python s03_errors.py --replay fixtures/s03_bad_key.json   401: clean stop
     python s03_errors.py --replay fixtures/s03_overloaded_then_ok.json
     python s03_errors.py "task"     live, with ANTHROPIC_API_KEY
"""

import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from workbook import conversation, display, launch, step_cli
from workbook.api.retry_after import server_wait  # the pause a 429 or 529 asks for (None: none above 0)

import anthropic

import s02_tools as s02
from s01_agent_loop import MAX_TOKENS, MODEL
from s02_tools import TOOLS

DEFAULT_FIXTURE = "fixtures/s03_two_kinds_of_error.json"


# -- new in s03: one retry layer for model calls, every attempt shown ---------------------------------

# The SDK retries by itself (2 retries by default). This step owns retrying instead and builds the
# client with max_retries=0: retry layers multiply (5 attempts of ours over the SDK's 3 would be 15
# requests to an API that is already overloaded), and only one layer can show each attempt.
CLIENT_OPTIONS = {"max_retries": 0}
MAX_ATTEMPTS = 5  # requests per model call, the first included
BASE_WAIT = 0.5  # seconds: the first backoff
MAX_WAIT = 16.0  # seconds: the cap on any one backoff
MAX_SERVER_WAIT = 60.0  # a server asking for a longer pause than this ends the run instead
REASONS = {408: "request timeout", 409: "conflict", 429: "rate limited", 529: "overloaded"}


class GaveUp(Exception):
    """The retry layer stopped retrying; the message is one line saying why and what to do."""


def retryable(status: int | None) -> bool:
    """May this pass on its own? None is a lost connection or timeout; 4xx but 408/409/429 never."""
    return status is None or status in (408, 409, 429) or status >= 500


def status_of(err: anthropic.APIError) -> int | None:
    """The HTTP status of an API error; None when no answer came (connection lost, timed out)."""
    return getattr(err, "status_code", None)


def should_retry(err: anthropic.APIError) -> bool | None:
    """What the API's `x-should-retry: true|false` header says, if the error's response carries it."""
    response = getattr(err, "response", None)
    told = response.headers.get("x-should-retry") if response is not None else None
    return {"true": True, "false": False}.get(told)


def backoff(attempt: int, rand: Callable[[], float] = random.random) -> float:
    """Equal jitter: half of min(cap, base * 2^(attempt-1)) for sure, the other half at random."""
    ceiling = min(MAX_WAIT, BASE_WAIT * 2 ** (attempt - 1))
    return ceiling / 2 + rand() * ceiling / 2


@dataclass
class Retry:
    """The retry layer's policy: what may pass if sent again (reason), how long to wait before it (wait,
    then sleep; rand for the jitter), and how many attempts."""

    sleep: Callable[[float], None] = time.sleep
    rand: Callable[[], float] = random.random  # the jitter's source of randomness
    attempts: int = MAX_ATTEMPTS

    def reason(self, err: anthropic.APIError) -> str | None:
        """Why a failed call may pass if sent again, in a few words; None when it cannot. When the API
        says so itself (an `x-should-retry` header), its word wins over the status, as in the SDK."""
        status, told = status_of(err), should_retry(err)
        if told is not None:
            return f"the API says retry ({status})" if told else None
        if status is None:  # no answer at all: sent again, it may get one
            return "timed out" if isinstance(err, anthropic.APITimeoutError) else "connection failed"
        return (REASONS.get(status) or f"server error {status}") if retryable(status) else None

    def wait(self, err: anthropic.APIError, attempt: int) -> tuple[float, str]:
        """How long to wait before the next attempt, and a note saying why so long: the pause the server
        asks for (retry-after), if it asks for one, else the backoff (never over MAX_WAIT)."""
        server_asks = server_wait(err.response.headers) if status_of(err) else None
        if server_asks is None:
            return backoff(attempt, self.rand), ""
        return server_asks, " (as the server asked)"

    @classmethod
    def for_run(cls, run: launch.Run) -> Self:
        """The run's own clock and jitter: a live run waits for real."""
        return cls(run.sleep, run.rand)


def call_model(
    send: Callable[..., anthropic.types.Message], retry: Retry, **request
) -> anthropic.types.Message:
    """send(**request), where send calls the model (client.messages.create), sent again after a wait
    each time it fails in a way that may pass, every retry shown; what cannot pass is raised.

    Only model calls are retried (asking again changes nothing). A failed tool call is reported, never
    re-run: it may have deleted something before it failed, and a rerun would delete it twice."""
    for attempt in range(1, retry.attempts + 1):
        try:
            return send(**request)
        except (anthropic.APIStatusError, anthropic.APIConnectionError) as err:
            why = retry.reason(err)
            if why is None:
                raise  # 400, 401, 403, 404, 413...: the same request would fail the same way
            if attempt == retry.attempts:
                raise GaveUp(given_up(why, status_of(err), attempt)) from err
            wait, note = retry.wait(err, attempt)
            if wait > MAX_SERVER_WAIT:  # only a server's pause is this long: not waited out
                raise GaveUp(
                    f"{why} ({status_of(err)}): the API asks for a {wait:.0f} s pause — try again later"
                ) from err
            display.console.print(
                f"[yellow]{why}[/] ({status_of(err) or 'no answer'}) — retrying in {wait:.1f} s{note}, "
                f"attempt {attempt + 1} of {retry.attempts}"
            )
            retry.sleep(wait)
    raise GaveUp("no attempts allowed (attempts < 1)")


def given_up(why: str, status: int | None, attempts: int) -> str:
    """The one line for retries spent: what kept failing, and what the reader can do about it."""
    if status is None:
        return f"could not reach the API in {attempts} attempts — check the network and ANTHROPIC_BASE_URL"
    return (
        f"the API is still failing after {attempts} attempts ({why}, {status}) — try again in a few minutes"
    )


# -- new in s03: a clean stop for what retrying cannot fix --------------------------------------------

# What no retry fixes: an API error that is not retryable, retries spent (GaveUp), and one that is not
# the API's: the harness itself broken, the workspace gone. Each ends the run in one line, saved.


class HarnessError(Exception):
    """The harness itself is broken, so no tool result can help: the run stops in one line, saved.
    Every tool error is data (s02); only the API's errors and this one end a run."""


def execute(block, workspace: Path, *s02_args, **s02_kwargs) -> tuple[str, bool]:
    """Unlike s02's: a workspace that is gone stops the run. Every call would fail the same way, and
    the model cannot bring the folder back, so answering it would only spend turns. Otherwise it is
    s02's execute(), given the rest of s02's arguments (permission, audit, ask) as they came."""
    if not workspace.is_dir():
        raise HarnessError(f"the workspace {workspace} is gone (deleted or moved): nothing left to act in")
    return s02.execute(block, workspace, *s02_args, **s02_kwargs)


FATAL = (anthropic.APIError, GaveUp, HarnessError)  # what ends a run: one line, the conversation saved
WHAT_TO_DO = {  # status -> what the reader should do; none of these can pass by waiting
    400: "the request was invalid: {message} — a bug in the loop; the conversation is saved to look at",
    401: "the API refused the key (401: {message}) — check ANTHROPIC_API_KEY",
    403: "the key may not do this (403: {message}) — check its workspace and permissions in the Console",
    404: "not found (404: {message}) — check the model id (--model, MODEL_ID) and ANTHROPIC_BASE_URL",
    413: "the request is too large (413: {message}) — the conversation outgrew the limit; start afresh",
}


def api_message(err: anthropic.APIError) -> str:
    """The API's own one-line explanation, when the body has one."""
    body = err.body if isinstance(err.body, dict) else {}
    return str((body.get("error") or {}).get("message") or err.message)


def fatal_line(err: Exception) -> str:
    """One line for a stop the loop cannot fix: what happened and what to do."""
    if not isinstance(err, anthropic.APIError):
        return str(err)
    status = status_of(err)
    advice = WHAT_TO_DO.get(status, "the API answered {status}: {message}")
    return advice.format(status=status, message=api_message(err))


def stop_cleanly(err: Exception, messages: list, path: Path) -> int:
    """What retrying cannot fix: one line saying what to do, the conversation saved to look at, exit 1."""
    display.error("stopped", fatal_line(err))
    saved = conversation.save_conversation(messages, path)
    count = f"{len(messages)} message{'s' if len(messages) != 1 else ''}"
    display.say(f"conversation so far ({count}) saved to {saved}")
    return 1


# -- the loop --------------------------------------------------------------------------------------


@dataclass
class Settings(s02.Settings):
    """s02's settings, and how s03's retry layer waits."""

    retry: Retry = field(default_factory=Retry)

    @classmethod
    def for_run(cls, run: launch.Run, args) -> Self:
        """s02's, with a retry policy that, in a replay, says each wait instead of spending it."""
        settings = super().for_run(run, args)
        settings.retry = Retry.for_run(run)
        return settings


def agent_loop(client: anthropic.Anthropic, messages: list, settings: Settings) -> list:
    """Call the model, run the tools it asks for, feed the results back; repeat until it stops."""
    turns = []  # every response, in order
    while True:
        # 1. Send the whole history: the model has no memory of its own between calls.
        #    (new in s03) call_model() retries what may pass and raises what cannot, FATAL: then
        #    run_and_report() below stops the run in one line, the conversation saved, exit 1.
        with display.waiting(len(turns) + 1):  # the turn's rule on screen, a spinner till the reply
            response = call_model(
                client.messages.create,
                settings.retry,
                model=settings.model,
                system=settings.system,
                tools=TOOLS,
                messages=messages,
                max_tokens=MAX_TOKENS,
            )
        turns.append(response)
        display.show_turn(response)

        # 2. Append the reply verbatim: the next request must carry the tool_use ids it contains.
        messages.append({"role": "assistant", "content": response.content})

        # 3. Any stop but tool_use ends the loop. That includes max_tokens: a reply cut off there may
        #    hold a tool_use whose input is incomplete, and it must never be executed.
        if response.stop_reason != "tool_use":
            return turns

        # 4. Run every tool_use and answer each id exactly once, all in one user message.
        #    execute() never raises on what the model sent (s02); (new in s03) a harness gone, it does.
        results = []
        for block in response.content:
            if block.type == "tool_use":
                output, is_error = execute(
                    block, settings.workspace, settings.permission, settings.audit, settings.ask
                )
                display.show_tool(block, output, is_error)
                results.append(
                    {"type": "tool_result", "tool_use_id": block.id, "content": output, "is_error": is_error}
                )
        messages.append({"role": "user", "content": results})


def main(argv: list[str] | None = None) -> int:
    """Replay the default fixture, or run a task live (--help: the flags)."""
    parser = step_cli.make_parser(__doc__, DEFAULT_FIXTURE, "s03_errors")  # s02's --permission too
    return step_cli.run_step(parser, argv, MODEL, run_task, **CLIENT_OPTIONS)


def run_task(run: launch.Run, args) -> int:
    """s02's run, with this step's settings; what retrying cannot fix stops it, the conversation kept."""
    return run_and_report(agent_loop, Settings.for_run(run, args), run)


def run_and_report(loop, settings: Settings, run: launch.Run) -> int:
    """The task through `loop`, then the table of its turns; what retrying cannot fix stops it in one
    line, the conversation saved."""
    messages = [{"role": "user", "content": run.task}]
    try:
        turns = loop(run.client, messages, settings)
    except FATAL as err:
        return stop_cleanly(err, messages, step_cli.run_files(run) / "conversation.json")
    display.show_summary(turns)
    display.say(f"permission {settings.permission}\naudit log: {settings.audit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
