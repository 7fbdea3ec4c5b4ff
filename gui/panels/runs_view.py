"""The Runs tab: the server runs kept (:mod:`kvpilot.core.runs`), side by side, and relaunch.

The upper table lists the runs, newest first; selecting two or more lines them up in the lower
table row by row (:func:`kvpilot.core.app.runs.compare_runs`, as ``kvpilot runs compare`` does:
capacity, tokens/s, TTFT/TPOT percentiles and J/token at each concurrency), the best value of
each figure in bold green. One selected run is shown alone. "Relaunch" asks to serve the
selected run's model with its settings again (:attr:`relaunch_requested`). The view only shows
what the controller gives it (:meth:`set_runs`); reading the folder happens on the pool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QSplitter,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from kvpilot.core.app.runs import RunsCompared, compare_runs
from kvpilot.core.base.words import counted
from kvpilot.gui import theme
from kvpilot.gui.widgets.layouts import column_layout
from kvpilot.gui.widgets.small import push_button
from kvpilot.gui.widgets.tables import SELECT_MANY, read_only_table

if TYPE_CHECKING:
    from kvpilot.core.runs.record import RunRecord

LIST_COLUMNS = ("started (UTC)", "model", "profile", "ended", "KV tokens", "best tok/s",
                "load tests")


def _short_model(model: str) -> str:
    """The last part of a path or repo id (the full one is the tooltip)."""
    return model.rstrip("/").rsplit("/", 1)[-1] or model


class RunsView(QWidget):
    """List, compare and relaunch runs; ``refresh_requested`` asks the controller to re-read."""

    refresh_requested = Signal()
    relaunch_requested = Signal(object)  # the RunRecord

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("runsView")
        self._runs: list[RunRecord] = []
        self.comparison: RunsCompared | None = None

        self.table = read_only_table("runsList", LIST_COLUMNS, select=SELECT_MANY, stretch=1)
        self.table.itemSelectionChanged.connect(self._on_selection)

        self.refresh_button = push_button("Refresh", on_click=self.refresh_requested.emit)
        self.relaunch_button = push_button(
            "Relaunch", name="runsRelaunch",
            tooltip="Serve the selected run's model with its settings again",
            on_click=self._relaunch, enabled=False,
        )
        self.hint = QLabel("Select two or more runs (Ctrl+click) to compare them side by side")
        self.hint.setStyleSheet(f"color: {theme.MUTED}")
        self.status = QLabel("")
        self.status.setObjectName("runsStatus")
        self.status.setWordWrap(True)
        row = QHBoxLayout()
        row.addWidget(self.refresh_button)
        row.addWidget(self.relaunch_button)
        row.addWidget(self.hint, 1)

        self.compare_table = read_only_table("runsCompare", (), row_numbers=True)

        top = QWidget()
        top_lay = QVBoxLayout(top)
        top_lay.setContentsMargins(0, 0, 0, 0)
        top_lay.addLayout(row)
        top_lay.addWidget(self.status)
        top_lay.addWidget(self.table, 1)
        # the list takes the whole tab until runs are selected; then the comparison shows below
        # it, the list keeping the height of its rows (up to half the tab)
        split = self.split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(top)
        split.addWidget(self.compare_table)
        split.setStretchFactor(0, 1)
        split.setStretchFactor(1, 1)
        split.setChildrenCollapsible(False)
        self.compare_table.setVisible(False)
        column_layout(self, split, margins_px=2)

    # ------------------------------------------------------------------ content

    @property
    def runs(self) -> list[RunRecord]:
        return list(self._runs)

    def set_runs(self, runs: list[RunRecord], warnings: tuple[str, ...] = ()) -> None:
        """Show ``runs`` (newest first), keeping the selection by run id; ``warnings`` (one
        per damaged record skipped) are said above the list."""
        selected = {r.id for r in self.selected_runs()}
        self._runs = list(runs)
        self.table.blockSignals(True)
        self.table.setRowCount(len(runs))
        for r, rec in enumerate(runs):
            reported = rec.reported.get("kv_cache_tokens")
            best = rec.best_tokens_per_s
            ended = rec.state + (f" ({rec.failure_kind})" if rec.failure_kind else "")
            cells = [
                rec.started_at.replace("T", " ").removesuffix("Z"),
                _short_model(rec.model),
                rec.profile or "-",
                ended,
                f"{reported:,}" if isinstance(reported, int) else "-",
                f"{best:,.0f}" if best is not None else "-",
                str(len(rec.load_tests)),
            ]
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if c == 1:
                    item.setToolTip(rec.model)
                if c == 3 and rec.failure_message:
                    item.setToolTip(rec.failure_message)
                self.table.setItem(r, c, item)
        self.table.clearSelection()
        mode = self.table.selectionModel()
        for r, rec in enumerate(runs):
            if rec.id in selected:
                index = self.table.model().index(r, 0)
                mode.select(index, mode.SelectionFlag.Select | mode.SelectionFlag.Rows)
        self.table.blockSignals(False)
        if warnings:
            self.status.setStyleSheet(f"color: {theme.TIGHT}")
            self.status.setText(" · ".join(warnings[:3]) + (
                f" (and {len(warnings) - 3} more)" if len(warnings) > 3 else ""))
        else:
            self.status.setStyleSheet(f"color: {theme.MUTED}")
            self.status.setText(f"{counted(len(runs), 'run')} kept" if runs else
                                "No runs yet: every server kvpilot launches is kept here")
        self._on_selection()

    def select_runs(self, run_ids: list[str]) -> None:
        """Select the runs with these ids (the others are deselected)."""
        self.table.clearSelection()
        mode = self.table.selectionModel()
        for r, rec in enumerate(self._runs):
            if rec.id in run_ids:
                index = self.table.model().index(r, 0)
                mode.select(index, mode.SelectionFlag.Select | mode.SelectionFlag.Rows)

    def selected_runs(self) -> list[RunRecord]:
        """The selected runs, in list order."""
        rows = sorted({i.row() for i in self.table.selectionModel().selectedRows()})
        return [self._runs[r] for r in rows if r < len(self._runs)]

    def _on_selection(self) -> None:
        chosen = self.selected_runs()
        self.relaunch_button.setEnabled(len(chosen) == 1)
        self.show_comparison(chosen)

    def show_comparison(self, runs: list[RunRecord]) -> None:
        """The side-by-side table of ``runs`` (one run: shown alone; none: empty)."""
        table = self.compare_table
        if not runs:
            self.comparison = None
            table.setRowCount(0)
            table.setColumnCount(0)
            table.setVisible(False)
            return
        if not table.isVisible():
            table.setVisible(True)
            self._size_split()
        shown = compare_runs(runs, minimum=1)
        self.comparison = shown
        table.setColumnCount(len(runs))
        table.setHorizontalHeaderLabels(
            [f"{_short_model(r.model)}\n{r.id}" for r in runs])
        table.setRowCount(len(shown.rows))
        table.setVerticalHeaderLabels([row.label for row in shown.rows])
        bold = QFont()
        bold.setBold(True)
        for r, row in enumerate(shown.rows):
            for c, text in enumerate(row.cells):
                item = QTableWidgetItem(text)
                if c == row.best:
                    item.setFont(bold)
                    item.setForeground(QBrush(QColor(theme.OK)))
                    item.setToolTip(f"best {row.label} of the runs shown ({row.better} is "
                                    "better)")
                table.setItem(r, c, item)

    def _size_split(self) -> None:
        """The list as tall as its rows need (at most half the tab), the comparison the rest."""
        total = max(self.split.height(), 1)
        rows = self.table.rowCount()
        needed = (
            self.table.horizontalHeader().height()
            + rows * max(self.table.verticalHeader().defaultSectionSize(), 1)
            + 2 * self.table.frameWidth()
            + self.refresh_button.sizeHint().height()
            + (self.status.sizeHint().height() if self.status.text() else 0)
            + 16
        )
        top = min(needed, total // 2) if total > 1 else needed
        self.split.setSizes([top, max(total - top, 1)])

    def best_cell(self, label: str) -> int | None:
        """The column holding the best value of the row called ``label`` (None: no best)."""
        if self.comparison is None:
            return None
        return self.comparison.best_of(label)

    def _relaunch(self) -> None:
        chosen = self.selected_runs()
        if len(chosen) == 1:
            self.relaunch_requested.emit(chosen[0])
