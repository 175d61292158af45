"""What the recovery chain's tests share (tests/steps/test_s06_recovery.py, and the steps that add to the
chain: test_s07_really_done.py, test_s08_full_context.py, test_s10_trace.py): each fixture's path of
transitions, running a step's loop on a fixture, on a script of replies, or live against a stand-in."""

import json

from workbook import scratch
from workbook.api import contract, wire
from workbook.replay import fixtures, trust
from workbook.replay import transport as replay

import anthropic
from conftest import ROOT
from standin import Reply, StandIn, message

FIXTURES = ROOT / "fixtures"


PATHS = {
    "truncated_text": ["escalate", "continue", "done"],
    "truncated_tool_use": ["escalate", "continue", "next_turn", "next_turn", "done"],
    "escalation": ["escalate", "next_turn", "done"],
    "prompt_too_long_collapse": ["next_turn", "next_turn", "collapse", "next_turn", "done"],
    "collapse_then_compact": ["next_turn"] * 4 + ["collapse", "compact", "done"],
    "pause_turn": ["resume_pause", "resume_pause", "done"],
    "overloaded_mid_stream": ["next_turn", "done"],  # the retry is call_model's, below the transitions
    "stop_hook": ["next_turn", "hook_retry", "next_turn", "done"],
    "window_full_after_history": ["next_turn"] * 3 + ["make_room", "done"],
}


FIRST_STEP = {  # the step whose transitions a path needs, when not s06
    **dict.fromkeys(("pause_turn", "stop_hook"), "s07"),
    **dict.fromkeys(
        ("prompt_too_long_collapse", "collapse_then_compact", "window_full_after_history"), "s08"
    ),
}


def keeps(step, **settings) -> dict:
    """Those of `settings` the step's Settings has (the trace is s09's)."""
    return {name: value for name, value in settings.items() if name in step.Settings.__dataclass_fields__}


def no_wait(step, attempts: int = 5):
    """A retry policy that never sleeps (s03's Retry), so tests take no time."""
    return step.Retry(lambda seconds: None, lambda: 0.5, attempts)


def flags_of(step, fixture: dict) -> dict:
    """The settings a fixture's own flags (`args`) ask for: its stop hook, web search, limits."""
    args = [part for arg in fixture.get("args", []) for part in arg.split("=", 1)]  # --flag=value too
    hook = args[args.index("--stop-hook") + 1] if "--stop-hook" in args else None
    given = {flag[2:].replace("-", "_"): value for flag, value in zip(args, args[1:])}
    limits = {name: (float if name == "max_cost" else int)(given[name]) for name in LIMITS if name in given}
    return {"stop_hook": hook, "web_search": "--web-search" in args, "budget": step.Budget(**limits)}


LIMITS = ("max_steps", "max_tokens_total", "max_input_tokens", "max_cost")  # s05's Budget, by flag


def settings_for(step, workspace, transport=None, hook_retries=2, attempts=5, **settings):
    """Settings(workspace, **settings), its retries never waiting, with Recovery(hook_retries), and
    the person at the gate of the replay `transport` plays (a trusted recording says yes to its own
    calls); a live run (no transport) has nobody to ask."""
    wanted = {"hook_retries": hook_retries}  # s07's: the stop hook
    recovery = step.Recovery(**{k: v for k, v in wanted.items() if k in step.Recovery.__dataclass_fields__})
    settings.setdefault("ask", trust.recorded_person(transport, workspace) if transport else None)
    return step.Settings(workspace, retry=no_wait(step, attempts), recovery=recovery, **settings)


def run_loop(step, client, workspace, messages=None, transport=None, **settings):
    """The step's agent_loop under settings_for(...); returns the settings, whose recovery.log holds
    the transitions taken."""
    ran = settings_for(step, workspace, transport, **settings)
    step.agent_loop(client, messages or [{"role": "user", "content": "go"}], ran)
    return ran


def replay_path(step, name: str, tmp_path=None, strict: bool = True):
    """Replay fixtures/s06_<name>.json through the step's own loop: (transitions, transport, ...)."""
    fixture = fixtures.load_fixture(FIXTURES / f"s06_{name}.json")
    client, transport = replay.replay_client(fixture, name, strict)
    workspace = scratch.copy_workspace(fixture["workspace"])
    traced = {}  # the steps that keep a trace (s10 on) write one, opened with its run line as main() does
    if hasattr(step, "Trace"):
        traced["trace"] = step.Trace(tmp_path / "trace.jsonl" if tmp_path else None)
        where = {"task": fixture["task"], "workspace": fixture["workspace"], "args": fixture.get("args", [])}
        traced["trace"].write("run", provenance=fixture["provenance"], **where)
    messages = [{"role": "user", "content": fixture["task"]}]
    settings = settings_for(step, workspace, transport, **traced, **keeps(step, **flags_of(step, fixture)))
    turns = step.agent_loop(client, messages, settings)
    return [t for t, _ in settings.recovery.log], transport, messages, workspace, turns


def reply(fixture: dict, n: int) -> dict:
    """The Message of exchange n, whether recorded as a JSON body or as a stream of events."""
    response = fixture["exchanges"][n]["response"]
    return response["body"] if "body" in response else wire.events_to_message(response["stream"])


def body(content: list, stop_reason: str) -> dict:
    return message(content, stop_reason)


def generated(step, replies: list, **settings):
    """Run the loop on a script of replies (dicts, or (status, error body) pairs) in lenient replay:
    (recovery, transport, messages)."""
    exchanges = []
    for reply in replies:
        response = {"status": 200, "body": reply} if "type" in reply else reply
        exchanges.append({"request": {"messages": [{"role": "user", "content": "go"}]}, "response": response})
    client, transport = replay.replay_client({"exchanges": exchanges}, "generated", strict=False)
    messages = [{"role": "user", "content": "go"}]
    ran = run_loop(step, client, scratch.copy_workspace(""), messages, transport, **settings)
    return ran.recovery, transport, messages


def too_long(tokens: int = 203117) -> dict:
    message_ = f"prompt is too long: {tokens} tokens > 200000 maximum"
    return {
        "status": 400,
        "body": {"type": "error", "error": {"type": "invalid_request_error", "message": message_}},
    }


def assert_every_request_valid(transport):
    for n, request in enumerate(transport.seen, 1):
        assert contract.api_rule_problems(request["messages"]) == [], f"request {n}"


def streamed(brain):
    """A stand-in brain whose Message replies go out as SSE when the request asked to stream."""

    def wrapper(body_, n):
        reply = brain(body_, n)
        if isinstance(reply, dict) and body_.get("stream"):
            return Reply(events=wire.message_to_events(reply))
        return reply

    return wrapper


def size(body_) -> int:
    return len(json.dumps(body_["messages"]))


def live_loop(step, brain, workspace, **settings):
    """agent_loop against the stand-in over real HTTP; returns (transitions, the stand-in)."""
    with StandIn(streamed(brain)) as api:
        client = anthropic.Anthropic(api_key="test", base_url=api.url, max_retries=0)
        state = run_loop(step, client, workspace, **settings).recovery
    return [t for t, _ in state.log], api


def streamed_fixture(name: str) -> dict:
    return fixtures.load_fixture(FIXTURES / f"{name}.json")


def replay_streamed(step, name: str, tmp_path=None):
    """Replay fixtures/NAME.json (streamed) through the step's loop: (turns, budget, transport)."""
    recorded = streamed_fixture(name)
    client, transport = replay.replay_client(recorded, f"{name}.json", max_retries=0)
    workspace = scratch.copy_workspace(recorded["workspace"])
    trace = step.Trace(tmp_path / "trace.jsonl" if tmp_path else None) if hasattr(step, "Trace") else None
    person = trust.recorded_person(transport, workspace)
    settings = step.Settings(workspace, retry=no_wait(step), ask=person, **keeps(step, trace=trace))
    turns = step.agent_loop(client, [{"role": "user", "content": recorded["task"]}], settings)
    return turns, settings.budget, transport
