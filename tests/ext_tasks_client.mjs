// The official tasks client (@modelcontextprotocol/ext-tasks 0.2.2 over @modelcontextprotocol/client 2.4.0)
// driving a server over streamable HTTP; it prints one JSON line per thing it observed.
//
// node ext_tasks_client.mjs <era> <scenario> <url> <argument>
//
//   era        2026-07-28: a session pinned to that revision, with the rawDispatch and v2RequestFraming
//              the ext-tasks README asks for (the SDK's own request path rejects the V2 task wire shapes);
//              2025-11-25: the legacy initialize exchange, tools/call with params.task, tasks/get,
//              tasks/result, tasks/cancel, and elicitation/create answered when it names its task.
//   scenario   call <tool>           call it as a task, print each task it sees and the outcome
//              answer <tool>         the same, answering each form elicitation with {value: "Ada"}
//              cancel <tool>         the same; a line "cancel" on stdin cancels the task, after which
//                                    the task is read by id until the server reports it terminal
//              create <tool>         call it as a task, hand off a resumable reference, print it, exit
//              resume <reference>    a new client resumes a handed-off reference (JSON) and settles it
//
// Lines: {"event":"connected",...} once, then "task" (a task view), "input" (a question it answered),
// "reference", "outcome" (how the execution settled), "read" (cancel: the task as the server ends it),
// "error" (an ext-tasks background error); the process exits 0 once the scenario is done.
import { createInterface } from "node:readline";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { createTaskSessionFromClient, DispatchError } from "@modelcontextprotocol/ext-tasks/client";

const [era, scenario, url, argument] = process.argv.slice(2);
const MODERN = "2026-07-28";
const ANSWER = "Ada";
const clientInfo = { name: "ext-tasks-client", version: "1.0.0" };

function print(event, fields) {
  process.stdout.write(`${JSON.stringify({ event, ...fields })}\n`);
}

// The host's raw request coordinator for V2 task traffic: its own transport, request ids and response
// matching; the SDK transport derives MCP-Protocol-Version, Mcp-Method and Mcp-Name from the body.
class RawDispatch {
  #transport;
  #pending = new Map();
  #next = 0;

  constructor(endpoint) {
    this.#transport = new StreamableHTTPClientTransport(new URL(endpoint));
    this.#transport.onmessage = (message) => {
      const waiting = this.#pending.get(message.id);
      if (waiting === undefined) return;
      this.#pending.delete(message.id);
      waiting.resolve(message);
    };
  }

  start() {
    return this.#transport.start();
  }

  close() {
    return this.#transport.close();
  }

  dispatch = async (request, options = {}) => {
    const id = `ext-tasks-raw-${++this.#next}`;
    const answered = new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      options.signal?.addEventListener("abort", () => reject(options.signal.reason), { once: true });
    });
    answered.catch(() => {}); // an abort during the send rejects it unawaited: the send's own error is thrown
    try {
      await this.#transport.send(
        { jsonrpc: "2.0", id, ...request },
        { headers: options.context?.headers, requestSignal: options.signal },
      );
    } catch (error) {
      this.#pending.delete(id);
      throw new DispatchError(`${request.method} failed`, false, { cause: error });
    }
    const response = await answered;
    return response.error === undefined
      ? { kind: "result", result: response.result }
      : { kind: "error", error: response.error };
  };
}

function taskFields(view) {
  const fields = { taskId: view.taskId, status: view.status };
  if (view.statusMessage !== undefined) fields.statusMessage = view.statusMessage;
  if (view.raw.inputRequests !== undefined) fields.inputRequests = view.raw.inputRequests;
  return fields;
}

function outcomeFields(outcome) {
  if (outcome.status === "completed") return { status: "completed", result: outcome.result };
  if (outcome.status === "failed") {
    return { status: "failed", message: outcome.error.message, code: outcome.error.code };
  }
  return { status: "cancelled" };
}

async function answer(request, context) {
  print("input", {
    kind: request.kind,
    params: request.params,
    scope: context.scope,
    delivery: context.delivery,
    taskId: context.taskId,
    inputId: context.inputId,
  });
  if (request.kind !== "elicitation") throw new Error(`cannot answer a ${request.kind} request`);
  return { action: "accept", content: { value: ANSWER } };
}

async function connect() {
  const modern = era === MODERN;
  // 2025-11-25: ext-tasks declares nothing at initialize; elicitation is the host's, so the server may ask.
  const clientCapabilities = modern
    ? { extensions: { "io.modelcontextprotocol/tasks": {} } }
    : { elicitation: { form: {} } };
  const client = new Client(clientInfo, {
    capabilities: clientCapabilities,
    ...(modern ? { versionNegotiation: { mode: { pin: MODERN } } } : {}),
  });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const raw = modern ? new RawDispatch(url) : undefined;
  await raw?.start();
  const session = createTaskSessionFromClient(client, {
    endpointId: url,
    onInputRequest: scenario === "answer" ? answer : undefined,
    onError: (error) => print("error", { message: error.message }),
    ...(modern
      ? {
          rawDispatch: raw.dispatch,
          v2RequestFraming: { protocolVersion: MODERN, clientInfo, clientCapabilities },
        }
      : {}),
  });
  print("connected", {
    era: client.getProtocolEra(),
    protocol: client.getNegotiatedProtocolVersion?.() ?? null,
    capabilities: session.capabilities,
  });
  return {
    session,
    async close() {
      await session.close();
      await raw?.close();
      await client.close();
    },
  };
}

async function callAsTask(session, tool) {
  const execution = await session.callTool(tool, {}, { task: { preference: "require" } });
  print("created", { kind: execution.kind, taskId: execution.handle?.taskId });
  return execution;
}

async function settle(execution) {
  const { outcome } = await execution.settle({
    onEvent: (event) => {
      if (event.type === "task") print("task", taskFields(event.task));
    },
  });
  print("outcome", outcomeFields(outcome));
}

function stdinLine() {
  const lines = createInterface({ input: process.stdin });
  return new Promise((resolve) => lines.once("line", (line) => {
    lines.close();
    resolve(line.trim());
  }));
}

const { session, close } = await connect();
if (scenario === "call" || scenario === "answer") {
  await settle(await callAsTask(session, argument));
} else if (scenario === "cancel") {
  const execution = await callAsTask(session, argument);
  const settled = settle(execution);
  if ((await stdinLine()) !== "cancel") throw new Error("expected a cancel line on stdin");
  await execution.cancel();
  await settled;
  const outcome = await session.task(execution.handle.taskId).result();
  const { taskId, status } = outcome.task ?? {};
  print("read", { ...outcomeFields(outcome), taskId, taskStatus: status });
} else if (scenario === "create") {
  const execution = await callAsTask(session, argument);
  await execution.handoff((reference) => print("reference", { reference }));
} else if (scenario === "resume") {
  await settle(await session.resumeTask(JSON.parse(argument)));
} else {
  throw new Error(`unknown scenario ${scenario}`);
}
await close();
