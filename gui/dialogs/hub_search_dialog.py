"""The "Find on Hugging Face" dialog: a Hub search, each hit sized and badged for this GPU.

The dialog only shows what :func:`kvpilot.core.app.search.search_hub` returns (the one search
function ``kvpilot search`` calls too). The search runs on a worker thread
(:func:`kvpilot.gui.workers.run_in_thread`); an answer to an older search is dropped. Picking a
hit and "Plan it" (or a double click) emits :attr:`HubSearchDialog.plan_requested` with the
checkpoint the badge names, so the planner plans it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from kvpilot.core.base.words import estimated_rate
from kvpilot.gui import theme
from kvpilot.gui.widgets.small import push_button, wrapped_label
from kvpilot.gui.widgets.tables import SELECT_ONE, read_only_table
from kvpilot.gui.workers import run_in_thread

if TYPE_CHECKING:
    from kvpilot.core.app.search import SearchHit, SearchResult

#: a search: (query, sort "downloads"|"trending", refresh) -> result; blocking, run off the GUI
SearchFn = Callable[[str, str, bool], "SearchResult"]

_BADGE_COLOURS = {"fits": theme.OK, "borderline": theme.TIGHT, "does_not_fit": theme.FAIL,
                  "cannot_plan": theme.MUTED}
COLUMNS = ("Model", "Fit", "Best settings, or why not", "Checkpoints", "Downloads")
#: the longest "why not" shown in the table (the whole reason is below it and in the tooltip)
WHY_NOT_CHARS = 60


def settings_text(hit: SearchHit) -> str:
    """``awq · 8,192 ctx × 4 · fp8 KV`` for a hit that fits; why not (shortened) otherwise."""
    b = hit.badge
    if b.verdict != "fits" or b.settings is None or b.checkpoint is None:
        who, _, why = b.reason.rpartition(": ") if ": " in b.reason else ("", "", b.reason)
        who, _, why = b.reason.partition(": ") if who else ("", "", b.reason)
        if "; needs " in why:  # the shortfall says the most in a few words
            scheme = next((c.scheme for c in hit.checkpoints if c.repo == who), "")
            why = (f"{scheme}: " if scheme else "") + why.rsplit("; ", 1)[-1]
        return why if len(why) <= WHY_NOT_CHARS else why[: WHY_NOT_CHARS - 1] + "…"
    scheme = next((c.scheme for c in hit.checkpoints if c.repo == b.checkpoint), "")
    parts = [scheme]
    if b.settings.max_model_len:
        parts.append(f"{b.settings.max_model_len:,} ctx × {b.settings.max_num_seqs or 1}")
    parts.append("fp8 KV" if b.settings.kv_cache_dtype == "fp8" else "16-bit KV")
    if b.decode_tokens_per_s:
        parts.append(estimated_rate(b.decode_tokens_per_s))
    return " · ".join(p for p in parts if p)


def checkpoints_text(hit: SearchHit) -> str:
    """``16-bit 15.3 GiB, awq 5.7 GiB, nvfp4 (refused)``."""
    from kvpilot.core.app.search import size_label

    return ", ".join(
        f"{c.scheme} {'refused' if c.refused else size_label(c.weights_bytes)}"
        for c in hit.checkpoints
    )


class HubSearchDialog(QDialog):
    """Search box, sort order, the hits with their badges, and "Plan it".

    Args:
        search: runs one search (blocking; the dialog calls it on a worker thread).
        context_text: the GPU and goal the badges are for, shown above the results.
    """

    #: the checkpoint repo to plan
    plan_requested = Signal(str)
    #: emitted when a search finished and the table shows it (tests wait for it)
    results_shown = Signal()
    #: emitted with the one-line outcome when a catalog refresh finished (tests wait for it)
    catalog_refreshed = Signal(str)

    def __init__(self, search: SearchFn, context_text: str,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("hubSearchDialog")
        self.setWindowTitle("Find on Hugging Face")
        self._search = search
        self._generation = 0
        self._hits: tuple[SearchHit, ...] = ()
        self.query = QLineEdit()
        self.query.setObjectName("hubQuery")
        self.query.setPlaceholderText("a model name, e.g. qwen3, gemma, mistral small")
        self.query.returnPressed.connect(lambda: self.start_search())
        self.sort = QComboBox()
        self.sort.addItem("most downloaded", "downloads")
        self.sort.addItem("trending", "trending")
        self.search_button = push_button("Search", name="hubSearchButton",
                                         on_click=lambda: self.start_search())
        self.refresh_button = push_button(
            "Refresh", tooltip="Ask the Hub again instead of using cached results",
            on_click=lambda: self.start_search(refresh=True),
        )
        self.catalog_button = push_button(
            "Refresh catalog", name="catalogRefreshButton",
            tooltip="Rebuild your model catalog from the Hub's most downloaded and trending "
            "models (their quantized uploads, sizes and release dates); the window stays usable",
            on_click=lambda: self.start_catalog_refresh(),
        )
        self.context = wrapped_label(context_text)
        self.status = QLabel("Type a name and press Enter. Nothing is downloaded: sizes come "
                             "from the Hub's metadata.")
        self.status.setObjectName("hubStatus")
        self.status.setWordWrap(True)
        self.table = read_only_table("hubResults", COLUMNS, select=SELECT_ONE, stretch=0)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.table.cellDoubleClicked.connect(lambda *_: self._plan_selected())
        self.detail = QLabel()
        self.detail.setObjectName("hubDetail")
        self.detail.setWordWrap(True)
        self.detail.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.plan_button = push_button("Plan it", name="hubPlanButton",
                                       on_click=self._plan_selected, enabled=False)
        close = push_button("Close", on_click=self.reject)

        row = QHBoxLayout()
        row.addWidget(self.query, 1)
        row.addWidget(self.sort)
        row.addWidget(self.search_button)
        row.addWidget(self.refresh_button)
        row.addWidget(self.catalog_button)
        bottom = QHBoxLayout()
        bottom.addWidget(self.detail, 1)
        bottom.addWidget(self.plan_button, 0, Qt.AlignmentFlag.AlignTop)
        bottom.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        lay = QVBoxLayout(self)
        lay.addLayout(row)
        lay.addWidget(self.context)
        lay.addWidget(self.status)
        lay.addWidget(self.table, 1)
        lay.addLayout(bottom)
        self.resize(1100, 600)

    # ------------------------------------------------------------------ searching
    def start_search(self, *, refresh: bool = False) -> None:
        """Search for the typed text on a worker thread (an empty box searches nothing)."""
        text = self.query.text().strip()
        if not text:
            self.status.setText("Type part of a model name first.")
            return
        self._generation += 1
        gen = self._generation
        sort = str(self.sort.currentData())
        self.status.setText(f"Searching the Hub for {text!r}…")
        self.search_button.setEnabled(False)
        run_in_thread(
            lambda: self._search(text, sort, refresh),
            lambda res: self._on_result(gen, res),
            lambda exc: self._on_error(gen, exc),
            name="kvpilot-hub-search",
        )

    def start_catalog_refresh(self, refresh: Callable[[], object] | None = None) -> None:
        """Rebuild the user's catalog on a worker thread (``refresh`` replaces the Hub one in
        tests); the status line says the outcome, or which catalog stays in use offline."""
        from kvpilot.core.app.search import refresh_catalog_here

        def work() -> object:
            return refresh() if refresh is not None else refresh_catalog_here()

        def done(result: object) -> None:
            self.catalog_button.setEnabled(True)
            text = str(getattr(result, "message", result))  # a RefreshResult's one line
            self.status.setText(text)
            self.catalog_refreshed.emit(text)

        def failed(exc: BaseException) -> None:
            self.catalog_button.setEnabled(True)
            text = f"The catalog refresh failed: {type(exc).__name__}: {exc}"
            self.status.setText(text)
            self.catalog_refreshed.emit(text)

        self.catalog_button.setEnabled(False)
        self.status.setText("Refreshing the catalog from the Hub…")
        run_in_thread(work, done, failed, name="kvpilot-catalog-refresh")

    def _on_result(self, gen: int, result: SearchResult) -> None:
        if gen != self._generation:
            return
        self.search_button.setEnabled(True)
        self.show_result(result)

    def _on_error(self, gen: int, exc: BaseException) -> None:
        if gen != self._generation:
            return
        self.search_button.setEnabled(True)
        from kvpilot.core.base.errors import KvpilotError

        text = exc.message if isinstance(exc, KvpilotError) else f"{type(exc).__name__}: {exc}"
        self.status.setText(f"The search failed: {text}")
        self.results_shown.emit()

    def show_result(self, result: SearchResult) -> None:
        """Fill the table with ``result``'s hits."""
        self._hits = result.hits
        fits = sum(1 for h in result.hits if h.badge.verdict == "fits")
        where = "from the cache" if result.from_cache else "from the Hub"
        lines = [f"{len(result.hits)} models ({fits} fit), {where}."]
        if result.unregistered:
            lines.append(f"{len(result.unregistered)} left out: their architecture is not "
                         "registered by the installed vLLM.")
        if result.stale_note:
            lines.append(result.stale_note)
        if result.runtime_note:
            lines.append(result.runtime_note[0].upper() + result.runtime_note[1:] + ".")
        self.status.setText(" ".join(lines))
        self.table.setRowCount(len(result.hits))
        for row, hit in enumerate(result.hits):
            badge = QTableWidgetItem(hit.badge.label)
            badge.setForeground(QColor(_BADGE_COLOURS[hit.badge.verdict]))
            font = badge.font()
            font.setBold(True)
            badge.setFont(font)
            badge.setToolTip(hit.badge.reason)
            name = QTableWidgetItem(hit.raw.repo)
            name.setToolTip(f"{hit.raw.architecture} · {hit.raw.pipeline_tag}")
            how = QTableWidgetItem(settings_text(hit))
            how.setToolTip(hit.badge.reason)
            cells = (name, badge, how,
                     QTableWidgetItem(checkpoints_text(hit)),
                     QTableWidgetItem(f"{hit.raw.downloads:,}"))
            for col, item in enumerate(cells):
                self.table.setItem(row, col, item)
        self.detail.setText("")
        self.plan_button.setEnabled(False)
        if result.hits:
            self.table.selectRow(0)
        self._selection_changed()
        self.results_shown.emit()

    # ------------------------------------------------------------------ picking
    def selected_hit(self) -> SearchHit | None:
        """The hit of the selected row, or None."""
        rows = self.table.selectionModel().selectedRows()
        if not rows or rows[0].row() >= len(self._hits):
            return None
        return self._hits[rows[0].row()]

    def _selection_changed(self) -> None:
        hit = self.selected_hit()
        if hit is None:
            self.detail.setText("")
            self.plan_button.setEnabled(False)
            return
        refused = [f"{c.repo}: {c.refused}" for c in hit.checkpoints if c.refused]
        text = f"<b>{hit.raw.repo}</b> ({hit.raw.architecture}): {hit.badge.reason}"
        if refused:
            text += "<br>Not on this GPU: " + "; ".join(refused)
        notes = sorted({c.note for c in hit.checkpoints if c.note})
        if notes:
            text += "<br>" + "; ".join(notes)
        self.detail.setText(text)
        self.plan_button.setEnabled(hit.badge.checkpoint is not None or bool(hit.checkpoints))

    def _plan_selected(self) -> None:
        hit = self.selected_hit()
        if hit is None:
            return
        self.plan_requested.emit(hit.badge.checkpoint or hit.raw.repo)
