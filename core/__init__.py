"""kvpilot core: everything that is not Qt (fit engine, hardware, vLLM supervision, telemetry).

:func:`version` reads the installed version from the package metadata when first asked
(importlib.metadata and the email parser it needs are 20-40 ms that the app's start-up does
not pay).
"""

from __future__ import annotations

import functools

__all__ = ["version"]


@functools.cache
def version() -> str:
    """The installed kvpilot version ("0.0.0+source" in a source tree that is not installed)."""
    from importlib import metadata

    try:
        return metadata.version("kvpilot")
    except metadata.PackageNotFoundError:
        return "0.0.0+source"
