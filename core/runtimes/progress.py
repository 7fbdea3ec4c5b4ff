"""Progress of an install, read from the installer's own output (pip or uv), line by line.

pip (run with ``--progress-bar off``) prints ``Collecting NAME``, ``Downloading URL (754.3 MB)``,
``Processing /path/x.whl``, ``Installing collected packages: a, b`` and ``Successfully installed
a-1 b-2``. uv prints ``Resolved 57 packages in 1.2s``, ``Downloading torch (754.3MiB)``,
`` Downloaded torch``, ``Installed 57 packages in 2s`` and `` + name==version``. Sizes use
decimal units in pip (kB, MB, GB) and binary units in uv (KiB, MiB, GiB).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

PHASES: tuple[str, ...] = (
    "checking",
    "creating",
    "resolving",
    "downloading",
    "installing",
    "finishing",
    "verifying",
    "done",
)

_UNITS = {
    "b": 1,
    "bytes": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}
_SIZE = r"(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>bytes|[kMG]i?B|B)"
_PIP_COLLECT = re.compile(r"^Collecting (?P<name>\S+)")
_PIP_DOWNLOAD = re.compile(r"^\s*Downloading (?P<what>\S+) \(" + _SIZE + r"\)")
_PIP_CACHED = re.compile(r"^\s*Using cached (?P<what>\S+) \(" + _SIZE + r"\)")
_PIP_PROCESS = re.compile(r"^Processing (?P<what>\S+)")
_PIP_INSTALLING = re.compile(r"^Installing collected packages: (?P<names>.+)$")
_PIP_DONE = re.compile(r"^Successfully installed (?P<names>.+)$")
_UV_RESOLVED = re.compile(r"^Resolved (?P<n>\d+) packages?")
_ARCHIVES = (".whl", ".tar.gz", ".zip")
_UV_DOWNLOADED = re.compile(r"^\s*Downloaded (?P<what>\S+)\s*$")
_UV_PREPARED = re.compile(r"^Prepared (?P<n>\d+) packages?")
_UV_INSTALLED = re.compile(r"^Installed (?P<n>\d+) packages?")
_UV_PLUS = re.compile(r"^ \+ (?P<name>\S+)")
_UV_COMPILED = re.compile(r"^Bytecode compiled (?P<n>\d+) files?")
_ERROR = re.compile(r"^\s*(?:ERROR:|error:|×|\s*╰─▶|\s*cause:|\s*hint:)")


def parse_size(num: str, unit: str) -> int:
    """``("754.3", "MB")`` -> 754300000; ``("2.9", "MiB")`` -> 3040870 (bytes)."""
    return int(float(num) * _UNITS[unit.lower()])


@dataclass(frozen=True)
class InstallProgress:
    """Where an install is.

    Attributes:
        phase: one of :data:`PHASES`.
        packages_done: packages installed so far (or found while resolving, before that).
        packages_total: packages to install, once the installer said (None before).
        bytes_done: bytes downloaded so far (a download counts once it finished).
        bytes_total: bytes of all downloads announced so far.
        line: the last line that moved the progress (for a status line).
    """

    phase: str = "checking"
    packages_done: int = 0
    packages_total: int | None = None
    bytes_done: int = 0
    bytes_total: int = 0
    line: str = ""

    def describe(self) -> str:
        """``"downloading: 12/57 packages, 420.1 of 980.3 MB"`` (one line for a status bar)."""
        from kvpilot.core.base.units import size_text

        pk = (
            f"{self.packages_done}/{self.packages_total} packages"
            if self.packages_total
            else f"{self.packages_done} packages"
        )
        by = (
            f", {size_text(self.bytes_done)} of {size_text(self.bytes_total)} downloaded"
            if self.bytes_total
            else ""
        )
        return f"{self.phase}: {pk}{by}"


class OutputParser:
    """Turns installer output lines into :class:`InstallProgress` (not thread-safe)."""

    def __init__(self) -> None:
        self.progress = InstallProgress()
        self.errors: list[str] = []
        self._pending: dict[str, int] = {}
        self._pip_download: int | None = None
        self._seen = 0

    def set_phase(self, phase: str) -> InstallProgress:
        """Move to ``phase`` (a pending pip download counts as done)."""
        self._finish_pip_download()
        self.progress = replace(self.progress, phase=phase)
        return self.progress

    def _finish_pip_download(self) -> None:
        if self._pip_download is not None:
            self.progress = replace(
                self.progress, bytes_done=self.progress.bytes_done + self._pip_download
            )
            self._pip_download = None

    def feed(self, raw: str) -> bool:
        """Read one line; True when the progress changed."""
        line = raw.rstrip("\r\n")
        stripped = line.strip()
        if not stripped:
            return False
        if _ERROR.match(line):
            self.errors.append(stripped)
        p = self.progress
        if _PIP_COLLECT.match(line):
            self._finish_pip_download()
            self._seen += 1
            self.progress = replace(
                self.progress, phase="resolving", packages_done=self._seen, line=stripped
            )
            return True
        m = _PIP_DOWNLOAD.match(line)
        if m and ("://" in m.group("what") or m.group("what").endswith(_ARCHIVES)):
            self._finish_pip_download()
            size = parse_size(m.group("num"), m.group("unit"))
            self._pip_download = size
            self.progress = replace(
                self.progress,
                phase="downloading",
                bytes_total=self.progress.bytes_total + size,
                line=stripped,
            )
            return True
        if m:  # uv names the package, not the file
            size = parse_size(m.group("num"), m.group("unit"))
            self._pending[m.group("what")] = size
            self.progress = replace(
                p, phase="downloading", bytes_total=p.bytes_total + size, line=stripped
            )
            return True
        if m := _UV_DOWNLOADED.match(line):
            size = self._pending.pop(m.group("what"), 0)
            self.progress = replace(p, bytes_done=p.bytes_done + size, line=stripped)
            return True
        if _PIP_CACHED.match(line) or _PIP_PROCESS.match(line):
            self._finish_pip_download()
            self.progress = replace(self.progress, line=stripped)
            return True
        if m := _PIP_INSTALLING.match(line):
            self._finish_pip_download()
            names = [n for n in m.group("names").split(",") if n.strip()]
            self.progress = replace(
                self.progress,
                phase="installing",
                packages_total=len(names),
                packages_done=0,
                line=stripped,
            )
            return True
        if m := _PIP_DONE.match(line):
            n = len(m.group("names").split())
            self.progress = replace(
                p, packages_done=n, packages_total=p.packages_total or n, line=stripped
            )
            return True
        if m := _UV_RESOLVED.match(line):
            self.progress = replace(
                p, phase="resolving", packages_total=int(m.group("n")), line=stripped
            )
            return True
        if _UV_PREPARED.match(line):
            self.progress = replace(p, phase="installing", line=stripped)
            return True
        if m := _UV_INSTALLED.match(line):
            n = int(m.group("n"))
            self.progress = replace(
                p, phase="installing", packages_done=n, packages_total=p.packages_total or n,
                line=stripped,
            )
            return True
        if _UV_COMPILED.match(line):  # after "Installed N packages" (--compile-bytecode)
            self.progress = replace(p, line=stripped)
            return True
        if _UV_PLUS.match(line) and p.phase == "installing":
            return False  # the per-package list after "Installed N packages"
        return False
