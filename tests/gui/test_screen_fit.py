"""On a 1,366 x 768 screen the main window stays inside the screen in every state: no vLLM, the
no-network Hub error (banner + status line), every recorded failure kind, download, ready."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kvpilot.gui.screen_fit import ZWSP, elide_middle, wrap_anywhere

PROBE = Path(__file__).with_name("screen_fit_probe.py")


def test_every_state_fits_a_1366x768_screen(tmp_path: Path) -> None:
    config = tmp_path / "screen.json"
    config.write_text(json.dumps({"screens": [{
        "name": "laptop", "x": 0, "y": 0, "width": 1366, "height": 768,
        "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1,
    }]}))
    env = dict(
        os.environ,
        QT_QPA_PLATFORM=f"offscreen:configfile={config}",
        KVPILOT_DATA_DIR=str(tmp_path / "data"),
        KVPILOT_CACHE_DIR=str(tmp_path / "cache"),
        PATH="/usr/bin:/bin",
    )
    env.pop("KVPILOT_VLLM", None)
    proc = subprocess.run(
        [sys.executable, str(PROBE), str(tmp_path / "config")],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["screen"] == [1366, 768]
    states = doc["states"]
    kinds = [k for k in states if k.startswith("failure:")]
    assert {"no-vllm", "hub-error", "download", "ready"} <= set(states)
    assert len(kinds) >= 15
    for name, st in states.items():
        x, y, w, h = st["frame"]
        assert x >= 0 and y >= 0 and x + w <= 1366 and y + h <= 768, (name, st["frame"])
        mw, mh = st["min_hint"]
        assert mw <= 1366 and mh <= 768, (name, st["min_hint"])
        for button, (bx, by, bw, bh, visible) in st["buttons"].items():
            assert visible, (name, button)
            assert bx >= 0 and bx + bw <= 1366 and by >= 0 and by + bh <= 768, (name, button)


def test_wrap_and_elide_helpers() -> None:
    url = "https://huggingface.co/api/models/Qwen/Qwen2.5-7B?expand=siblings%2CgatedStatus"
    wrapped = wrap_anywhere(f"cannot reach {url} now")
    assert wrapped.replace(ZWSP, "") == f"cannot reach {url} now"
    assert max(len(p) for p in wrapped.replace(" ", ZWSP).split(ZWSP)) <= 40
    assert wrap_anywhere("short words stay as they are") == "short words stay as they are"
    assert wrap_anywhere("vllm.v1.errors.PlannerError: x") == "vllm.v1.errors.PlannerError: x"
    assert wrap_anywhere("x" * 100).count(ZWSP) == 2
    name = "/home/someone/models/organisation/Model-70B-AWQ"
    short = elide_middle(name, 20)
    assert len(short) == 20 and short.startswith("/home/som") and short.endswith("-70B-AWQ")
    assert elide_middle("abc", 20) == "abc"
