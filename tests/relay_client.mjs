// The TypeScript SDK's client (@modelcontextprotocol/sdk 1.x, 2025-11-25) as a caller of
// a durable synchronous call: the same command line and report as relay_client.py.
//
// node relay_client.mjs <url> <report.json> <tool> <arguments JSON> <answers JSON> [level]
//
// It declares elicitation, answers an elicitation whose message is a key of `answers` with that string
// ("decline" declines), records every log message, progress report and elicitation in order, and
// acknowledges a log message "<key> waits" by creating <key>.seen in $FAULT_LOG_DIR.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema, LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, report, tool, argumentsJson, answersJson, level] = process.argv.slice(2);
const answers = JSON.parse(answersJson);
const seen = [];

const client = new Client({ name: "relay-client-ts", version: "1.0.0" }, { capabilities: { elicitation: {} } });
client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => {
  const text = notification.params.data.msg;
  seen.push(["log", notification.params.level, text]);
  if (text.endsWith(" waits")) {
    writeFileSync(join(process.env.FAULT_LOG_DIR, `${text.slice(0, -" waits".length)}.seen`), "");
  }
});
client.setRequestHandler(ElicitRequestSchema, (request) => {
  const message = request.params.message;
  seen.push(["elicit", message]);
  const answer = answers[message];
  return answer === "decline" ? { action: "decline" } : { action: "accept", content: { value: answer } };
});

const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);
const outcome = { protocol: transport.protocolVersion };
if (level) {
  await client.setLoggingLevel(level);
}
try {
  const result = await client.callTool({ name: tool, arguments: JSON.parse(argumentsJson) }, undefined, {
    onprogress: (progress) => seen.push(["progress", progress.progress, progress.total, progress.message]),
    timeout: 60_000,
  });
  outcome.text = result.content.map((block) => block.text ?? "").join("");
  outcome.is_error = result.isError ?? false;
} catch (error) {
  outcome.error = String(error);
}
outcome.seen = seen;
outcome.imports_fastmcp_tasks = false;
writeFileSync(report, JSON.stringify(outcome));
await client.close();
