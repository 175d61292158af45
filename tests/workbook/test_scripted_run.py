"""workbook/scripted_run.py: a scripted model the SDK talks to as to the API, and a step's loop run on it."""

import dataclasses

from workbook import scripted_run
from workbook.replay import transport as replay

import anthropic
import httpx2
import pytest

import s01_agent_loop
import s05_budget


def client(model: scripted_run.ScriptedModel) -> anthropic.Anthropic:
    http = anthropic.DefaultHttpxClient(transport=httpx2.MockTransport(model))
    return anthropic.Anthropic(api_key="test", http_client=http, max_retries=0)


ASK = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "go"}]}


def test_the_script_is_a_call_a_turn_each_unlike_the_last_then_an_answer():
    responses = scripted_run.scripted_responses(3, "echo {n}")
    assert [r["stop_reason"] for r in responses] == ["tool_use", "tool_use", "end_turn"]
    assert [r["content"][0].get("input") for r in responses[:2]] == [
        {"command": "echo 1"},
        {"command": "echo 2"},
    ]


def test_each_reply_bills_the_size_of_the_request_that_asked_for_it():
    model = scripted_run.ScriptedModel(scripted_run.scripted_responses(2))
    reply = client(model).messages.create(**ASK)
    assert reply.usage.input_tokens == scripted_run.estimate_tokens(model.exchanges[0]["request"]) > 0


def test_a_request_over_the_context_limit_gets_the_apis_400():
    model = scripted_run.ScriptedModel(scripted_run.scripted_responses(2), context_limit=10)
    with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
        client(model).messages.create(**ASK | {"messages": [{"role": "user", "content": "x" * 200}]})
    assert model.exchanges[0]["response"]["status"] == 400 and model.served == 0


def test_a_streamed_request_gets_a_stream():
    model = scripted_run.ScriptedModel(scripted_run.scripted_responses(2))
    with client(model).messages.stream(**ASK) as stream:
        message = stream.get_final_message()
    assert message.content[0].input == {"command": "true 1"} and "stream" in model.exchanges[0]["response"]


def test_a_request_that_forbids_tools_gets_a_summary_and_uses_no_turn():
    model = scripted_run.ScriptedModel(scripted_run.scripted_responses(2))
    summary = client(model).messages.create(**ASK, tool_choice={"type": "none"})
    assert summary.content[0].type == "text" and model.served == 0


def test_a_request_the_api_would_refuse_stops_the_run_and_so_does_one_past_the_script():
    model = scripted_run.ScriptedModel(scripted_run.scripted_responses(1))
    with pytest.raises(replay.ReplayMismatch, match="the API would reject this request"):
        client(model).messages.create(**ASK | {"messages": [{"role": "assistant", "content": "hi"}]})
    client(model).messages.create(**ASK)
    with pytest.raises(replay.ReplayExhausted):
        client(model).messages.create(**ASK)


def test_a_steps_loop_runs_the_whole_script_with_its_budget_out_of_reach(tmp_path):
    for step, turns in ((s01_agent_loop, 3), (s05_budget, 60)):  # s05's default stops at 50 calls
        model = scripted_run.ScriptedModel(scripted_run.scripted_responses(turns))
        scripted_run.run_loop(step, model, tmp_path)
        assert model.served == turns, step.__name__
    budget = scripted_run.unlimited(s05_budget.Budget)
    assert all(
        getattr(budget, f.name) >= 10**12 for f in dataclasses.fields(budget) if f.name.startswith("max_")
    )
