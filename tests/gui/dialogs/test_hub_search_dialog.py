"""The "Find on Hugging Face" dialog against the local Hub stand-in: the search runs on a worker
(the GUI keeps answering), badges and sizes show, and a picked hit is planned.

With ``KVPILOT_SCREENSHOTS=<dir>`` the dialog is saved as ``hub-search.png``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.fake_hub import FakeHub, isolate_hf
from fakes.hub_catalog import add_catalog
from PySide6.QtCore import QTimer

from kvpilot.gui.dialogs.hub_search_dialog import COLUMNS, HubSearchDialog


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with FakeHub(cdn=False) as fake:
        isolate_hf(monkeypatch, tmp_path, fake.endpoint)
        add_catalog(fake)
        yield fake


def test_search_runs_off_the_gui_thread_and_a_hit_is_planned(make_window, qtbot, hub):
    w = make_window()  # the RTX 4090 desktop snapshot
    hub.chunk_delay_s = 0.01  # a slow Hub: the event loop must keep running meanwhile
    dialog = w.hub_search_control.open()
    assert isinstance(dialog, HubSearchDialog)
    assert "RTX 4090" in dialog.context.text()
    ticks: list[int] = []
    timer = QTimer(dialog)
    timer.timeout.connect(lambda: ticks.append(1))
    timer.start(10)
    dialog.query.setText("Qwen3")
    with qtbot.waitSignal(dialog.results_shown, timeout=60_000):
        dialog.search_button.click()
        assert dialog.status.text().startswith("Searching the Hub")
    timer.stop()
    assert len(ticks) >= 3
    table = dialog.table
    assert table.rowCount() >= 6
    names = [table.item(r, 0).text() for r in range(table.rowCount())]
    assert "Qwen/Qwen3-8B" in names
    row = names.index("Qwen/Qwen3-8B")
    assert table.item(row, COLUMNS.index("Fit")).text() == "fits"
    assert "awq" in table.item(row, COLUMNS.index("Checkpoints")).text()
    assert "ctx" in table.item(row, COLUMNS.index("Best settings, or why not")).text()
    # a 32B model at 8k x 4 users is too much for 24 GB
    big = names.index("Qwen/Qwen3-32B")
    assert table.item(big, COLUMNS.index("Fit")).text() == "does not fit"
    assert "GiB" in table.item(big, COLUMNS.index("Best settings, or why not")).text()
    assert "from the Hub" in dialog.status.text()
    table.selectRow(row)
    assert "Qwen/Qwen3-8B" in dialog.detail.text()
    picked = dialog.selected_hit()
    assert picked is not None and picked.badge.checkpoint
    dialog.plan_button.click()
    assert w.planner.request().model_ref == picked.badge.checkpoint
    assert w.tabs.currentWidget() is w.planner


def test_a_second_search_comes_from_the_cache_and_errors_are_told(make_window, qtbot, hub):
    w = make_window()
    dialog = w.hub_search_control.open()
    dialog.query.setText("gemma")
    with qtbot.waitSignal(dialog.results_shown, timeout=60_000):
        dialog.start_search()
    requests = len(hub.settled())
    with qtbot.waitSignal(dialog.results_shown, timeout=60_000):
        dialog.start_search()
    assert len(hub.settled()) == requests
    assert "from the cache" in dialog.status.text()
    dialog.query.setText("")
    dialog.start_search()
    assert "Type part of a model name" in dialog.status.text()
    folder = os.environ.get("KVPILOT_SCREENSHOTS")
    if folder:
        dialog.query.setText("qwen3")
        with qtbot.waitSignal(dialog.results_shown, timeout=60_000):
            dialog.start_search()
        dialog.resize(1100, 600)
        Path(folder).mkdir(parents=True, exist_ok=True)
        dialog.grab().save(str(Path(folder) / "hub-search.png"), "PNG")


def test_catalog_refresh_runs_off_the_gui_thread_and_says_its_date(
    make_window, qtbot, hub, tmp_path, monkeypatch
):
    from kvpilot.core.app.search import refresh_catalog_here
    from kvpilot.core.models.catalog import forget_loaded_catalog

    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "refresh-data"))
    w = make_window()
    dialog = w.hub_search_control.open()
    assert isinstance(dialog, HubSearchDialog)
    ticks: list[int] = []
    timer = QTimer(dialog)
    timer.timeout.connect(lambda: ticks.append(1))
    timer.start(10)
    try:
        with qtbot.waitSignal(dialog.catalog_refreshed, timeout=60_000) as got:
            dialog.start_catalog_refresh(lambda: refresh_catalog_here(3))
            assert not dialog.catalog_button.isEnabled()
        timer.stop()
        assert got.args[0].startswith("catalog refreshed on ")
        assert dialog.status.text() == got.args[0] and dialog.catalog_button.isEnabled()
        assert ticks  # the window answered while the Hub was read
        assert (tmp_path / "refresh-data" / "catalog_user.json").is_file()
    finally:
        forget_loaded_catalog()
