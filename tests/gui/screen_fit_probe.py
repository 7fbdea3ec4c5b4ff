"""Drive the main window through every state on the screen this process was given and print,
as JSON, the window's frame and minimum size and where Launch / Stop are, per state.

Run by test_screen_fit.py under ``QT_QPA_PLATFORM=offscreen:configfile=<1366x768 screen>``
(a fresh process: the screen is chosen when the QApplication starts).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from PySide6.QtCore import QPoint  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

import kvpilot.gui  # noqa: E402, F401
from kvpilot.core.app import settings as st  # noqa: E402
from kvpilot.core.base.lifecycle import SupervisorState  # noqa: E402
from kvpilot.gui import app as gui_app  # noqa: E402
from kvpilot.gui.bridge import CoreBridge  # noqa: E402
from kvpilot.gui.services import AppServices  # noqa: E402
from kvpilot.gui.workers import wait_for_pool  # noqa: E402

LOGS = TESTS / "data" / "vllm_logs"
HUB_ERROR = (
    "cannot download Qwen/Qwen2.5-7B-Instruct-AWQ from the Hugging Face Hub: "
    "HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: "
    "/api/models/Qwen/Qwen2.5-7B-Instruct-AWQ/revision/main?expand=siblings%2CsafetensorsIndex"
    "%2CgatedStatus (Caused by NameResolutionError(\"<urllib3.connection.HTTPSConnection object "
    "at 0x7f3c2b1d9e50>: Failed to resolve 'huggingface.co' ([Errno -3] Temporary failure in "
    "name resolution)\")); check the network connection, or set HF_HUB_OFFLINE=1 and use a "
    "model that is already in the cache"
)
LONG_MODEL = "/home/someone/models/" + "very-long-organisation-name/" * 4 + "Model-70B-AWQ"


def main() -> int:
    app = QApplication.instance() or QApplication(sys.argv)
    screen = app.primaryScreen().availableGeometry()
    store = st.SettingsStore(Path(sys.argv[1]))
    services = AppServices(CoreBridge(), fake_gpu="rtx4090-desktop")
    window = gui_app.build_window(store=store, services=services, confirm_stop=lambda: True)
    window.show()
    gui_app.wait_until(lambda: gui_app.loaded(window), 30)
    results: dict[str, dict[str, object]] = {}

    def settle() -> None:
        for _ in range(5):
            app.processEvents()

    def measure(name: str) -> None:
        settle()
        frame = window.frameGeometry()
        hint = window.minimumSizeHint()
        panel = window.server_panel
        spots = {}
        for b in ("launch_button", "stop_button"):
            w = getattr(panel, b)
            top_left = w.mapToGlobal(QPoint(0, 0))
            spots[b] = [top_left.x(), top_left.y(), w.width(), w.height(), w.isVisible()]
        results[name] = {
            "frame": [frame.x(), frame.y(), frame.width(), frame.height()],
            "min_hint": [hint.width(), hint.height()],
            "buttons": spots,
        }

    measure("no-vllm")
    window.server_control.show_launch_error(HUB_ERROR)
    window.statusBar().showMessage(HUB_ERROR, 60_000)
    measure("hub-error")
    for log in sorted([*LOGS.glob("cpu_0.32/fail_*.log"), *LOGS.glob("gpu_excerpts/*.log")]):
        if "startup" in log.name or "summary" in log.name:
            continue
        gui_app.show_recorded_failure(window, log)
        measure(f"failure:{log.parent.name}/{log.stem}")
    window.banner.setVisible(False)
    window.server_panel.show_state(SupervisorState.STARTING, model=LONG_MODEL)
    window.server_panel.show_download(3 << 30, 40 << 30)
    measure("download")
    window.server_panel.show_state(
        "ready", model=LONG_MODEL, endpoint="http://127.0.0.1:8000/v1"
    )
    window.server_panel.show_capacity(1_048_576, 1_050_000)
    window.statusBar().showMessage(f"ready: {LONG_MODEL} " * 3, 60_000)
    measure("ready")
    print(json.dumps({"screen": [screen.width(), screen.height()], "states": results}))
    window.close()
    services.shutdown()
    wait_for_pool(30_000)
    gui_app.dispose(window)
    return 0


if __name__ == "__main__":
    sys.exit(main())
