// A plain agent loop with the TypeScript SDK (@anthropic-ai/sdk), as a student might write it in
// JavaScript: one bash tool, nothing more. The SDK reads ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL,
// and retries 429, 5xx and lost connections by itself (2 retries), as plain_loop.py's does. MODEL_ID
// names the model (a classroom server takes "replay:NAME" as the fixture to serve).
// The SDK is the one tests/clients/node/ pins (`npm ci` there; .ci/run does it).
const { execSync } = require("node:child_process");
const path = require("node:path");

const clients = path.join(__dirname, "..", "clients", "node");
const Anthropic = require(require.resolve("@anthropic-ai/sdk", { paths: [clients] })).default;

const TOOLS = [
  {
    name: "bash",
    description: "Run a shell command in the current folder.",
    input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] },
  },
];

// Output and whether it failed; a call the loop cannot run is an error the model reads.
function runTool(block) {
  if (block.name !== "bash") return [`error: there is no tool ${block.name}; use bash`, true];
  if (typeof block.input.command !== "string") return ["error: bash needs a `command` string", true];
  try {
    const out = execSync(block.input.command, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    return [out || "(no output)", false];
  } catch (err) {
    return [`${err.stdout}${err.stderr}(exit ${err.status})`, true];
  }
}

async function main(task) {
  const client = new Anthropic();
  const messages = [{ role: "user", content: task }];
  for (;;) {
    const response = await client.messages.create({
      model: process.env.MODEL_ID || "claude-sonnet-5",
      max_tokens: 4000,
      tools: TOOLS,
      messages,
    });
    messages.push({ role: "assistant", content: response.content });
    if (response.stop_reason !== "tool_use") {
      console.log(response.content.filter((b) => b.type === "text").map((b) => b.text).join(""));
      return;
    }
    const results = response.content
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
