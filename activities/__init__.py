"""The Temporal activity that runs FastMCP tool bodies."""

from fastmcp_temporal.activities.tool_leg import ToolLegActivities

__all__ = ["ToolLegActivities"]
