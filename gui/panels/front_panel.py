"""The Front tab: several profiles behind one address, and what the front is doing.

The user ticks the profiles, sets the address and the idle time, and starts or stops the front;
the table shows each profile loaded, asleep, starting or stopped (with its share of the card and
its requests in flight), beside the queue and the last swaps. It renders only: the controller
(:class:`kvpilot.gui.controllers.front.FrontController`) starts the front and feeds the status.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from kvpilot.core.base.units import GiB
from kvpilot.gui import theme
from kvpilot.gui.widgets.small import push_button

COLUMNS = ("Profile", "Model", "State", "In flight", "Share", "Note")


class FrontPanel(QWidget):
    """Signals: ``start_requested`` (profiles, host, port, idle seconds or 0) and
    ``stop_requested``."""

    start_requested = Signal(list, str, int, int)
    stop_requested = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("frontPanel")
        self.profiles = QListWidget()
        self.profiles.setObjectName("frontProfiles")
        self.profiles.setMaximumHeight(120)
        self.host = QLineEdit("127.0.0.1")
        self.host.setObjectName("frontHost")
        self.port = QSpinBox()
        self.port.setObjectName("frontPort")
        self.port.setRange(1, 65535)
        self.port.setValue(8000)
        self.idle = QSpinBox()
        self.idle.setObjectName("frontIdle")
        self.idle.setRange(0, 24 * 3600)
        self.idle.setSuffix(" s")
        self.idle.setSpecialValueText("never")
        self.idle.setToolTip("stop a profile no request used for this long")
        self.button = push_button("Start front", name="frontButton", on_click=self._clicked)
        self.address = QLabel("")
        self.address.setObjectName("frontAddress")
        self.address.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("frontTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.queue = QLabel("")
        self.queue.setObjectName("frontQueue")
        self.plan = QLabel("")
        self.plan.setObjectName("frontPlan")
        self.plan.setWordWrap(True)
        self.plan.setStyleSheet(f"color: {theme.MUTED}")
        self.swaps = QListWidget()
        self.swaps.setObjectName("frontSwaps")
        form = QFormLayout()
        form.addRow("Profiles", self.profiles)
        address = QHBoxLayout()
        address.addWidget(self.host, 1)
        address.addWidget(QLabel("port"))
        address.addWidget(self.port)
        address.addWidget(QLabel("unload when idle after"))
        address.addWidget(self.idle)
        form.addRow("Address", address)
        row = QHBoxLayout()
        row.addWidget(self.button)
        row.addWidget(self.address, 1)
        box = QVBoxLayout(self)
        box.addLayout(form)
        box.addLayout(row)
        box.addWidget(self.plan)
        box.addWidget(self.table, 2)
        box.addWidget(self.queue)
        box.addWidget(QLabel("Last swaps"))
        box.addWidget(self.swaps, 1)
        self.running = False

    # ------------------------------------------------------------------ input

    def set_profiles(self, names: Sequence[str], checked: Sequence[str] = ()) -> None:
        """The profiles to choose from (``checked`` ticked)."""
        self.profiles.clear()
        for name in names:
            item = QListWidgetItem(name)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if name in checked
                               else Qt.CheckState.Unchecked)
            self.profiles.addItem(item)

    def chosen(self) -> list[str]:
        """The ticked profiles, in display order."""
        items = (self.profiles.item(i) for i in range(self.profiles.count()))
        return [it.text() for it in items if it.checkState() == Qt.CheckState.Checked]

    def _clicked(self) -> None:
        if self.running:
            self.stop_requested.emit()
        else:
            self.start_requested.emit(self.chosen(), self.host.text().strip(),
                                      self.port.value(), self.idle.value())

    # ------------------------------------------------------------------ output

    def show_running(self, running: bool, address: str = "", busy: bool = False) -> None:
        """Running (``address`` clients use) or stopped; ``busy`` while it starts or stops."""
        self.running = running
        self.button.setText("Stop front" if running else "Start front")
        self.button.setEnabled(not busy)
        for widget in (self.profiles, self.host, self.port, self.idle):
            widget.setEnabled(not running and not busy)
        self.address.setText(address)
        if not running:
            self.queue.setText("")

    def show_status(self, status: dict[str, Any]) -> None:
        """Render the pool's status (:meth:`kvpilot.core.front.pool.Pool.status`)."""
        profiles = status["profiles"]
        self.table.setRowCount(len(profiles))
        for row, p in enumerate(profiles):
            share = p["share_bytes"]
            util = p["utilization"]
            share_text = "" if share is None else f"{share / GiB:.2f} GiB" + (
                f" ({util:.3f})" if util is not None else "")
            note = p["failure"] or p["plan_problem"] or ""
            values = (p["profile"], p["model"], p["state"], str(p["in_flight"]), share_text,
                      note)
            for col, text in enumerate(values):
                self.table.setItem(row, col, QTableWidgetItem(text))
        self.queue.setText(f"{status['queue']} request(s) waiting for a profile to load "
                           f"(at most {status['max_queue']})")
        plan = status["plan"]
        verdict = ("the profiles fit on the card together" if plan["stack_all"]
                   else "the profiles take turns")
        self.plan.setText(f"Plan: {verdict} ({plan['reason']}). {status['sleep']['reason']}.")
        self.swaps.clear()
        for swap in reversed(status["swaps"][-20:]):
            mark = "" if swap["ok"] else f" FAILED ({swap['failure_kind']})"
            self.swaps.addItem(f"{swap['at']}  {swap['kind']} {swap['profile']}{mark}: "
                               f"{swap['reason']}; waited {swap['wait_s']:.1f} s, loaded in "
                               f"{swap['load_s']:.1f} s")
