// The TypeScript SDK's client (@modelcontextprotocol/client 2.x, 2026-07-28) listening to tasks, each
// status it is pushed read with the official tasks extension's schema (@modelcontextprotocol/ext-tasks).
//
// node push_client.mjs <url> <report.json> <task ids JSON>
//
// It opens one subscriptions/listen stream for the task ids, never sends tasks/get, and reports every
// notifications/tasks frame (with whether TaskStatusNotificationV2Schema parses it) and how the
// subscription ended; <report>.subscribed appears once the server has acknowledged it.
import { writeFileSync } from "node:fs";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { TaskStatusNotificationV2Schema } from "@modelcontextprotocol/ext-tasks/core/v2";

const [url, report, taskIdsJson] = process.argv.slice(2);
const statuses = [];

const client = new Client(
  { name: "push-client-ts", version: "1.0.0" },
  {
    capabilities: { extensions: { "io.modelcontextprotocol/tasks": {} } },
    versionNegotiation: { mode: { pin: "2026-07-28" } },
  },
);
client.fallbackNotificationHandler = async (notification) => {
  if (notification.method === "notifications/tasks") {
    const parsed = TaskStatusNotificationV2Schema.safeParse({ jsonrpc: "2.0", ...notification });
    statuses.push({ params: notification.params, parses: parsed.success, error: parsed.error?.message });
  }
};
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
const subscription = await client.listen({ taskIds: JSON.parse(taskIdsJson) });
writeFileSync(report.replace(/\.json$/, ".subscribed"), "");
const closed = await subscription.closed;
writeFileSync(
  report,
  JSON.stringify({
    protocol: client.getNegotiatedProtocolVersion?.() ?? null,
    statuses,
    closed,
  }),
);
await client.close();
