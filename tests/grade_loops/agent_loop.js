// A plain agent loop in JavaScript (Node 18+): fetch, one bash tool, a bounded retry. No SDK.
// The grader's tests run it to show that a loop in any language climbs the same ladder.
const { execSync } = require("node:child_process");

const URL = `${process.env.ANTHROPIC_BASE_URL || "https://api.anthropic.com"}/v1/messages`;
const HEADERS = {
  "content-type": "application/json",
  "x-api-key": process.env.ANTHROPIC_API_KEY,
  "anthropic-version": "2023-06-01",
};
const TOOLS = [
  {
    name: "bash",
    description: "Run a shell command in the current folder.",
    input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] },
  },
];
const ATTEMPTS = 5;
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

// One model call: 429, 5xx and a lost connection are retried (waiting as retry-after asks), at
// most ATTEMPTS times; any other error would fail the same way again, so it stops the run.
async function callModel(messages) {
  for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
    let response;
    try {
      const body = JSON.stringify({ model: "claude-sonnet-5", max_tokens: 4000, tools: TOOLS, messages });
      response = await fetch(URL, { method: "POST", headers: HEADERS, body });
    } catch {
      await sleep(50 * attempt);
      continue;
    }
    const reply = await response.json();
    if (response.ok) return reply;
    if (response.status !== 429 && response.status < 500) {
      throw new Error(`the API answered ${response.status}: ${reply.error?.message}`);
    }
    const ms = response.headers.get("retry-after-ms");
    const seconds = response.headers.get("retry-after");
    await sleep(ms !== null ? Number(ms) : seconds !== null ? 1000 * Number(seconds) : 50 * attempt);
  }
  throw new Error(`the API kept failing: gave up after ${ATTEMPTS} attempts`);
}

function runTool(block) {
  if (block.name !== "bash") return [`error: there is no tool ${block.name}; use bash`, true];
  if (typeof block.input.command !== "string") return ["error: bash needs a `command` string", true];
  try {
    return [execSync(block.input.command, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }) || "(no output)", false];
  } catch (err) {
    return [`${err.stdout}${err.stderr}(exit ${err.status})`, true];
  }
}

async function main(task) {
  const messages = [{ role: "user", content: task }];
  for (;;) {
    const reply = await callModel(messages);
    messages.push({ role: "assistant", content: reply.content });
    if (reply.stop_reason !== "tool_use") {
      console.log(reply.content.filter((b) => b.type === "text").map((b) => b.text).join(""));
      return;
    }
    const results = reply.content
      .filter((block) => block.type === "tool_use")
      .map((block) => {
        const [output, failed] = runTool(block);
        return { type: "tool_result", tool_use_id: block.id, content: output, is_error: failed };
      });
    messages.push({ role: "user", content: results });
  }
}

main(process.argv[2]).catch((err) => {
  console.error(`stopped: ${err.message}`);
  process.exit(1);
});
