"""The level a log view shows for one line of vLLM's output.

vLLM's own lines carry their level in the prefix (``(APIServer pid=1) WARNING 11-29 08:43:33
[file.py:12] ...``, see :mod:`kvpilot.core.vllm.logparse`). Lines without one come from Python,
C extensions or tqdm: on stderr, a Python warning (``FutureWarning: ...``) reads as WARNING and so
does a line naming an error (a traceback's last line, ``RuntimeError: ...``); anything else is
INFO.
"""

from __future__ import annotations

import re

from kvpilot.core.vllm.logparse import parse_line

#: the levels a line can get, lowest first
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_PY_WARNING = re.compile(r"\b\w*Warning: ")


def line_level(line: str, stream: str = "stdout") -> str:
    """The level of one output line: its prefix's, else a guess from ``stream`` (``stdout`` or
    ``stderr``) and the text. Returns one of :data:`LEVELS`."""
    level = parse_line(line).level
    if level:
        return level
    if stream == "stderr" and ("Error" in line or _PY_WARNING.search(line)):
        return "WARNING"
    return "INFO"
