"""litellm walks a recording: its OpenAI-style completion() in a plain loop, the recording's tools.

ANTHROPIC_BASE_URL=http://127.0.0.1:8765 ANTHROPIC_API_KEY=alice python litellm_walk.py s01_hello_agent
"""

import json
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no internet: its own copy of the price list
import litellm  # noqa: E402
from walk import recording, run_tool, settings, workspace  # noqa: E402

litellm.suppress_debug_info = True  # its "Provider List" line for a model it has no price for


def main(name: str) -> int:
    rec = recording(name)
    folder = workspace(rec)
    url, key = settings()
    tools = [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t["input_schema"],
            },
        }
        for t in rec["tools"]
    ]
    messages = [{"role": "system", "content": rec["system"]}, {"role": "user", "content": rec["task"]}]
    for _ in range(20):
        reply = litellm.completion(
            model=f"anthropic/{rec['model']}",
            messages=messages,
            tools=tools,
            api_base=url,
            api_key=key,
            max_tokens=4096,
        )
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            print(message.content)
            return 0
        for call in message.tool_calls:
            try:
                args = json.loads(call.function.arguments or "{}")
            except json.JSONDecodeError:
                args = {}
            out, _failed = run_tool(folder, call.function.name, args)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": out})
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[-1]))  # a fixture's name, or the grader's task
