// The TypeScript SDK's client (@modelcontextprotocol/sdk 1.x) with its own 2025-11-25 tasks
// (client.experimental.tasks), as VS Code and other clients of that era call a long tool.
//
// node tasks_2025_11_25_client.mjs <url> <report.json> <scenario> <tool> <arguments JSON> <answers JSON>
//
// scenario "call": callToolStream (a task, since the tool lists execution.taskSupport), recording every
// message it yields; an elicitation whose message is a key of `answers` is answered with that string,
// and its `_meta` is recorded. Then the task is read again (tasks/get) and its result read again
// (tasks/result). Every notifications/tasks/status it gets is recorded. scenario "cancel": the task is cancelled (tasks/cancel) once created, read again,
// and cancelled a second time, whose error is recorded.
import { writeFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CallToolResultSchema,
  ElicitRequestSchema,
  TaskStatusNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const [url, report, scenario, tool, argumentsJson, answersJson] = process.argv.slice(2);
const answers = JSON.parse(answersJson);
const seen = [];

const client = new Client(
  { name: "tasks-2025-11-25-ts", version: "1.0.0" },
  { capabilities: { elicitation: {}, tasks: { list: {}, cancel: {}, requests: {} } }, defaultTaskPollInterval: 200 },
);
client.setRequestHandler(ElicitRequestSchema, (request) => {
  seen.push(["elicit", request.params.message, request.params._meta ?? null]);
  return { action: "accept", content: { value: answers[request.params.message] } };
});

client.setNotificationHandler(TaskStatusNotificationSchema, (notification) => {
  seen.push(["pushed", notification.params.status, notification.params._meta ?? null]);
});

const errorOf = (error) => ({ code: error.code ?? null, message: String(error.message ?? error) });

const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);
const outcome = { protocol: transport.protocolVersion, server_tasks: client.getServerCapabilities()?.tasks ?? null };
await client.listTools(); // the SDK learns which tools take a task from execution.taskSupport
let taskId = null;
try {
  const stream = client.experimental.tasks.callToolStream(
    { name: tool, arguments: JSON.parse(argumentsJson) },
    CallToolResultSchema,
    { timeout: 120_000 },
  );
  for await (const message of stream) {
    if (message.type === "taskCreated") {
      taskId = message.task.taskId;
      seen.push(["created", message.task]);
      if (scenario === "cancel") {
        outcome.cancelled = await client.experimental.tasks.cancelTask(taskId);
        outcome.read_after_cancel = await client.experimental.tasks.getTask(taskId);
        try {
          await client.experimental.tasks.cancelTask(taskId);
        } catch (error) {
          outcome.cancel_again = errorOf(error);
        }
        break;
      }
    } else if (message.type === "taskStatus") {
      seen.push(["status", message.task.status]);
    } else if (message.type === "result") {
      seen.push(["result", message.result]);
    } else {
      seen.push(["error", errorOf(message.error)]);
    }
  }
  if (scenario === "call" && taskId !== null) {
    outcome.read_after = await client.experimental.tasks.getTask(taskId);
    outcome.result_again = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
  }
} catch (error) {
  outcome.error = errorOf(error);
}
outcome.task_id = taskId;
outcome.seen = seen;
writeFileSync(report, JSON.stringify(outcome));
await client.close();
