"""Drive the demo server's tasks with an unmodified fastmcp.Client.

    python examples/client.py [http://127.0.0.1:8000/mcp]
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from fastmcp import Client


async def answer(message: str, response_type: Any, params: Any, context: Any) -> dict[str, str]:
    print(f"server asks: {message} -> answering 'Ada'")
    return {"name": "Ada"}


async def main(url: str) -> None:
    async with Client(url, elicitation_handler=answer) as client:
        squared = await client.call_tool("crunch", {"n": 12})
        print(f"crunch(12) = {squared.data}")
        greeting = await client.call_tool("greet", {})
        print(greeting.data)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000/mcp"))
