"""The Temporal workflow that runs one MCP task, and the data it exchanges."""

from temporalio import workflow

# The sandbox re-runs this package for every workflow; the data module is pure
# and passed through so its dataclasses are built once per process.
with workflow.unsafe.imports_passed_through():
    from fastmcp_temporal.workflows.models import (
        InputAnswers,
        LegInput,
        LegOutcome,
        LegPolicy,
        TaskInput,
        TaskOutcome,
        ToolCall,
    )
from fastmcp_temporal.workflows.task import McpTaskWorkflow

__all__ = [
    "InputAnswers",
    "LegInput",
    "LegOutcome",
    "LegPolicy",
    "McpTaskWorkflow",
    "TaskInput",
    "TaskOutcome",
    "ToolCall",
]
