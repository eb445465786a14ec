"""The one error the dev-server launcher raises, whichever step fails.

Finding the binary, waiting for a start and sharing a state folder each raise it with
the fix in its message, so a caller catches one type.
"""

from __future__ import annotations


class DevServerError(RuntimeError):
    """The dev server could not be found or started; the message names the fix."""
