"""The SDK's types as checks: as strict as the API, closed where it is closed; built in this process from
the installed SDK's types, so a newer SDK needs nothing regenerated; nothing written or cached at run
time, nothing run but the SDK's and pydantic's own code."""

import subprocess
import sys

from workbook.api import contract, sdk_types

from conftest import ROOT

TEXT = {"type": "text", "text": "hi"}


def request(*content, **fields) -> dict:
    return {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": list(content)}]} | fields


def result(content) -> dict:
    return {"type": "tool_result", "tool_use_id": "toolu_1", "content": content}


def test_a_well_formed_request_and_response_fit():
    assert contract.fits("request", request(TEXT, stream=True))
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [TEXT]}
    message |= {
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    assert contract.fits("message", message)
    assert contract.fits("message", message | {"a_field_from_a_newer_api": 1})  # responses stay open


def test_an_object_where_the_sdk_says_an_iterable_is_refused():
    # Lax pydantic reads a dict as the iterable of its keys; the API refuses it, and so does the check.
    assert not contract.fits("request", request(result({"a": 1})))
    assert contract.fits("request", request(result([TEXT]))) and contract.fits(
        "request", request(result("ok"))
    )


def test_nothing_is_coerced():
    assert not contract.fits("request", request(TEXT, max_tokens="5"))
    assert not contract.fits("request", request(TEXT, max_tokens=True))
    assert not contract.fits("request", request({"type": "text", "text": 5}))


def test_a_request_refuses_a_field_the_api_does_not_know_at_any_depth():
    assert not contract.fits("request", request(TEXT, foo=1))
    assert not contract.fits("request", request(TEXT | {"foo": 1}))
    assert contract.shape_problems("request", request(TEXT | {"foo": 1})) == [
        contract.Problem("messages.0.content.0.foo", "Extra inputs are not permitted")
    ]


def test_a_block_is_picked_by_its_type_and_an_unknown_type_is_named():
    problems = contract.shape_problems("request", request({"type": "txet", "text": "x"}))
    assert str(problems[0]).startswith("messages.0.content.0.type: Input tag 'txet'")
    tools = [{"name": "t", "input_schema": {"type": "object"}}]  # a custom tool may omit its `type`
    assert contract.fits("request", request(TEXT, tools=tools))


def test_one_message_fits_as_the_whole_request_would():
    for message in ({"role": "user", "content": [TEXT]}, {"role": "user", "content": [result({"a": 1})]}):
        whole = contract.fits("request", {"model": "m", "max_tokens": 5, "messages": [message]})
        assert contract.message_fits("request", message) is whole


def test_the_checks_are_built_in_process_and_write_nothing(tmp_path):
    code = (
        "from workbook.api import contract; assert contract.fits('request', {'model': 'm', 'max_tokens': 1, "
        "'messages': [{'role': 'user', 'content': 'hi'}]})"
    )
    env = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == []  # no cache folder, no file


def test_the_checks_come_from_the_installed_sdks_types():
    assert set(sdk_types.TYPES) == {"request", "beta_request", "message", "error", "event"}
    assert all(module.startswith("anthropic.types") for module, _, _ in sdk_types.TYPES.values())
