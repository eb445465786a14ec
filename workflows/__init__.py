"""The Temporal workflow that runs one MCP task, and the data it exchanges."""

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
