"""A caller of today's kind, run as its own process: a 2025-11-25 `fastmcp.Client`
that never imports `fastmcp_tasks`, so it is the plain client most users have, not the one the
tasks extension folds into.

`python tests/relay_client.py <url> <report.json> <tool> <arguments JSON> <answers JSON> [level]`
calls `tool` once over streamable HTTP, after `logging/setLevel` to `level` if given, and writes
what it saw to `report.json`: the negotiated protocol, every log message, progress report and
elicitation in the order they came, and the call's text or error. It answers an elicitation
whose message is a key of `answers` with that string (`"decline"` declines). A log message
`"<key> waits"` is acknowledged by creating `<key>.seen` in `$FAULT_LOG_DIR`, which
`fault_app`'s `chatty` tool waits for: so the tool ends only after its caller got the message.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from fastmcp import Client
from fastmcp.client.elicitation import ElicitResult
from fastmcp.client.transports import StreamableHttpTransport


async def main(url: str, report: Path, tool: str, arguments: dict[str, Any], answers: dict[str, str], level: str | None) -> None:
    seen: list[list[Any]] = []

    async def on_log(message: Any) -> None:
        text = message.data["msg"]
        seen.append(["log", message.level, text])
        if text.endswith(" waits"):
            (Path(os.environ["FAULT_LOG_DIR"]) / f"{text.removesuffix(' waits')}.seen").touch()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(["progress", progress, total, message])

    async def on_elicit(message: str, response_type: Any, params: Any, context: Any) -> ElicitResult[Any]:
        seen.append(["elicit", message])
        answer = answers[message]
        return ElicitResult(action="decline") if answer == "decline" else ElicitResult(action="accept", content={"value": answer})

    outcome: dict[str, Any] = {}
    async with Client(
        StreamableHttpTransport(url),
        mode="legacy",
        log_handler=on_log,
        progress_handler=on_progress,
        elicitation_handler=on_elicit,
    ) as client:
        outcome["protocol"] = client.initialize_result.protocol_version
        if level is not None:
            await client.set_logging_level(level)
        try:
            result = await client.call_tool(tool, arguments, raise_on_error=False)
            outcome["text"] = "".join(getattr(block, "text", "") for block in result.content)
            outcome["is_error"] = result.is_error
        except Exception as exc:  # a JSON-RPC error is what the caller sees
            outcome["error"] = str(exc)
    outcome["seen"] = seen
    outcome["imports_fastmcp_tasks"] = "fastmcp_tasks" in sys.modules
    report.write_text(json.dumps(outcome))


if __name__ == "__main__":
    url, report, tool, arguments, answers, *level = sys.argv[1:]
    asyncio.run(main(url, Path(report), tool, json.loads(arguments), json.loads(answers), level[0] if level else None))
