"""What one reliance on an upstream internal is, and the checks it can carry, for `_upstream_check.py`.

A `Reliance` names a FastMCP / fastmcp-tasks / Docket / mcp object by `module:attribute`, finds
it without running it, and applies a further check when presence is not enough: that its code
still says a message's fixed pieces (`says`) or reads a name (`reads`), that it still takes some
parameters (`parameters`), or a live probe of FastMCP's behaviour run isolated from the caller's
event loop, logs and spans (`run_isolated`). Nothing here names a private upstream symbol: the
check that does is `_upstream_check.py`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass
from importlib import import_module
from types import CodeType, FunctionType, ModuleType
from typing import Any


@dataclass(frozen=True)
class Reliance:
    """One thing of FastMCP's (or fastmcp-tasks', Docket's, mcp's) that no public API promises.

    Args:
        target: `module:attribute.path` of what is used.
        why: what this package uses it for.
        breaks: what goes wrong without it.
        holds: a further check of `target` once found: `None` when it holds, else what changed.
    """

    target: str
    why: str
    breaks: str
    holds: Callable[[Any], str | None] | None = None

    def problem(self) -> str | None:
        """What moved, or `None` when the installed packages still have it as used here."""
        module_name, _, path = self.target.partition(":")
        try:
            found: Any = import_module(module_name)
        except ImportError:
            return f"module {module_name} is gone"
        for attribute in path.split(".") if path else []:
            try:
                found = inspect.getattr_static(found, attribute)
            except AttributeError:
                return f"{self.target} is gone"
        return self.holds(found) if self.holds is not None else None


def _functions(owner: Any) -> Iterator[FunctionType]:
    """The functions of a function, property, class or module (only those defined in it)."""
    owner = getattr(owner, "__func__", owner)
    if isinstance(owner, property):
        owner = owner.fget
    if isinstance(owner, FunctionType):
        yield inspect.unwrap(owner)
    elif isinstance(owner, (type, ModuleType)):
        home = owner.__name__ if isinstance(owner, ModuleType) else owner.__module__
        for member in vars(owner).values():
            defined_here = getattr(getattr(member, "__func__", member), "__module__", None) == home
            if isinstance(member, (property, staticmethod, classmethod)) or (
                defined_here and isinstance(member, FunctionType)
            ):
                yield from _functions(member)
            elif defined_here and isinstance(member, type) and isinstance(owner, ModuleType):
                yield from _functions(member)


def _code_words(owner: Any) -> set[str]:
    """Every string constant and name in the code of `owner`, nested functions included."""
    pending: list[CodeType] = [function.__code__ for function in _functions(owner)]
    words: set[str] = set()
    while pending:
        code = pending.pop()
        words.update(code.co_names)
        for constant in code.co_consts:
            if isinstance(constant, str):
                words.add(constant)
            elif isinstance(constant, CodeType):
                pending.append(constant)
    return words


def says(*pieces: str) -> Callable[[Any], str | None]:
    """Holds when the code of the target still has every fixed piece of a message we match."""

    def check(owner: Any) -> str | None:
        missing = [piece for piece in pieces if piece not in _code_words(owner)]
        return f"its code no longer says {missing!r}" if missing else None

    return check


def reads(name: str) -> Callable[[Any], str | None]:
    """Holds when the code of the target still reads `name`."""

    def check(owner: Any) -> str | None:
        return None if name in _code_words(owner) else f"it no longer reads {name}"

    return check


def parameters(*names: str) -> Callable[[Any], str | None]:
    """Holds when the target function still takes every one of `names`."""

    def check(function: Any) -> str | None:
        present = set(inspect.signature(getattr(function, "__func__", function)).parameters)
        missing = [name for name in names if name not in present]
        return f"it no longer takes {missing}" if missing else None

    return check


def is_context_var(found: Any) -> str | None:
    return None if isinstance(found, ContextVar) else f"it is a {type(found).__name__}, not a ContextVar"


# Set in the thread where a check runs FastMCP (which needs an event loop of its own).
_checking: ContextVar[bool] = ContextVar("fastmcp_temporal_upstream_check", default=False)


def run_isolated(check: Callable[[], Coroutine[Any, Any, str | None]]) -> str | None:
    """Run `check` on an event loop of its own, whether or not the caller's thread runs one, with
    FastMCP's spans suppressed and what its server module logs during the check dropped."""
    from fastmcp import FastMCP

    def outside_the_check(record: logging.LogRecord) -> bool:
        return not _checking.get()

    server_log = logging.getLogger(FastMCP.__module__)
    server_log.addFilter(outside_the_check)
    try:
        with ThreadPoolExecutor(max_workers=1) as thread:
            return thread.submit(_run_unobserved, check).result()
    finally:
        server_log.removeFilter(outside_the_check)


def _run_unobserved(check: Callable[[], Coroutine[Any, Any, str | None]]) -> str | None:
    from fastmcp.telemetry import suppress_fastmcp_telemetry

    _checking.set(True)
    with suppress_fastmcp_telemetry():
        return asyncio.run(check())

