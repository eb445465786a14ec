"""Screenshot the Temporal UI on demo tasks, for the README and the docs.

    python examples/ui_screenshot.py [docs]

Starts a throwaway dev server (with its UI), the demo server and the demo client,
then points headless Chromium (Debian's `chromium` package) at two pages and writes them
to the folder given (default `docs/`):

- `demo-ui.png`: the history of the `greet` task's workflow, two tool legs around the
  `submit_input` signal;
- `ui-task-page.png`: the User Metadata tab of a `greet` task left parked on its question
  (summary, details, and the current details the demo server's worker answers).

Everything it started is stopped before it exits.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import fastmcp_tasks  # noqa: F401  (registers the tasks extension on every fastmcp.Client)
from fastmcp import Client as McpClient
from fastmcp_tasks import call_tool_task
from temporalio.client import Client

from fastmcp_temporal.devserver import free_port, start_dev_server

EXAMPLES = Path(__file__).resolve().parent
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def main(folder: Path) -> None:
    browser = next((path for name in BROWSERS if (path := shutil.which(name))), None)
    if browser is None:
        sys.exit("Install a headless browser first: apt-get install chromium")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as state:
        temporal = start_dev_server(db_path=Path(state) / "temporal.db", ui=True)
        try:
            assert temporal.ui_url is not None
            with demo_server(temporal.address) as port:
                answered = run_demo_client(port, temporal.ui_url)
                url = asyncio.run(workflow_url(temporal.address, temporal.ui_url, answered))
                screenshot(browser, f"{url}/history", folder / "demo-ui.png", "1400,1700")
                parked = asyncio.run(park_greet_task(port))
                url = asyncio.run(workflow_url(temporal.address, temporal.ui_url, parked))
                screenshot(browser, f"{url}/user-metadata", folder / "ui-task-page.png", "1440,1000")
        finally:
            temporal.stop()


@contextmanager
def demo_server(address: str) -> Iterator[int]:
    """examples/server.py on a free port, on the Temporal at `address`; its port."""
    port = free_port()
    env = {**os.environ, "PORT": str(port), "FASTMCP_TEMPORAL_ADDRESS": address}
    server = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "server.py")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for_port(port)
        yield port
    finally:
        os.killpg(server.pid, signal.SIGINT)
        server.wait(timeout=30)


def run_demo_client(port: int, ui_url: str) -> str:
    """Run the README's demo client; the `greet` task's id."""
    client = subprocess.run(
        [sys.executable, str(EXAMPLES / "client.py"), f"http://127.0.0.1:{port}/mcp", "--ui", ui_url],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    print(client.stdout)
    lines = client.stdout.splitlines()
    (task_id,) = [line.removeprefix("greet: task ") for line in lines if line.startswith("greet: task ")]
    return task_id


async def park_greet_task(port: int) -> str:
    """Start a `greet` task and leave it waiting for its answer; its id."""
    async with McpClient(f"http://127.0.0.1:{port}/mcp") as client:
        task = await call_tool_task(client, "greet", {})
        deadline = time.monotonic() + 60
        while (await task.status()).status != "input_required":
            if time.monotonic() > deadline:
                raise TimeoutError("the greet task did not ask for input within 60 s")
            await asyncio.sleep(0.2)
        return task.task_id


def screenshot(browser: str, url: str, output: Path, window_size: str, settle: float = 10.0) -> None:
    """Load `url` in headless Chromium, let the UI render for `settle` seconds, and save the page.

    Driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: commands on the
    child's fd 3, replies on fd 4): `--screenshot` waits for the page's virtual time to run
    out, which never happens on a running workflow's page, where the UI long-polls its history.
    """
    commands_read, commands_write = os.pipe()
    replies_read, replies_write = os.pipe()

    def wire_pipe() -> None:  # via fresh copies: os.pipe() may itself have returned fd 3 or 4
        commands, replies = os.dup(commands_read), os.dup(replies_write)
        os.dup2(commands, 3)
        os.dup2(replies, 4)

    chromium = subprocess.Popen(
        [browser, "--headless", "--no-sandbox", "--hide-scrollbars", "--remote-debugging-pipe",
         f"--window-size={window_size}", "about:blank"],
        preexec_fn=wire_pipe, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(commands_read)
    os.close(replies_write)
    devtools = _DevTools(commands_write, replies_read)
    try:
        (page,) = [t for t in devtools.call("Target.getTargets")["targetInfos"] if t["type"] == "page"]
        session = devtools.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        width, height = (int(size) for size in window_size.split(","))
        devtools.call("Emulation.setDeviceMetricsOverride", session, width=width, height=height,
                      deviceScaleFactor=1, mobile=False)  # fmt: skip
        devtools.call("Page.navigate", session, url=url)
        time.sleep(settle)
        picture = devtools.call("Page.captureScreenshot", session, format="png")["data"]
        output.write_bytes(base64.b64decode(picture))
        devtools.call("Browser.close")
    finally:
        os.close(commands_write)
        os.close(replies_read)
        chromium.wait(timeout=30)
    print(f"wrote {output}")


class _DevTools:
    """Chromium's DevTools protocol over a pipe: NUL-terminated JSON messages each way."""

    def __init__(self, commands: int, replies: int) -> None:
        self._commands, self._replies = commands, replies
        self._buffer = b""
        self._next_id = 0

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its reply (events in between are skipped)."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            chunk = os.read(self._replies, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)


def wait_for_port(port: int, deadline: float = 60) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"examples/server.py did not listen on {port}")


async def workflow_url(address: str, ui_url: str, task_id: str) -> str:
    """The UI page of an anonymous caller's task (append a tab: `/history`, `/user-metadata`)."""
    workflow_id = f"mcp-task/anon/{task_id}"
    description = await (await Client.connect(address)).get_workflow_handle(workflow_id).describe()
    return f"{ui_url}/namespaces/default/workflows/{quote(workflow_id, safe='')}/{description.run_id}"


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs"))
