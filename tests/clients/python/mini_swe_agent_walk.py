"""mini-swe-agent walks a recording: its DefaultAgent with LitellmModel (one `bash` tool of its own) and a
LocalEnvironment in the workspace copy. The first user turn is the task alone (`instance_template:
"{{task}}"`); its default template, which wraps the task in its own words ("Please solve this issue:
…"), is taken too: the classroom looks for the recorded task word for word.

    ANTHROPIC_BASE_URL=http://127.0.0.1:8765 ANTHROPIC_API_KEY=alice \
        python mini_swe_agent_walk.py s01_hello_agent

It stops only on its own submit command (`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`), which no recording
holds: after the recording's last reply (end_turn, no tool call) it asks again, and the server's 400 (the
recording has ended) stops it. MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT=1 keeps it from retrying that 400.
"""

import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no internet: litellm's own price list
os.environ.setdefault("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")

from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.environments.local import LocalEnvironment  # noqa: E402
from minisweagent.models.litellm_model import LitellmModel  # noqa: E402
from walk import recording, settings, workspace  # noqa: E402


def main(name: str) -> int:
    rec = recording(name)
    folder = workspace(rec)
    url, key = settings()
    model = LitellmModel(
        model_name=f"anthropic/{rec['model']}",
        model_kwargs={"api_base": url, "api_key": key, "max_tokens": 4096},
        cost_tracking="ignore_errors",
    )
    agent = DefaultAgent(
        model,
        LocalEnvironment(cwd=str(folder)),
        system_template=rec["system"],
        instance_template="{{task}}",
        step_limit=20,
    )
    try:
        result = agent.run(rec["task"])
    except Exception as stopped:  # the server's 400 after the recording's end, as litellm raises it
        print(f"stopped: {type(stopped).__name__}: {str(stopped)[:300]}")
        return 1
    print(result)
    return (
        0 if result.get("exit_status") == "Submitted" else 1
    )  # its own way to end; the recordings hold none


if __name__ == "__main__":
    sys.exit(main(sys.argv[-1]))  # a fixture's name, or the grader's task
