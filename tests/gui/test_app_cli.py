"""``kvpilot gui --screenshot``: a real process renders the window offscreen and exits."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtGui import QImage

from kvpilot.core.cli import build_parser


def _run(tmp_path: Path, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        **extra_env,
        "QT_QPA_PLATFORM": "offscreen",
        "KVPILOT_CONFIG_DIR": str(tmp_path / "config"),
        "KVPILOT_DATA_DIR": str(tmp_path / "data"),
        "KVPILOT_CACHE_DIR": str(tmp_path / "cache"),
    }
    return subprocess.run(
        [sys.executable, "-m", "kvpilot.core.cli", "gui", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )


@pytest.mark.parametrize(
    ("panel", "gpu"),
    [("planner", "rtx4090-desktop"), ("settings", "rtx4090-wsl2"), ("planner", "no-driver")],
)
def test_screenshot_of_a_panel(tmp_path: Path, panel: str, gpu: str) -> None:
    out = tmp_path / f"{panel}.png"
    proc = _run(tmp_path, "--fake-gpu", gpu, "--panel", panel, "--screenshot", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Fatal Python error" not in proc.stderr
    image = QImage(str(out))
    assert not image.isNull()
    assert image.width() >= 600 and image.height() >= 400
    # the settings file was written with the window geometry
    assert (tmp_path / "config" / "settings.json").exists() or panel == "settings"
    # the cyclic collector, held off while the window started, runs again after its first
    # paint, with the start-up's objects frozen (kvpilot.core.app.startup_gc)
    log_text = (tmp_path / "data" / "logs" / "kvpilot.log").read_text()
    shown = log_text.index("window shown")
    settled = re.search(r"start-up: cyclic collection held for ([\d.]+) s; (\d+) objects frozen",
                        log_text)
    assert settled is not None and settled.start() > shown, log_text[-2000:]
    assert int(settled.group(2)) > 20_000 and float(settled.group(1)) < 60


def test_the_first_paint_is_marked_with_its_wall_clock_and_cpu_time(tmp_path: Path) -> None:
    mark = tmp_path / "shown"
    started = time.time()
    proc = _run(tmp_path, "--fake-gpu", "rtx4090-desktop", "--screenshot",
                str(tmp_path / "s.png"), KVPILOT_SHOWN_MARK=str(mark))
    assert proc.returncode == 0, proc.stderr[-2000:]
    wall, cpu_s = (float(field) for field in mark.read_text().split())
    # shown after the start and before the process ended; by then it had used some CPU, and
    # less than its two cores could give it in that time
    assert started < wall < time.time()
    assert 0.05 < cpu_s < 2 * (wall - started) + 0.5


def test_the_ranked_plans_on_screen_are_marked_after_the_first_paint(tmp_path: Path) -> None:
    shown, ranked = tmp_path / "shown", tmp_path / "ranked"
    proc = _run(tmp_path, "--fake-gpu", "rtx4090-desktop", "--screenshot",
                str(tmp_path / "s.png"), KVPILOT_SHOWN_MARK=str(shown),
                KVPILOT_RANKED_MARK=str(ranked))
    assert proc.returncode == 0, proc.stderr[-2000:]
    shown_at = float(shown.read_text().split()[0])
    ranked_at, ranked_cpu_s = (float(field) for field in ranked.read_text().split())
    assert shown_at <= ranked_at < time.time() and ranked_cpu_s > 0
    log_text = (tmp_path / "data" / "logs" / "kvpilot.log").read_text()
    assert log_text.index("window shown") < log_text.index("ranked plans shown")


def test_gui_is_the_default_command() -> None:
    parser = build_parser("gui")
    args = parser.parse_args(["gui", "--fake-gpu", "rtx4090-desktop", "--panel", "dashboard"])
    assert args.fake_gpu == "rtx4090-desktop" and args.panel == "dashboard"
    assert args._run.__module__ == "kvpilot.core.commands.gui"


def test_unknown_recorded_gpu_is_a_one_line_error(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--fake-gpu", "no-such-card", "--screenshot", str(tmp_path / "x.png"))
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("kvpilot: error:")
    assert "Traceback" not in proc.stderr
