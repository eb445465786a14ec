"""Screenshot the Temporal UI on a demo task, for the README and the docs.

    python examples/ui_screenshot.py [docs/demo-ui.png]

Starts a throwaway dev server (with its UI), the demo server and the demo client,
then points headless Chromium (Debian's `chromium` package) at the history of the
`greet` task's workflow: two tool legs around the `submit_input` signal. Everything it
started is stopped before it exits.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from temporalio.client import Client

from fastmcp_temporal.devserver._server import free_port, start_dev_server

EXAMPLES = Path(__file__).resolve().parent
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def main(output: Path) -> None:
    browser = next((path for name in BROWSERS if (path := shutil.which(name))), None)
    if browser is None:
        sys.exit("Install a headless browser first: apt-get install chromium")
    with tempfile.TemporaryDirectory() as state:
        temporal = start_dev_server(db_path=Path(state) / "temporal.db", ui=True)
        try:
            assert temporal.ui_url is not None
            task_id = run_demo(temporal.address, temporal.ui_url)
            url = asyncio.run(history_url(temporal.address, temporal.ui_url, f"mcp-task/anon/{task_id}"))
            output.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                [browser, "--headless", "--no-sandbox", "--hide-scrollbars", "--window-size=1400,1700",
                 "--virtual-time-budget=15000", f"--screenshot={output.resolve()}", url],
                check=True, capture_output=True, timeout=120,
            )  # fmt: skip
        finally:
            temporal.stop()
    print(f"wrote {output}")


def run_demo(address: str, ui_url: str) -> str:
    """Run the README's demo against `address`; the `greet` task's id."""
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
        client = subprocess.run(
            [sys.executable, str(EXAMPLES / "client.py"), f"http://127.0.0.1:{port}/mcp", "--ui", ui_url],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    finally:
        os.killpg(server.pid, signal.SIGINT)
        server.wait(timeout=30)
    print(client.stdout)
    lines = client.stdout.splitlines()
    (task_id,) = [line.removeprefix("greet: task ") for line in lines if line.startswith("greet: task ")]
    return task_id


def wait_for_port(port: int, deadline: float = 60) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"examples/server.py did not listen on {port}")


async def history_url(address: str, ui_url: str, workflow_id: str) -> str:
    description = await (await Client.connect(address)).get_workflow_handle(workflow_id).describe()
    return f"{ui_url}/namespaces/default/workflows/{quote(workflow_id, safe='')}/{description.run_id}/history"


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/demo-ui.png"))
