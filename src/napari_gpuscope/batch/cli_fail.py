"""How a batch subcommand reports a usage or configuration error: one line on stderr and an
exit code."""

from __future__ import annotations

import sys

__all__ = ["fail"]


def fail(message: str, code: int = 2) -> int:
    """Print ``napari-gpuscope: MESSAGE`` on stderr; returns ``code`` (2: usage, configuration)."""
    print(f"napari-gpuscope: {message}", file=sys.stderr)
    return code
