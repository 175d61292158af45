"""LangChain (langchain-anthropic) walks a recording: ChatAnthropic.bind_tools in a plain loop.

ANTHROPIC_BASE_URL=http://127.0.0.1:8765 ANTHROPIC_API_KEY=alice python langchain_walk.py s01_hello_agent
"""

import sys

from langchain_anthropic import ChatAnthropic
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from walk import recording, run_tool, settings, workspace


def main(name: str) -> int:
    rec = recording(name)
    folder = workspace(rec)
    url, key = settings()
    chat = ChatAnthropic(model=rec["model"], base_url=url, api_key=key, max_tokens=4096, max_retries=0)
    model = chat.bind_tools(rec["tools"])  # the recording's tools, in the API's own format
    messages = [SystemMessage(rec["system"]), HumanMessage(rec["task"])]
    for _ in range(20):
        reply = model.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            print(reply.text)
            return 0
        for call in reply.tool_calls:
            out, failed = run_tool(folder, call["name"], call["args"])
            messages.append(
                ToolMessage(out, tool_call_id=call["id"], status="error" if failed else "success")
            )
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[-1]))  # a fixture's name, or the grader's task
