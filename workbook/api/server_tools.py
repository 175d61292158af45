"""Server tools: the API runs one (web search, web fetch, code execution, tool search) only for a request
that declares it in `tools`, as an entry with a versioned `type`: {"type": "web_search_20250305", "name":
"web_search"}. A reply shows what it ran as a `server_tool_use` block and the tool's `*_tool_result`.

So a recorded reply that holds a server tool's blocks answers only a request that declares that tool.
The request alone is one the API takes (the contract, workbook/api/contract.py, judges it by itself);
what it cannot get is this reply. The Player asks here before it answers (workbook/replay/player.py),
and so does `check`, of each recorded request and its own reply (workbook/replay/fixtures.py).
"""

from __future__ import annotations

from workbook.api.wire import recorded_message

# A reply's block a server tool wrote -> the name a request declares that tool by. The keys are the SDK's
# ServerToolUseBlock names and its *ToolResultBlock types (tests/api/test_server_tools.py keeps them in
# step with the SDK); tool_search_tool_result is left out, as its server_tool_use names the tool.
TOOL_OF = {
    "web_search": "web_search",
    "web_search_tool_result": "web_search",
    "web_fetch": "web_fetch",
    "web_fetch_tool_result": "web_fetch",
    "code_execution": "code_execution",
    "code_execution_tool_result": "code_execution",
    "bash_code_execution": "code_execution",
    "bash_code_execution_tool_result": "code_execution",
    "text_editor_code_execution": "code_execution",
    "text_editor_code_execution_tool_result": "code_execution",
    "tool_search_tool_regex": "tool_search_tool_regex",
    "tool_search_tool_bm25": "tool_search_tool_bm25",
}


def used(message: dict | None) -> list[str]:
    """The server tools a reply's content used, each by the name a request declares it by, in order."""
    names = []
    for block in (message or {}).get("content") or []:
        kind = block.get("type") if isinstance(block, dict) else None
        name = TOOL_OF.get(block.get("name") if kind == "server_tool_use" else kind)
        if name and name not in names:
            names.append(name)
    return names


def declared(body: dict) -> set[str]:
    """The server tools a request declares: its `tools` entries with a versioned `type` (not `custom`)."""
    tools = body.get("tools") if isinstance(body.get("tools"), list) else []
    return {t.get("name") for t in tools if isinstance(t, dict) and t.get("type") not in (None, "custom")}


def undeclared(body: dict, response: dict) -> list[str]:
    """The server tools a recorded response used that this request did not declare."""
    have = declared(body)
    return [name for name in used(recorded_message(response)) if name not in have]


def recording_problems(exchange: dict) -> list[str]:
    """A recorded exchange whose reply used a server tool its own request did not declare: the API would not
    have run it (for `check`; an exchange already well-shaped)."""
    return [
        f".response: uses the server tool `{name}`, which its request does not declare in `tools` "
        "(the API runs a server tool only when the request declares it)"
        for name in undeclared(exchange["request"], exchange["response"])
    ]
