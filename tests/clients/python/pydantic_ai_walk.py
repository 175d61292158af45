"""pydantic-ai (pydantic-ai-slim[anthropic]) walks a recording: an Agent with the recording's tools.

ANTHROPIC_BASE_URL=http://127.0.0.1:8765 ANTHROPIC_API_KEY=alice python pydantic_ai_walk.py s01_hello_agent
"""

import sys

from pydantic_ai import Agent, ModelRetry
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.tools import Tool
from walk import recording, run_tool, settings, workspace


def main(name: str) -> int:
    rec = recording(name)
    folder = workspace(rec)
    url, key = settings()
    model = AnthropicModel(rec["model"], provider=AnthropicProvider(api_key=key, base_url=url))

    def tool(spec: dict) -> Tool:
        def call(**args) -> str:
            out, failed = run_tool(folder, spec["name"], args)
            if failed:
                raise ModelRetry(out)  # pydantic-ai sends it back as an is_error tool_result
            return out

        return Tool.from_schema(call, spec["name"], spec.get("description"), spec["input_schema"])

    agent = Agent(model, system_prompt=rec["system"], tools=[tool(t) for t in rec["tools"]])
    result = agent.run_sync(rec["task"])
    print(result.output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[-1]))  # a fixture's name, or the grader's task
