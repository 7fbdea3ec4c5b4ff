"""The real window on a real X server, driven as a user drives it: Xvfb, the ``xcb`` platform,
``xdotool`` keystrokes and clicks (tests/gui/test_main_window_real_window.py).

:class:`Xvfb` starts a private X server (1366 x 768, its display number chosen by Xvfb);
:class:`RealApp` starts ``kvpilot gui`` on it as a subprocess with Qt warnings fatal, finds its
windows by name (polling ``xdotool search``; never a fixed long sleep), types into them and
samples the process's threads (``/proc/PID/task``) and resident memory (psutil).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import psutil

SCREEN = "1366x768x24"


def missing_programs() -> list[str]:
    """The programs a real-window test needs that this machine lacks."""
    return [p for p in ("Xvfb", "xdotool") if shutil.which(p) is None]


def wait_for(predicate: Callable[[], object], timeout_s: float, what: str,
             poll_s: float = 0.05) -> object:
    """Poll ``predicate`` until it returns something true; AssertionError naming ``what`` on
    timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(poll_s)


class Xvfb:
    """A private X server; ``display`` is ``:N``."""

    def __init__(self) -> None:
        read, write = os.pipe()
        self.proc = subprocess.Popen(
            ["Xvfb", "-displayfd", str(write), "-screen", "0", SCREEN, "-nolisten", "tcp"],
            pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        os.close(write)
        with os.fdopen(read) as f:
            number = f.readline().strip()
        if not number:
            self.proc.kill()
            raise RuntimeError("Xvfb did not start")
        self.display = f":{number}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class RealApp:
    """``kvpilot gui`` on ``display`` (xcb), stderr kept in ``stderr_path``."""

    def __init__(self, display: str, argv: list[str], env: Mapping[str, str],
                 stderr_path: Path, crash_file: Path | None = None) -> None:
        self.display = display
        self.stderr_path = stderr_path
        self.crash_file = crash_file  # where its faulthandler writes (beside kvpilot.log)
        self.hung_report = ""
        self._stderr = stderr_path.open("w")
        self.env = {**env, "DISPLAY": display, "QT_QPA_PLATFORM": "xcb",
                    "QT_FATAL_WARNINGS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kvpilot.core.cli", "gui", *argv],
            env=self.env, stdout=subprocess.DEVNULL, stderr=self._stderr,
        )
        self.ps = psutil.Process(self.proc.pid)

    # ------------------------------------------------------------- X

    def xdotool(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(["xdotool", *args], env={**os.environ, "DISPLAY": self.display},
                              capture_output=True, text=True, timeout=30)
        if check and done.returncode != 0:
            raise AssertionError(f"xdotool {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout.strip()

    def windows(self, name_regex: str) -> list[str]:
        """Visible windows of this app whose name matches ``name_regex``."""
        out = self.xdotool("search", "--all", "--onlyvisible", "--pid", str(self.proc.pid),
                           "--name", name_regex, check=False)
        return out.split()

    def wait_window(self, name_regex: str, timeout_s: float = 20) -> str:
        self.assert_alive()
        found = wait_for(lambda: self.alive_and(self.windows(name_regex)), timeout_s,
                         f"a window named {name_regex!r}")
        assert isinstance(found, list)
        return str(found[0])

    def wait_gone(self, name_regex: str, timeout_s: float = 20) -> None:
        wait_for(lambda: self.alive_and(not self.windows(name_regex)), timeout_s,
                 f"the window {name_regex!r} to close")

    def press_until_gone(self, window: str, name_regex: str, key: str, tries: int = 5,
                         timeout_s: float = 4) -> None:
        """Press ``key`` in ``window`` until no window named ``name_regex`` is left (a key sent
        while the window is still being mapped is lost; the next try reaches it). A press that
        took effect after its wait (a busy machine) has closed the window: X then refuses the
        next focus, and the window counts as gone."""
        for attempt in range(tries):
            try:
                self.keys(window, key)
            except AssertionError:
                if self.alive_and(self.windows(name_regex)):
                    raise
                return
            try:
                self.wait_gone(name_regex, timeout_s)
                return
            except AssertionError:
                if attempt == tries - 1:
                    raise

    def alive_and(self, value: object) -> object:
        self.assert_alive()
        return value

    def keys(self, window: str, *keys: str) -> None:
        """Focus ``window`` and press ``keys`` (xdotool key names, e.g. ``ctrl+comma``)."""
        self.xdotool("windowfocus", "--sync", window)
        self.xdotool("key", "--delay", "30", *keys)

    def type_text(self, window: str, text: str) -> None:
        self.xdotool("windowfocus", "--sync", window)
        self.xdotool("type", "--delay", "20", text)

    # ------------------------------------------------------------- process

    def assert_alive(self) -> None:
        code = self.proc.poll()
        if code is not None:
            raise AssertionError(f"the app ended (exit {code}):\n{self.stderr()[-4000:]}")

    def stderr(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def threads(self) -> int:
        return sum(1 for _ in Path(f"/proc/{self.proc.pid}/task").iterdir())

    def rss_bytes(self) -> int:
        return int(self.ps.memory_info().rss)

    def quit(self, timeout_s: float = 60) -> int:
        """SIGTERM (the app quits through Qt and stops its server); returns the exit status.
        An app that has not ended after ``timeout_s`` gets SIGABRT (its faulthandler writes every
        thread's stack to its crash file, :attr:`hung_report`), then SIGKILL."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGABRT)
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
                if self.crash_file is not None and self.crash_file.exists():
                    self.hung_report = self.crash_file.read_text(errors="replace")
        self._stderr.close()
        return int(self.proc.returncode)
