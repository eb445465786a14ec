// The TypeScript SDK's `callTool` (@modelcontextprotocol/sdk 1.x) as a host without tasks uses it: one
// request timeout, no retry when it passes, and a model that follows what a result says.
//
// node call_again_client.mjs <url> <report.json> <tool> <arguments JSON> <timeout ms> [reset]
//
// It calls `tool` and, while the answer is an isError result telling it to call the tool again, calls
// again with the same arguments. A timeout ends the run (recorded as `error`). With `reset` it passes
// `resetTimeoutOnProgress`, as a client that keeps waiting while progress comes. The report holds every
// answer's text, the last result's structuredContent and each progress notification.
import { writeFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, report, tool, argumentsJson, timeoutMs, reset] = process.argv.slice(2);
const client = new Client({ name: "call-again-client-ts", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
const outcome = { texts: [], progress: [] };
const options = {
  timeout: Number(timeoutMs),
  resetTimeoutOnProgress: reset === "reset",
  onprogress: (progress) => outcome.progress.push([progress.progress, progress.message ?? null]),
};
try {
  for (;;) {
    const result = await client.callTool({ name: tool, arguments: JSON.parse(argumentsJson) }, undefined, options);
    const text = result.content.map((block) => block.text ?? "").join("");
    outcome.texts.push(text);
    if (!(result.isError && text.includes(`call ${tool} again`))) {
      outcome.structured = result.structuredContent ?? null;
      outcome.is_error = result.isError ?? false;
      break;
    }
  }
} catch (error) {
  outcome.error = String(error);
}
writeFileSync(report, JSON.stringify(outcome));
await client.close();
