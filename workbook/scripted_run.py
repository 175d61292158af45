"""A step's own loop run against a scripted model: `turns - 1` turns of one bash call, then an answer.

The notebooks draw their token charts from such runs (notebook_view.long_run), and the benchmark of a
long replay makes its recordings with them (bench/long_replay.py). The model is an httpx transport, so
the step's loop talks to it through the real SDK client, as it would to the API:

    model = ScriptedModel(scripted_responses(100, "seq 1 500 # {n}"))
    run_loop(step_module, model, workspace)        # every (request, response) is in model.exchanges

Each request is checked against the API's contract, and each response's usage.input_tokens is chars/4
of the request that produced it (no tokenizer offline), so a step that budgets on usage sees the
history grow. With `context_limit`, a request over it gets the API's 400 "prompt is too long"; one that
forbids tools (tool_choice none, as s06 asks for a summary) gets a short text answer.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from workbook import display
from workbook.api import contract, wire
from workbook.replay.transport import ReplayExhausted, ReplayMismatch

import anthropic
import httpx2
from rich.console import Console

TASK = "Run the command once per turn until you have run it enough times, then say done."
JSON = {"content-type": "application/json"}
SSE = {"content-type": "text/event-stream"}


def estimate_tokens(body) -> int:
    """Tokens estimated as chars/4 of the JSON (the usual rule of thumb; no tokenizer offline)."""
    return len(json.dumps(body, ensure_ascii=False)) // 4


def message(content: list, stop_reason: str, message_id: str) -> dict:
    """A scripted reply: its output tokens chars/4 of its content (its input tokens are the request's)."""
    return wire.message_body(content, stop_reason, message_id, usage=(0, max(1, estimate_tokens(content))))


def scripted_responses(turns: int, command: str = "true {n}") -> list[dict]:
    """`turns - 1` turns of one bash call (`command` with {n} the turn, so no two calls are alike and no
    repeated-call brake fires), then an end_turn."""
    calls = [
        message(
            [
                {
                    "type": "tool_use",
                    "id": f"toolu_turn_{n:05d}",
                    "name": "bash",
                    "input": {"command": command.format(n=n)},
                }
            ],
            "tool_use",
            f"msg_scripted_{n:04d}",
        )
        for n in range(1, turns)
    ]
    return calls + [
        message(
            [{"type": "text", "text": f"Done: ran it {turns - 1} times."}],
            "end_turn",
            f"msg_scripted_{turns:04d}",
        )
    ]


@dataclass
class ScriptedModel:
    """An httpx transport answering each request with the next scripted response, keeping each exchange."""

    responses: list[dict]
    context_limit: int | None = None
    exchanges: list[dict] = field(default_factory=list)  # {"request", "response"}, as a fixture holds them
    served: int = 0  # scripted turns answered so far

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content or b"{}")
        problems = contract.request_problems(body)
        if problems:
            where = f"scripted run, request {len(self.exchanges) + 1}"
            raise ReplayMismatch(f"{where}: the API would reject this request — {problems[0]}")
        tokens = estimate_tokens(body)
        if self.context_limit and tokens > self.context_limit:
            text = f"prompt is too long: {tokens} tokens > {self.context_limit} maximum"
            error = {"type": "error", "error": {"type": "invalid_request_error", "message": text}}
            return self._answer(body, {"status": 400, "headers": JSON, "body": error})
        if (body.get("tool_choice") or {}).get("type") == "none":
            summary = [{"type": "text", "text": f"Summary: the command ran {self.served} times so far."}]
            reply = message(summary, "end_turn", f"msg_scripted_summary_{len(self.exchanges)}")
        elif self.served < len(self.responses):
            reply = copy.deepcopy(self.responses[self.served])
            self.served += 1
        else:
            raise ReplayExhausted(f"the loop sent more than {len(self.responses)} requests")
        reply["usage"]["input_tokens"] = tokens
        if body.get("stream"):
            return self._answer(
                body, {"status": 200, "headers": SSE, "stream": wire.message_to_events(reply)}
            )
        return self._answer(body, {"status": 200, "headers": JSON, "body": reply})

    def _answer(self, body: dict, response: dict) -> httpx2.Response:
        self.exchanges.append({"request": body, "response": response})
        return wire.http_response(response)


def unlimited(budget_class):
    """A step's budget with every max_* limit out of reach: a long run measures, it must not be stopped."""
    fields = [f for f in dataclasses.fields(budget_class) if f.name.startswith("max_")]
    return budget_class(**{f.name: type(f.default)(10**12) for f in fields})


def run_loop(step, model: ScriptedModel, workspace: Path, console_class=None, task: str = TASK) -> None:
    """Run the step module's agent_loop on `task` against `model`, its output rendered to memory. Its
    commands run (permission "all" from s02 on: s02 asks about a command it does not know) and from
    s05 on its budget is out of reach."""
    http = anthropic.DefaultHttpxClient(transport=httpx2.MockTransport(model))
    client = anthropic.Anthropic(api_key="scripted", http_client=http, max_retries=0)
    fields = {f.name: f for f in dataclasses.fields(step.Settings)}
    options = {"permission": "all"} if "permission" in fields else {}
    if "budget" in fields:
        options["budget"] = unlimited(fields["budget"].default_factory)
    saved = display.console
    display.console = (console_class or Console)(file=io.StringIO(), width=100, force_terminal=False)
    try:
        step.agent_loop(client, [{"role": "user", "content": task}], step.Settings(workspace, **options))
    finally:
        display.console = saved
