"""Server tools (workbook/api/server_tools.py): a reply's server-tool blocks answer only a request that
declares the tool; the names known are the SDK's."""

import copy
import typing

from workbook.api import server_tools
from workbook.replay import fixtures

from anthropic import types
from conftest import ROOT

TEXT = {"type": "text", "text": "hi"}


def undeclared(body: dict, message: dict) -> list[str]:
    return server_tools.undeclared(body, {"status": 200, "body": message})


def test_the_server_tool_blocks_known_are_the_sdks_and_each_names_a_tool_a_request_can_declare():
    uses = set(typing.get_args(types.ServerToolUseBlock.model_fields["name"].annotation))
    results = {
        typing.get_args(getattr(types, n).model_fields["type"].annotation)[0]
        for n in dir(types)
        if n.endswith("ToolResultBlock") and n != "ToolSearchToolResultBlock"  # its use names the tool
    }
    assert set(server_tools.TOOL_OF) == uses | results
    hints = [typing.get_type_hints(param) for param in typing.get_args(types.ToolUnionParam)]
    declarable = {typing.get_args(h["name"])[0] for h in hints if "name" in h and typing.get_args(h["name"])}
    assert set(server_tools.TOOL_OF.values()) <= declarable


SEARCHED = {
    "type": "message",
    "content": [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        {"type": "bash_code_execution_tool_result", "tool_use_id": "srvtoolu_2", "content": {}},
    ],
}


def test_a_replys_server_tools_are_named_as_a_request_declares_them():
    assert server_tools.used(SEARCHED) == ["web_search", "code_execution"]
    search = {"type": "web_search_20250305", "name": "web_search"}
    assert undeclared({"tools": [search]}, SEARCHED) == ["code_execution"]
    own = {"name": "web_search", "input_schema": {"type": "object"}}  # a client tool of the same name
    assert undeclared({"tools": [own]}, SEARCHED) == ["web_search", "code_execution"]
    assert undeclared({}, {"content": [TEXT]}) == []


def test_check_refuses_a_recording_whose_reply_uses_a_server_tool_its_request_did_not_declare():
    exchange = copy.deepcopy(fixtures.load_fixture(ROOT / "fixtures" / "s06_pause_turn.json")["exchanges"][0])
    assert server_tools.recording_problems(exchange) == []
    exchange["request"]["tools"] = [t for t in exchange["request"]["tools"] if t["name"] != "web_search"]
    assert server_tools.recording_problems(exchange) == [
        ".response: uses the server tool `web_search`, which its request does not declare in `tools` "
        "(the API runs a server tool only when the request declares it)"
    ]


def test_check_names_the_exchange_whose_reply_uses_an_undeclared_server_tool():
    paused = copy.deepcopy(fixtures.load_fixture(ROOT / "fixtures" / "s06_pause_turn.json"))
    assert fixtures.fixture_problems(paused) == []
    first = paused["exchanges"][0]["request"]
    first["tools"] = [t for t in first["tools"] if t["name"] != "web_search"]
    assert fixtures.fixture_problems(paused) == [
        "exchanges[0].response: uses the server tool `web_search`, which its request does not declare in "
        "`tools` (the API runs a server tool only when the request declares it)"
    ]
