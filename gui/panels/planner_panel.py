"""Planner panel: goal inputs, ranked plans with a memory bar each, feasibility chart, details.

The panel shows :class:`PlanRow` records that the main window builds from the fit engine's
ranked candidates (see :mod:`kvpilot.gui.services`); it computes nothing itself.

Signals:
    goal_changed(object): the goal inputs changed (a :class:`~kvpilot.gui.records.PlanRequest`).
    plan_selected(object): the selected :class:`PlanRow` (None when the table is empty).
    launch_requested(object): double-click / Enter on a plan that fits.
    copy_command_requested(): copy the selected plan's ``vllm serve`` command.
    export_requested(str): copy the selected plan as command, docker, compose or helm.
    browse_model_requested(): pick a local model directory.
    hub_search_requested(): open the "Find on Hugging Face" dialog.
    measure_requested(object): "Measure on this GPU" for the selected :class:`PlanRow`.
    measure_cancel_requested(): stop the running dry run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSignalBlocker, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QProgressBar,
    QRadioButton,
    QSpinBox,
    QSplitter,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from kvpilot.core.base.errors import FitError
from kvpilot.core.base.goal import (
    DEFAULT_CONTEXT_TOKENS,
    USE_CASE_CONTEXT_TOKENS,
    Goal,
    min_weight_bits_for,
    parse_context_tokens,
)
from kvpilot.core.base.model_spec import UNKNOWN_ARCHITECTURE_NOTE
from kvpilot.core.base.plan import USE_CASE_LABELS, ServingSettings, Verdict
from kvpilot.core.base.words import significant, times_text
from kvpilot.gui import format as fmt
from kvpilot.gui import theme
from kvpilot.gui.panels.adapter_inputs import AdapterInputs
from kvpilot.gui.records import PlanRequest, PlanRow
from kvpilot.gui.widgets.small import Segment, StackedBar, push_button, wrapped_label
from kvpilot.gui.widgets.tables import SELECT_ONE, read_only_table

if TYPE_CHECKING:
    from kvpilot.core.base.plan import Capacity, PlanInputs

#: the export menu: format -> label (the formats of ``kvpilot export --format``)
EXPORT_FORMATS = (
    ("command", "vllm serve command"),
    ("docker", "docker run"),
    ("compose", "Compose file (compose.yaml)"),
    ("helm", "Helm values (production-stack)"),
)

CONTEXT_CHOICES = (2048, 4096, 8192, 16384, 32768, 65536, 131072)
USE_CASES = tuple(USE_CASE_LABELS.items())
#: chart x grid (contexts), log-spaced powers of two
CHART_CONTEXTS = [1 << k for k in range(10, 18)]

COLUMNS = (
    "",
    "checkpoint",
    "quant.",
    "context",
    "seqs",
    "KV dtype",
    "util.",
    "KV tokens",
    "users @ ctx",
    "tok/s",
    "KV spare",
    "memory",
)


def plan_segments(capacity: Capacity | None) -> list[Segment]:
    """The stacked bar of one plan: weights, activation + graphs + non-torch, KV, unused."""
    if capacity is None:
        return []
    from kvpilot.core.app.vram import plan_bytes  # the fit engine: not before first paint

    weights, act, kv = plan_bytes(capacity)
    return [
        Segment("weights", weights, theme.MEM_WEIGHTS, "model weights"),
        Segment("act", act, theme.MEM_ACTIVATION,
                "activation peak (+ vision encoder) + CUDA graphs + non-torch"),
        Segment("KV", kv, theme.MEM_KV, "KV cache"),
    ]


class PlannerPanel(QWidget):
    """Goal on the left; ranked plans, chart and budget detail on the right."""

    goal_changed = Signal(object)
    plan_selected = Signal(object)
    launch_requested = Signal(object)
    copy_command_requested = Signal()
    export_requested = Signal(str)  # "command" | "docker" | "compose" | "helm"
    browse_model_requested = Signal()
    hub_search_requested = Signal()
    measure_requested = Signal(object)  # the selected PlanRow
    measure_cancel_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows: list[PlanRow] = []
        self._suppress = False
        #: the fixed settings last put in by :meth:`set_request`: those with no input here (a
        #: KV cache size in bytes, a block size, ...) are planned and saved as they are
        self._pinned_base = ServingSettings()
        self._debounce = QTimer(self)
        self._debounce.setObjectName("planner-goal-debounce")
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(250)
        self._debounce.timeout.connect(lambda: self.goal_changed.emit(self.request()))

        # --- goal inputs
        goal_box = QGroupBox("Plan")
        form = QFormLayout(goal_box)
        # a row of spin boxes (the adapters) is taller than a check box's: one pixel less
        # between rows keeps the window within a 768-pixel screen
        form.setVerticalSpacing(max(0, form.verticalSpacing() - 1))
        self.use_case_group = QButtonGroup(self)
        uc_col = QVBoxLayout()
        for i, (key, words) in enumerate(USE_CASES):
            rb = QRadioButton(words)
            rb.setProperty("use_case", key)
            rb.setChecked(i == 0)
            self.use_case_group.addButton(rb, i)
            uc_col.addWidget(rb)
        self.use_case_group.idClicked.connect(self._use_case_clicked)
        form.addRow("Use case", uc_col)
        self.context = QComboBox()
        self.context.setEditable(True)
        for c in CONTEXT_CHOICES:
            self.context.addItem(f"{c:,}", c)
        self.context.setCurrentIndex(2)
        self.context.setToolTip("Tokens per request (prompt + answer): vLLM's --max-model-len")
        self.context.currentTextChanged.connect(self._changed)
        self.context.currentTextChanged.connect(self._show_context_problem)
        form.addRow("Context", self.context)
        self.context_problem = QLabel("")  # says why a typed context is not used
        self.context_problem.setObjectName("contextProblem")
        self.context_problem.setWordWrap(True)
        self.context_problem.setStyleSheet(f"color: {theme.FAIL}")
        self.context_problem.setVisible(False)
        form.addRow("", self.context_problem)
        self.users = QSpinBox()
        self.users.setRange(1, 1024)
        self.users.setValue(4)
        self.users.setToolTip("Requests served at the same time: vLLM's --max-num-seqs")
        self.users.valueChanged.connect(self._changed)
        form.addRow("Users", self.users)
        self.allow_4bit = QCheckBox("4-bit weights")
        self.allow_4bit.setToolTip("Allow 4-bit quantized checkpoints (AWQ, GPTQ, ...)")
        self.allow_4bit.setChecked(True)
        self.allow_4bit.toggled.connect(self._changed)
        self.enforce_eager = QCheckBox("eager")
        self.enforce_eager.setToolTip("vLLM's --enforce-eager: no CUDA graphs are captured")
        self.enforce_eager.toggled.connect(self._changed)
        self.language_only = QCheckBox("text only")
        self.language_only.setObjectName("languageModelOnly")
        self.language_only.setToolTip("vLLM's --language-model-only: no vision or audio tower "
                                      "is loaded and no image budget profiled")
        self.language_only.toggled.connect(self._changed)
        form.addRow("Quality", self.allow_4bit)
        # the engine's switches on a row of their own: three checkboxes on one row of the
        # left column clipped their labels
        engine_row = QHBoxLayout()
        engine_row.addWidget(self.enforce_eager)
        engine_row.addWidget(self.language_only)
        engine_row.addStretch(1)
        form.addRow("Engine", engine_row)
        self.kv_dtype = QComboBox()
        self.kv_dtype.addItem("auto (model dtype)", "auto")
        self.kv_dtype.addItem("fp8", "fp8")
        # vLLM 0.29+: FP4 data with FP8 block scales (about 3.6 x the tokens of 16-bit KV)
        self.kv_dtype.addItem("nvfp4 (vLLM 0.29+)", "nvfp4")
        self.kv_dtype.setToolTip("vLLM's --kv-cache-dtype")
        self.kv_dtype.currentIndexChanged.connect(self._changed)
        form.addRow("KV cache", self.kv_dtype)
        util_row = QHBoxLayout()
        self.util_auto = QCheckBox("auto")
        self.util_auto.setChecked(True)
        self.util = QDoubleSpinBox()
        self.util.setRange(0.10, 1.00)
        self.util.setSingleStep(0.01)
        self.util.setDecimals(2)
        self.util.setValue(0.90)
        self.util.setEnabled(False)
        self.util_auto.toggled.connect(lambda on: self.util.setEnabled(not on))
        self.util_auto.toggled.connect(self._changed)
        self.util.valueChanged.connect(self._changed)
        util_row.addWidget(self.util_auto)
        util_row.addWidget(self.util)
        form.addRow("GPU memory", util_row)
        self.adapters = AdapterInputs(self)
        self.adapters.changed.connect(self._changed)
        form.addRow("LoRA, draft", self.adapters.row())
        model_row = QHBoxLayout()
        self.model = QComboBox()
        self.model.setEditable(True)
        self.model.addItem("any (catalog)", "")
        self.model.setToolTip("A catalog model, a Hugging Face repo id or a local directory")
        self.model.currentTextChanged.connect(self._changed)
        self.browse = push_button("Local…", on_click=self.browse_model_requested.emit)
        self.hub_search = push_button(
            "Hugging Face…", name="hubSearchOpen",
            tooltip="Find on Hugging Face: search the Hub, sized and badged for this GPU",
            on_click=self.hub_search_requested.emit,
        )
        form.addRow("Model", self.model)
        # the model field keeps the row's width; the two ways to pick one sit under it
        model_row.addWidget(self.browse, 1)
        model_row.addWidget(self.hub_search, 1)
        form.addRow("", model_row)
        self.copy_button = push_button(
            "Copy command", name="copyCommand",
            tooltip="Copy the selected plan's exact vllm serve command",
            on_click=self.copy_command_requested.emit, enabled=False,
        )
        self.export_button = QToolButton()
        self.export_button.setObjectName("exportPlan")
        self.export_button.setText("Export ▾")
        self.export_button.setToolTip("Copy the selected plan as a command, docker run, "
                                      "compose file or Helm values")
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.export_menu = QMenu(self.export_button)
        for fmt_name, label in EXPORT_FORMATS:
            action = self.export_menu.addAction(label)
            action.setData(fmt_name)
            action.triggered.connect(
                lambda _=False, f=fmt_name: self.export_requested.emit(f)
            )
        self.export_button.setMenu(self.export_menu)
        self.export_button.setEnabled(False)
        self.measure_button = push_button(
            "Measure on GPU", name="measurePlan",
            tooltip="Start the selected plan with dummy weights (--load-format dummy: nothing is "
            "downloaded but its config), read what vLLM reports, stop it: the plan's terms "
            "become \"measured\"",
            on_click=self._measure_clicked, enabled=False,
        )
        copy_row = QHBoxLayout()
        copy_row.addWidget(self.copy_button, 1)
        copy_row.addWidget(self.export_button)
        copy_row.addWidget(self.measure_button)
        form.addRow(copy_row)
        measure_row = QHBoxLayout()
        self.measure_progress = QProgressBar()
        self.measure_progress.setObjectName("measureProgress")
        self.measure_progress.setRange(0, 100)
        self.measure_progress.setTextVisible(False)
        self.measure_text = QLabel("")
        self.measure_text.setObjectName("measureText")
        self.measure_text.setWordWrap(True)
        # enabled while a dry run runs
        self.measure_cancel = push_button("Cancel", name="measureCancel",
                                          on_click=self.measure_cancel_requested.emit,
                                          enabled=False)
        measure_row.addWidget(self.measure_progress, 1)
        measure_row.addWidget(self.measure_cancel)
        self.measure_box = QWidget()
        box = QVBoxLayout(self.measure_box)
        box.setContentsMargins(0, 0, 0, 0)
        box.addLayout(measure_row)
        box.addWidget(self.measure_text)
        self.measure_box.setVisible(False)
        form.addRow(self.measure_box)
        self.status = wrapped_label()
        form.addRow(self.status)

        # --- plans table
        self.heading = wrapped_label("Ranked plans", heading=True)
        self.table = read_only_table("plansTable", COLUMNS, select=SELECT_ONE, stretch=-1)
        spare = self.table.horizontalHeaderItem(COLUMNS.index("KV spare"))
        assert spare is not None  # set by read_only_table just above
        spare.setToolTip(
            "KV cache left once every user has a full-context request, at the low edge of the "
            "prediction's band; amber below 1 GiB (the same rule as `kvpilot recommend`)"
        )
        self.table.setAlternatingRowColors(True)
        hh = self.table.horizontalHeader()
        hh.setSectionResizeMode(1, QHeaderView.ResizeMode.Interactive)
        hh.setMinimumSectionSize(28)
        self.table.setColumnWidth(1, 250)
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.table.itemSelectionChanged.connect(self._on_selection)
        self.table.cellDoubleClicked.connect(self._on_double_click)

        # --- feasibility chart
        self.chart = pg.PlotWidget()
        self.chart.setObjectName("feasibilityChart")
        self.chart.setBackground("w")
        self.chart.setMinimumHeight(170)
        pi = self.chart.getPlotItem()
        pi.setTitle("Users that fit at each context (16-bit KV ─, fp8 KV ┄, goal ●)", size="9pt",
                    color=theme.PLOT_TEXT)
        pi.setLabel("bottom", "context (tokens)")
        pi.setLabel("left", "users")
        pi.setLogMode(x=True, y=False)
        pi.getAxis("bottom").setTicks([[(math.log10(c), fmt.context(c)) for c in CHART_CONTEXTS]])
        pi.showGrid(x=True, y=True, alpha=0.2)
        pi.setMouseEnabled(x=False, y=False)
        pi.hideButtons()
        pi.addLegend(offset=(-5, 5), labelTextSize="8pt", labelTextColor=theme.PLOT_TEXT,
                     brush=theme.PLOT_LEGEND_FILL)
        for name in ("left", "bottom"):
            pi.getAxis(name).setTextPen(pg.mkPen(theme.PLOT_TEXT))
        self.curve_bf16 = pi.plot([], [], pen=pg.mkPen(theme.INFO, width=2), name="16-bit KV")
        self.curve_fp8 = pi.plot(
            [], [], pen=pg.mkPen(theme.OK, width=2, style=Qt.PenStyle.DashLine), name="fp8 KV"
        )
        self.goal_marker = pi.plot(
            [], [], pen=None, symbol="o", symbolSize=10, symbolBrush=theme.FAIL, name="goal"
        )
        self.chart_note = QLabel("")

        # --- detail
        self.detail = read_only_table("budgetDetail", ["budget term", "GiB", "source", "note"],
                                      stretch=-1)
        self.detail_title = QLabel("Budget of the selected plan")
        self.detail_title.setStyleSheet("font-weight: 600")

        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.addWidget(self.heading)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.table)
        lower = QWidget()
        ll = QHBoxLayout(lower)
        ll.setContentsMargins(0, 0, 0, 0)
        chart_box = QWidget()
        cl = QVBoxLayout(chart_box)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.addWidget(self.chart, 1)
        cl.addWidget(self.chart_note)
        detail_box = QWidget()
        dl = QVBoxLayout(detail_box)
        dl.setContentsMargins(0, 0, 0, 0)
        dl.addWidget(self.detail_title)
        dl.addWidget(self.detail, 1)
        ll.addWidget(chart_box, 1)
        ll.addWidget(detail_box, 1)
        split.addWidget(lower)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        rl.addWidget(split, 1)

        lay = QHBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        goal_box.setMaximumWidth(330)
        lay.addWidget(goal_box)
        lay.addWidget(right, 1)

    # ----------------------------------------------------------------- goal

    def context_tokens(self) -> tuple[int, str | None]:
        """The context typed or picked (tokens) and, when the text is not a usable number of
        tokens, the sentence saying so (the goal then uses the default, 8,192)."""
        ctx = self.context.currentData()
        shown = self.context.currentText()
        if isinstance(ctx, int) and f"{ctx:,}" == shown:
            return ctx, None
        try:
            return parse_context_tokens(shown), None
        except FitError as exc:
            return DEFAULT_CONTEXT_TOKENS, (
                f"{exc.message[0].upper()}{exc.message[1:]}; planning with "
                f"{DEFAULT_CONTEXT_TOKENS:,}."
            )

    def _show_context_problem(self, *_: object) -> None:
        problem = self.context_tokens()[1]
        self.context_problem.setText(problem or "")
        self.context_problem.setVisible(problem is not None)

    def request(self) -> PlanRequest:
        """The goal, fixed settings and model as currently entered (a context that is not a
        number: the default)."""
        ctx, _ = self.context_tokens()
        use_case = USE_CASES[max(0, self.use_case_group.checkedId())][0]
        model_ref = self.model.currentData() if self.model.currentIndex() == 0 else None
        if model_ref is None or self.model.currentText() != self.model.itemText(0):
            model_ref = self.model.currentText().strip()
            if model_ref == self.model.itemText(0):
                model_ref = ""
        goal = Goal(
            use_case=use_case,
            context_tokens=ctx,
            users=self.users.value(),
            min_weight_bits=min_weight_bits_for(self.allow_4bit.isChecked()),
        )
        base = self._pinned_base
        kv = self.kv_dtype.currentData() or "auto"
        if kv == _kv_choice(base.kv_cache_dtype):
            kv = base.kv_cache_dtype  # "fp8_e5m2" is shown as FP8 and kept as it was
        pinned = replace(
            base,
            kv_cache_dtype=kv,
            gpu_memory_utilization=None if self.util_auto.isChecked() else self.util.value(),
            enforce_eager=self.enforce_eager.isChecked(),
            language_model_only=self.language_only.isChecked(),
            **self.adapters.settings(),
        )
        return PlanRequest(goal, pinned, model_ref or "")

    def set_request(self, request: PlanRequest) -> None:
        """Fill the inputs (no goal_changed emitted)."""
        goal, pinned = request.goal, request.pinned
        self._suppress = True
        try:
            ids = [k for k, _ in USE_CASES]
            idx = ids.index(goal.use_case) if goal.use_case in ids else 0
            btn = self.use_case_group.button(idx)
            if btn is not None:
                btn.setChecked(True)
            i = self.context.findData(goal.context_tokens)
            if i >= 0:
                self.context.setCurrentIndex(i)
            else:
                self.context.setEditText(f"{goal.context_tokens:,}")
            self.users.setValue(goal.users)
            self.allow_4bit.setChecked(goal.allows_4bit)
            self._pinned_base = pinned
            self.kv_dtype.setCurrentIndex(max(0, self.kv_dtype.findData(
                _kv_choice(pinned.kv_cache_dtype))))
            self.util_auto.setChecked(pinned.gpu_memory_utilization is None)
            if pinned.gpu_memory_utilization is not None:
                self.util.setValue(pinned.gpu_memory_utilization)
            self.enforce_eager.setChecked(pinned.enforce_eager)
            self.language_only.setChecked(pinned.language_model_only)
            self.adapters.show_settings(pinned)
            self.set_model_ref(request.model_ref)
        finally:
            self._suppress = False

    def set_model_ref(self, ref: str) -> None:
        if not ref:
            self.model.setCurrentIndex(0)
            return
        i = self.model.findText(ref)
        if i < 0:
            self.model.addItem(ref, ref)
            i = self.model.count() - 1
        self.model.setCurrentIndex(i)

    def _use_case_clicked(self, index: int) -> None:
        """A use case picked: its context (long documents: 32k), then a replan."""
        key = USE_CASES[max(0, index)][0]
        tokens = USE_CASE_CONTEXT_TOKENS.get(key)
        if tokens is not None and self.context_tokens()[0] != tokens:
            found = self.context.findData(tokens)
            if found >= 0:
                self.context.setCurrentIndex(found)  # replans through currentTextChanged
            else:
                self.context.setEditText(f"{tokens:,}")
        self._changed()

    def _changed(self, *_: object) -> None:
        if not self._suppress:
            self._debounce.start()

    # ----------------------------------------------------------------- plans

    def set_status(self, text: str, color: str = theme.MUTED) -> None:
        self.status.setText(text)
        self.status.setStyleSheet(f"color: {color}")

    def set_plans(self, rows: Sequence[PlanRow], heading: str) -> None:
        """Show ranked plans (best first) and select the first that fits."""
        self.rows = list(rows)
        self.heading.setText(heading)
        first = next((i for i, row in enumerate(self.rows) if row.fits), 0 if self.rows else -1)
        # the table is silent while it is refilled and its first plan that fits selected; that
        # plan is then announced once (its budget detail drawn, its chart asked for), also when
        # the same row index stays selected
        with QSignalBlocker(self.table):
            self._fill_table()
            self.table.clearSelection()
            if first >= 0:
                self.table.selectRow(first)
        if first >= 0:
            self._on_selection()
        else:
            self._show_detail(None)
            self.plan_selected.emit(None)
        self.copy_button.setEnabled(first >= 0)
        self.export_button.setEnabled(first >= 0)

    def _fill_table(self) -> None:
        """One table row per plan of :attr:`rows`."""
        self.table.setRowCount(len(self.rows))
        for r, row in enumerate(self.rows):
            cap = row.capacity
            inputs = row.inputs
            mark = QTableWidgetItem("✓" if row.fits else "≈" if row.borderline else "✗")
            mark.setForeground(pg.mkColor(row.status_color))
            mark.setToolTip(row.reason or ("fits" if row.fits else "does not fit"))
            shown = row.fits or row.borderline
            self.table.setItem(r, 0, mark)
            title = QTableWidgetItem(row.title)
            title.setToolTip(row.reason or row.model_ref)
            self.table.setItem(r, 1, title)
            if inputs is None:
                cells = [row.quantization or "–"] + ["–"] * 8
            else:
                cells = [
                    row.quantization,
                    fmt.context(cap.max_model_len if cap else inputs.max_model_len),
                    str(cap.max_num_seqs if cap else inputs.max_num_seqs or "–"),
                    _kv_label(cap.kv_cache_dtype if cap else inputs.kv_cache_dtype, inputs),
                    f"{cap.gpu_memory_utilization:.2f}" if cap else "–",
                    fmt.tokens(cap.kv_cache_tokens) if cap and shown else "–",
                    _times(cap.max_concurrency) if cap and shown else "–",
                    f"~{significant(row.tokens_per_s)}" if row.tokens_per_s else "–",
                    _spare(row.kv_headroom_bytes),
                ]
            for c, text in enumerate(cells, start=2):
                item = QTableWidgetItem(text)
                if not row.fits and c == 2:
                    item.setToolTip(row.reason)
                self.table.setItem(r, c, item)
            if cap is not None and inputs is not None:
                bar = StackedBar(height=18)
                bar.set_segments(plan_segments(cap), inputs.gpu_total_bytes)
                self.table.setCellWidget(r, len(COLUMNS) - 1, bar)
            else:
                why = QTableWidgetItem(row.reason)
                why.setToolTip(row.reason)
                why.setForeground(pg.mkColor(theme.FAIL))
                self.table.setItem(r, len(COLUMNS) - 1, why)
            if not shown:
                for c in range(1, len(COLUMNS) - 1):
                    it = self.table.item(r, c)
                    if it is not None:
                        it.setForeground(pg.mkColor(theme.MUTED))

    def _measure_clicked(self) -> None:
        row = self.selected()
        if row is not None and row.inputs is not None:
            self.measure_requested.emit(row)

    def show_measuring(self, text: str, fraction: float | None) -> None:
        """The dry run's progress: ``text`` (phase, elapsed and expected seconds) and the share
        of the expected time gone (None: no estimate, a busy bar)."""
        self.measure_box.setVisible(True)
        self.measure_button.setEnabled(False)
        self.measure_cancel.setEnabled(True)
        if fraction is None:
            self.measure_progress.setRange(0, 0)
        else:
            self.measure_progress.setRange(0, 100)
            self.measure_progress.setValue(max(0, min(99, round(fraction * 100))))
        self.measure_text.setText(text)

    def measuring_done(self, text: str, color: str = theme.MUTED) -> None:
        """The dry run ended (``text`` says how); the button is back for the selected plan."""
        self.measure_progress.setRange(0, 100)
        self.measure_progress.setValue(100)
        self.measure_cancel.setEnabled(False)
        self.measure_text.setText(text)
        self.measure_text.setStyleSheet(f"color: {color}")
        row = self.selected()
        self.measure_button.setEnabled(row is not None and row.inputs is not None)

    def selected(self) -> PlanRow | None:
        idx = self.table.currentRow()
        if 0 <= idx < len(self.rows):
            return self.rows[idx]
        return None

    def _on_selection(self) -> None:
        row = self.selected()
        self._show_detail(row)
        self.copy_button.setEnabled(row is not None)
        self.export_button.setEnabled(row is not None)
        self.measure_button.setEnabled(
            row is not None and row.inputs is not None and not self.measure_cancel.isEnabled()
        )
        self.plan_selected.emit(row)

    def _on_double_click(self, r: int, _c: int) -> None:
        if 0 <= r < len(self.rows) and self.rows[r].launchable:
            self.launch_requested.emit(self.rows[r])

    def _show_detail(self, row: PlanRow | None) -> None:
        self.detail.setRowCount(0)
        if row is None or row.capacity is None:
            self.detail_title.setText("Budget of the selected plan")
            return
        cap = row.capacity
        title = f"Budget: {row.title}"
        if cap.inputs.get("architecture_known") is False:
            title += f" — {UNKNOWN_ARCHITECTURE_NOTE}"
        self.detail_title.setText(title)
        terms = list(cap.terms)
        extra = [("verdict", verdict_text(cap))] if hasattr(cap, "verdict") else []
        if row.reason:
            extra.append(("why", row.reason))
        extra += self._quality_lines(row)
        self.detail.setRowCount(len(terms) + len(extra))
        for r, term in enumerate(terms):
            self.detail.setItem(r, 0, QTableWidgetItem(term.name.replace("_", " ")))
            value = QTableWidgetItem(f"{term.bytes / fmt.GIB:.2f}")
            value.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.detail.setItem(r, 1, value)
            self.detail.setItem(r, 2, QTableWidgetItem(term.source))
            note = QTableWidgetItem(term.note)
            note.setToolTip(term.note)
            self.detail.setItem(r, 3, note)
        for r, (label, text) in enumerate(extra, start=len(terms)):
            self.detail.setItem(r, 0, QTableWidgetItem(label))
            note = QTableWidgetItem(text)
            note.setToolTip(text)
            self.detail.setItem(r, 3, note)

    def _quality_lines(self, row: PlanRow) -> list[tuple[str, str]]:
        """The selected plan's published quality figure with its source, and why it ranks
        above the next plan (none for a plan the recommender did not rank)."""
        from kvpilot.core.app.recommend import quality_notes

        at = next((i for i, r in enumerate(self.rows) if r is row), -1)
        below = self.rows[at + 1].source if 0 <= at < len(self.rows) - 1 else None
        return quality_notes(row.source, below)

    # ----------------------------------------------------------------- chart

    def set_feasibility(
        self, contexts: Sequence[int], by_dtype: dict[str, list[float]], goal: Goal, note: str
    ) -> None:
        """Curves of max users per context for 16-bit and fp8 KV, and the goal point."""
        x = np.asarray(contexts, dtype=float)
        for key, curve in (("auto", self.curve_bf16), ("fp8", self.curve_fp8)):
            y = np.asarray(by_dtype.get(key, []), dtype=float)
            if y.size != x.size:
                curve.setData([], [])
                continue
            curve.setData(x, y, connect="finite")
        self.goal_marker.setData([float(goal.context_tokens)], [float(goal.users)])
        finite = [v for vals in by_dtype.values() for v in vals if math.isfinite(v)]
        top = max([*finite, float(goal.users)], default=1.0)
        self.chart.getPlotItem().setYRange(0, top * 1.1 + 0.5, padding=0)
        self.chart_note.setText(note)

    def clear_feasibility(self, note: str = "") -> None:
        self.curve_bf16.setData([], [])
        self.curve_fp8.setData([], [])
        self.goal_marker.setData([], [])
        self.chart_note.setText(note)


def _kv_choice(dtype: str) -> str:
    """The KV cache box's entry for a profile's ``--kv-cache-dtype`` ("fp8_e4m3" -> "fp8";
    one the box does not list -> "auto")."""
    if dtype in ("auto", "fp8", "nvfp4"):
        return dtype
    return "fp8" if dtype.startswith("fp8") else "auto"


def _kv_label(dtype: str, inputs: PlanInputs | None) -> str:
    if dtype in ("auto", None, ""):
        model = getattr(inputs, "model", None)
        return (
            getattr(model, "torch_dtype", "auto")
            .replace("bfloat16", "bf16")
            .replace("float16", "fp16")
        )
    return str(dtype)


def _spare(kv_headroom_bytes: int | None) -> str:
    """The KV cache left once the goal's users have theirs: ``"3.20 GiB"``, ``"short 1.10 GiB"``."""
    if kv_headroom_bytes is None:
        return "–"
    if kv_headroom_bytes < 0:
        return f"short {fmt.gib(-kv_headroom_bytes)}"
    return fmt.gib(kv_headroom_bytes)


def _times(x: float) -> str:
    return times_text(x, "×")


def verdict_text(cap: Capacity) -> str:
    """``fits: KV 7.19-7.55 GiB (validation band)`` for the detail table."""
    low, high = cap.available_kv_band_bytes
    return (f"{Verdict(cap.verdict).words}: vLLM's KV memory {low / fmt.GIB:.2f} to "
            f"{high / fmt.GIB:.2f} GiB (validation band of this vLLM release)")
