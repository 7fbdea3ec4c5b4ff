"""kvpilot core: everything that is not Qt (fit engine, hardware, vLLM supervision, telemetry).

``__version__`` is read from the installed metadata on first use (importlib.metadata and the
email parser it needs are 20-40 ms that the app's start-up does not pay).
"""

from __future__ import annotations

__all__ = ["__version__"]


def _read_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("kvpilot")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "0.0.0+source"


def __getattr__(name: str) -> str:
    if name == "__version__":
        value = _read_version()
        globals()["__version__"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
