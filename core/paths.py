"""Where kvpilot keeps its files (platform directories, overridable for tests and portable use).

* data: logs of each launch, pidfiles of running servers, measurements, managed runtimes
  (``KVPILOT_DATA_DIR`` or the platform's user data directory)
* cache: learned flag tables, Hub metadata (``KVPILOT_CACHE_DIR`` or the user cache directory)
"""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_cache_dir, user_data_dir

APP_NAME = "kvpilot"


def data_dir() -> Path:
    """The data directory (not created)."""
    override = os.environ.get("KVPILOT_DATA_DIR")
    return Path(override).expanduser() if override else Path(user_data_dir(APP_NAME))


def cache_dir() -> Path:
    """The cache directory (not created)."""
    override = os.environ.get("KVPILOT_CACHE_DIR")
    return Path(override).expanduser() if override else Path(user_cache_dir(APP_NAME))


def measurements_path() -> Path:
    """The JSON file of capacities vLLM reported on this machine."""
    return data_dir() / "measurements.json"
