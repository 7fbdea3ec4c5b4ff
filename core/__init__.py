"""kvpilot core: everything that is not Qt (fit engine, hardware, vLLM supervision, telemetry)."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("kvpilot")
except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
