"""Server panel: launch / stop, state and start-up phase with elapsed time, endpoint, capacity.

Plus :class:`LogView`, the bounded log of the running server with a level filter, a search box
and a follow switch. Both are fed by the main window from supervisor events (delivered on the
GUI thread by :class:`~kvpilot.gui.bridge.CoreBridge`); nothing here talks to the process.

Signals (ServerPanel):
    launch_clicked(): the user asked to launch the selected plan.
    stop_clicked(): the user asked to stop the server.
    attach_clicked(): the user wants to watch a server kvpilot did not start.
    detach_clicked(): stop watching that server (it keeps running).
"""

from __future__ import annotations

import collections
import html
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from PySide6.QtCore import (
    QAbstractListModel,
    QModelIndex,
    QPersistentModelIndex,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QAction, QColor, QFontMetrics, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QSizePolicy,
    QTableView,
    QToolButton,
    QWidget,
)

from kvpilot.core.base.lifecycle import (  # not the log parser
    DOWNLOADING,
    PHASES,
    SupervisorState,
    phase_words,
)
from kvpilot.gui import format as fmt
from kvpilot.gui import theme
from kvpilot.gui.screen_fit import elide_middle, wrap_anywhere
from kvpilot.gui.widgets.layouts import column_layout, row_layout
from kvpilot.gui.widgets.small import push_button

#: the panel's state for a server kvpilot watches but did not start (``kvpilot watch``)
ATTACHED: Literal["attached"] = "attached"
#: what the panel shows: a supervisor state, a watched server, or None (no server yet)
PanelState = SupervisorState | Literal["attached"] | None

STATE_COLORS: dict[str, str] = {
    SupervisorState.STARTING: theme.INFO,
    SupervisorState.READY: theme.OK,
    SupervisorState.STOPPING: theme.TIGHT,
    SupervisorState.STOPPED: theme.MUTED,
    SupervisorState.FAILED: theme.FAIL,
    ATTACHED: theme.OK,
}
_STARTING, _READY = SupervisorState.STARTING, SupervisorState.READY


class ServerPanel(QWidget):
    """One row of server state with launch/stop, a phase bar and the capacity comparison."""

    launch_clicked = Signal()
    stop_clicked = Signal()
    attach_clicked = Signal()
    detach_clicked = Signal()
    install_clicked = Signal()

    def __init__(
        self, parent: QWidget | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(parent)
        self._clock = clock
        self.state: PanelState = None
        self.phase: str | None = None
        self.phases_seen: list[str] = []
        self._since_s: float | None = None
        self._ready_s: float | None = None
        self._endpoint = ""

        self.status = QLabel()
        self.status.setObjectName("serverStatus")
        self.status.setTextFormat(Qt.TextFormat.RichText)
        # a long model id must not widen the window: the label takes what the row leaves
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.status.setMinimumWidth(120)
        self.endpoint = QLineEdit()
        self.endpoint.setReadOnly(True)
        self.endpoint.setMinimumWidth(220)
        self.endpoint.setVisible(False)
        self.copy_endpoint = QToolButton()
        self.copy_endpoint.setText("Copy URL")
        self.copy_endpoint.setVisible(False)
        self.copy_endpoint.clicked.connect(self._copy_endpoint)
        self.elapsed = QLabel()
        self._blocked: str | None = None
        #: why no plan can be launched now (the window sets it as plans arrive and are chosen)
        self._no_plan: str | None = "no plan yet: the planner is still working"
        self.launch_button = push_button("Launch", name="launchButton",
                                         on_click=self.launch_clicked.emit)
        self.stop_button = push_button("Stop", name="stopButton", on_click=self.stop_clicked.emit,
                                       enabled=False)
        self.attach_button = push_button("Attach…", name="attachButton",
                                         tooltip="Watch a vLLM server kvpilot did not start",
                                         on_click=self.attach_clicked.emit)
        self.detach_button = push_button("Detach", name="detachButton",
                                         tooltip="Stop watching (the server keeps running)",
                                         on_click=self.detach_clicked.emit, hidden=True)

        row = QHBoxLayout()
        row.addWidget(self.status, 1)
        row.addWidget(self.endpoint)
        row.addWidget(self.copy_endpoint)
        row.addWidget(self.elapsed)
        row.addWidget(self.launch_button)
        row.addWidget(self.stop_button)
        row.addWidget(self.attach_button)
        row.addWidget(self.detach_button)

        self.progress = QProgressBar()
        self.progress.setRange(0, len(PHASES))
        self.progress.setTextVisible(True)
        self.progress.setVisible(False)
        self.capacity = QLabel()
        self.capacity.setObjectName("capacityLine")
        self.capacity.setVisible(False)
        self.reason = QLabel()
        self.reason.setObjectName("launchDisabledReason")
        self.reason.setWordWrap(True)
        self.reason.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.reason.setVisible(False)
        self.install_button = push_button(
            "Install vLLM…", name="installVllmButton",
            tooltip="Install a vLLM build that fits this GPU and driver into kvpilot's data folder",
            on_click=self.install_clicked.emit, hidden=True,
        )
        reason_row = QHBoxLayout()
        reason_row.addWidget(self.reason, 1)
        reason_row.addWidget(self.install_button, 0, Qt.AlignmentFlag.AlignTop)

        column_layout(self, row, self.progress, self.capacity, reason_row,
                      margins_px=(6, 2, 6, 2), spacing_px=2)

        self._tick = QTimer(self)
        self._tick.setObjectName("server-elapsed")
        self._tick.setInterval(1000)
        self._tick.timeout.connect(self._update_elapsed)
        self._tick.start()
        self.show_state(None)

    # ----------------------------------------------------------------- launch availability

    def set_launch_blocked(self, reason: str | None, *, offer_install: bool = False) -> None:
        """Disable Launch with a reason and what to install (None: launch allowed);
        ``offer_install`` shows the "Install vLLM…" button (no usable vLLM found)."""
        self.install_button.setVisible(bool(reason) and offer_install)
        self._blocked = reason
        self.reason.setText(f"Launch unavailable: {wrap_anywhere(reason)}" if reason else "")
        self.reason.setStyleSheet(f"color: {theme.TIGHT}")
        self.reason.setVisible(bool(reason))
        self._update_buttons()

    def set_plan_missing(self, reason: str | None) -> None:
        """Disable Launch while no plan can be launched, ``reason`` in its tooltip (None: a
        launchable plan is selected)."""
        self._no_plan = reason
        self._update_buttons()

    def _update_buttons(self) -> None:
        attached = self.state == ATTACHED
        busy = self.state in (_STARTING, _READY, SupervisorState.STOPPING) or attached
        blocked = self._blocked or self._no_plan
        self.launch_button.setEnabled(not busy and not blocked)
        self.launch_button.setToolTip(blocked or "Launch the selected plan (F5)")
        # a server kvpilot does not own is never stopped from here: Detach instead of Stop
        self.stop_button.setVisible(not attached)
        self.stop_button.setEnabled(self.state in (_STARTING, _READY))
        self.detach_button.setVisible(attached)
        self.attach_button.setEnabled(not busy)

    # ----------------------------------------------------------------- events

    def show_state(
        self,
        state: PanelState,
        *,
        model: str = "",
        endpoint: str = "",
        detail: str = "",
    ) -> None:
        """Enter a supervisor state (None = no server yet)."""
        now = self._clock()
        if state != self.state:
            if state == _STARTING:
                self._since_s = now
                self._ready_s = None
                self.phases_seen = []
                self.phase = None
                self.progress.setValue(0)
            elif state in (_READY, ATTACHED):
                self._ready_s = now
        self.state = state
        color = STATE_COLORS.get(state or "", theme.MUTED)
        words = "no server running" if state is None else str(state)
        text = f'<span style="color:{color}">●</span> <b>{words}</b>'
        if model:
            text += f" · {html.escape(elide_middle(model, 60))}"
        if detail:
            text += f" · {html.escape(elide_middle(detail, 80))}"
        self.status.setText(text)
        self.status.setToolTip(" · ".join(p for p in (words, model, detail) if p))
        if endpoint:
            self._endpoint = endpoint
        show_ep = state in (_READY, ATTACHED) and bool(self._endpoint)
        self.endpoint.setText(self._endpoint)
        self.endpoint.setVisible(show_ep)
        self.copy_endpoint.setVisible(show_ep)
        self.progress.setVisible(state == _STARTING)
        if state == _STARTING:
            self._show_phase_text()
        self._update_buttons()
        self._update_elapsed()

    def show_phase(self, phase: str) -> None:
        """A start-up phase began (``download``, ``weights``, ``profiling``, ``graphs``, ...)."""
        if phase == self.phase:
            return
        self.phase = phase
        if phase not in self.phases_seen:
            self.phases_seen.append(phase)
        if phase in PHASES:
            self.progress.setValue(max(self.progress.value(), PHASES.index(phase) + 1))
        self._show_phase_text()

    def show_download(self, done_bytes: int, total_bytes: int | None) -> None:
        """Download progress of the model files."""
        self.show_phase(DOWNLOADING)
        if total_bytes:
            self.progress.setFormat(
                f"downloading the model: {fmt.gib(done_bytes)} of {fmt.gib(total_bytes)}"
            )

    def _show_phase_text(self) -> None:
        words = phase_words(self.phase) if self.phase else "starting vLLM"
        self.progress.setFormat(f"{words}… %v/%m")

    def show_capacity(
        self, predicted_tokens: int | None, reported_tokens: int | None, basis: str = ""
    ) -> None:
        """The KV capacity vLLM reported next to what the plan predicted; ``basis`` (how the
        prediction was made) is the tooltip."""
        if predicted_tokens is None and reported_tokens is None:
            self.capacity.setVisible(False)
            return
        parts = []
        if predicted_tokens is not None:
            parts.append(f"Predicted KV {fmt.tokens(predicted_tokens)} tok")
        if reported_tokens is not None:
            rep = f"vLLM reported {fmt.tokens(reported_tokens)} tok"
            if predicted_tokens:
                delta = (reported_tokens - predicted_tokens) / predicted_tokens * 100
                rep += f" ({delta:+.1f} %)"
            parts.append(rep)
        else:
            parts.append("vLLM has not reported yet")
        self.capacity.setText(" · ".join(parts))
        self.capacity.setToolTip(f"Predicted from {basis}" if basis else "")
        self.capacity.setVisible(True)

    def _update_elapsed(self) -> None:
        now = self._clock()
        if self.state == _STARTING and self._since_s is not None:
            self.elapsed.setText(f"elapsed {fmt.duration(now - self._since_s)}")
        elif self.state in (_READY, ATTACHED) and self._ready_s is not None:
            self.elapsed.setText(f"up {fmt.duration(now - self._ready_s)}")
        else:
            self.elapsed.setText("")

    def _copy_endpoint(self) -> None:
        QGuiApplication.clipboard().setText(self._endpoint)


# --------------------------------------------------------------------------- log view

LEVELS: tuple[str, ...] = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_LEVEL_RANK = {name: i for i, name in enumerate(LEVELS)}
_ROOT = QModelIndex()
_LEVEL_COLORS = {"WARNING": theme.TIGHT, "ERROR": theme.FAIL, "CRITICAL": theme.FAIL}


#: characters of one line drawn in a row; the rest is in the row's tooltip, a copy and the file
ROW_CHARS = 2000
TOOLTIP_CHARS = 8000


class LogLinesModel(QAbstractListModel):
    """The shown lines as a list model: one row per line, the oldest dropped past ``max_rows``.

    A text document lays out and keeps every appended line (about 4 KB per 70-character line
    while it is on screen, 22 MB for 5,000 lines); this model keeps nothing but the strings
    and the view draws only the rows in sight.
    """

    def __init__(self, max_rows: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._rows: collections.deque[tuple[str, str]] = collections.deque(maxlen=max_rows)

    @property
    def max_rows(self) -> int:
        return self._rows.maxlen or 0

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = _ROOT) -> int:
        return 0 if parent.isValid() else len(self._rows)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = 0) -> object:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        level, line = self._rows[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return line if len(line) <= ROW_CHARS else line[:ROW_CHARS] + " …"
        if role == Qt.ItemDataRole.ToolTipRole and len(line) > 120:
            return line if len(line) <= TOOLTIP_CHARS else line[:TOOLTIP_CHARS] + " …"
        if role == Qt.ItemDataRole.ForegroundRole:
            color = _LEVEL_COLORS.get(level)
            return QColor(color) if color else None
        return None

    def lines(self) -> list[str]:
        return [line for _, line in self._rows]

    def line(self, row: int) -> str:
        return self._rows[row][1]

    def extend(self, items: list[tuple[str, str]]) -> None:
        """Append ``(level, line)`` pairs, first dropping the oldest rows that would not fit."""
        items = items[-self.max_rows :]
        if not items:
            return
        drop = len(self._rows) + len(items) - self.max_rows
        if drop > 0:
            self.beginRemoveRows(_ROOT, 0, drop - 1)
            for _ in range(drop):
                self._rows.popleft()
            self.endRemoveRows()
        first = len(self._rows)
        self.beginInsertRows(_ROOT, first, first + len(items) - 1)
        self._rows.extend(items)
        self.endInsertRows()

    def replace_all(self, items: list[tuple[str, str]]) -> None:
        self.beginResetModel()
        self._rows.clear()
        self._rows.extend(items[-self.max_rows :])
        self.endResetModel()


class LogView(QWidget):
    """The server log: bounded, filter by minimum level, search, follow the tail.

    Rows are selectable; Ctrl+C (or the context menu) copies the selected lines whole.
    """

    def __init__(self, parent: QWidget | None = None, *, max_lines: int = 5000) -> None:
        super().__init__(parent)
        self._lines: collections.deque[tuple[str, str]] = collections.deque(maxlen=max_lines)
        self.level = QComboBox()
        self.level.addItems(["all", "INFO and above", "WARNING and above", "ERROR only"])
        self.level.setCurrentIndex(0)
        self.level.currentIndexChanged.connect(self._refilter)
        self.search = QLineEdit()
        self.search.setPlaceholderText("search the log")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self._refilter)
        self.follow = QCheckBox("follow")
        self.follow.setChecked(True)
        self.path_label = QLabel()
        self.path_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.model = LogLinesModel(max_lines, self)
        # a one-column table: a list or tree view lays out every row again after each insert
        # (6-9 ms at 5,000 rows: benchmarks/log_view_memory.py), a table with fixed row
        # heights only the rows in sight
        self.rows = QTableView()
        self.rows.setModel(self.model)
        self.rows.setShowGrid(False)
        self.rows.setWordWrap(False)
        self.rows.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.rows.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.rows.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.rows.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.rows.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
        font = self.rows.font()
        font.setFamily("monospace")
        font.setStyleHint(font.StyleHint.Monospace)
        self.rows.setFont(font)
        self.rows.horizontalHeader().hide()
        self.rows.horizontalHeader().setStretchLastSection(True)
        rows_header = self.rows.verticalHeader()
        rows_header.hide()
        rows_header.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        rows_header.setDefaultSectionSize(QFontMetrics(font).height() + 2)
        copy = QAction("Copy", self.rows)
        copy.setShortcut(QKeySequence.StandardKey.Copy)
        copy.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
        copy.triggered.connect(self.copy_selection)
        copy_all = QAction("Copy all shown lines", self.rows)
        copy_all.triggered.connect(lambda: self._to_clipboard(self.visible_text()))
        self.rows.addActions([copy, copy_all])
        top = row_layout(QLabel("level"), self.level, (self.search, 1), self.follow)
        column_layout(self, top, (self.rows, 1), self.path_label, margins_px=4)

    def _min_rank(self) -> int:
        return {0: -1, 1: 1, 2: 2, 3: 3}[self.level.currentIndex()]

    def _visible(self, level: str, line: str) -> bool:
        rank = _LEVEL_RANK.get(level, 1)
        if rank < self._min_rank():
            return False
        needle = self.search.text().strip().lower()
        return not needle or needle in line.lower()

    def _follow_tail(self) -> None:
        if self.follow.isChecked():
            self.rows.scrollToBottom()

    def append(self, level: str, line: str) -> None:
        """Add one line (``level`` one of :data:`LEVELS`)."""
        self.append_many([(level, line)])

    def append_many(self, items: list[tuple[str, str]]) -> None:
        """Add ``(level, line)`` pairs at once (one model update for the whole batch)."""
        if not items:
            return
        self._lines.extend(items)
        shown = [(level, line) for level, line in items if self._visible(level, line)]
        if shown:
            self.model.extend(shown)
            self._follow_tail()

    def clear(self) -> None:
        self._lines.clear()
        self.model.replace_all([])

    def set_log_path(self, path: str | Path | None) -> None:
        self.path_label.setText(f"full log: {path}" if path else "")

    def line_count(self) -> int:
        """Lines kept (bounded by ``max_lines``)."""
        return len(self._lines)

    def shown_count(self) -> int:
        """Rows the view holds now (the lines that pass the level filter and search)."""
        return self.model.rowCount()

    def visible_text(self) -> str:
        """The shown lines, whole, one per line."""
        return "\n".join(self.model.lines())

    def copy_selection(self) -> None:
        """Put the selected lines (whole, in log order) on the clipboard."""
        rows = sorted(i.row() for i in self.rows.selectionModel().selectedIndexes())
        if rows:
            self._to_clipboard("\n".join(self.model.line(r) for r in rows))

    @staticmethod
    def _to_clipboard(text: str) -> None:
        clipboard = QGuiApplication.clipboard()
        if clipboard is not None:
            clipboard.setText(text)

    def _refilter(self) -> None:
        self.model.replace_all([item for item in self._lines if self._visible(*item)])
        self._follow_tail()
