"""Benchmark dialog: run the core load test against the running server and show percentiles.

The load test (:func:`kvpilot.core.vllm.client.run_load_test`) runs on the thread pool; its
progress callbacks come back through the bridge's ``load_progress`` signal and Cancel sets the
test's cancel event. Results: one row per concurrency level, with the GPU's J/token, mean power
and throttling during the level (:mod:`kvpilot.core.hardware.energy`, the figures ``kvpilot bench``
prints) and the throttle sentence in the status when a level ran on a slowed card.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QProgressBar,
    QSpinBox,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from kvpilot.core.app.loadtest import report_gpu_words
from kvpilot.core.base.errors import KvpilotError
from kvpilot.gui import format as fmt
from kvpilot.gui import theme
from kvpilot.gui.bridge import CoreBridge
from kvpilot.gui.widgets.small import push_button, wrapped_label
from kvpilot.gui.widgets.tables import read_only_table
from kvpilot.gui.workers import run_in_pool

if TYPE_CHECKING:
    from kvpilot.core.vllm.client import LoadTestProgress, LoadTestReport

RESULT_COLUMNS = (
    "users",
    "ok / errors",
    "TTFT P50",
    "TTFT P99",
    "TPOT P50",
    "TPOT P99",
    "output tok/s",
    "goodput req/s",
    "meets goal",
    "J/token",
    "GPU W",
    "throttled",
)
#: the GPU columns' explanation (the same core figures ``kvpilot bench`` prints per level)
GPU_TIP = (
    "Energy per generated token and the mean power draw during the level (NVML's energy "
    "counter where the driver has one, else the sampled power integrated), and whether a "
    "clock-event reason slowed the card (power cap, thermal, hardware slowdown). '-': no GPU "
    "samples (no NVIDIA GPU, or a server on another machine)."
)


class BenchmarkDialog(QDialog):
    """Configure, run, cancel and read a load test.

    Args:
        base_url: the server root (``http://127.0.0.1:8000``).
        model: the served model name.
        bridge: delivers progress from the worker thread.
        runner: ``(config, on_progress, cancel_event) -> report`` (the core's run_load_test).
        config_factory: ``(**fields) -> LoadTestConfig``.
        api_key: sent as a bearer token when set.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        bridge: CoreBridge,
        runner: Callable[..., Any],
        config_factory: Callable[..., Any],
        parent: QWidget | None = None,
        *,
        api_key: str | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Benchmark the running server")
        self.setObjectName("benchmarkDialog")
        self._base_url = base_url
        self._model = model
        self._runner = runner
        self._config_factory = config_factory
        self._api_key = api_key
        self._cancel: threading.Event | None = None
        self.report: Any | None = None
        self._emit = bridge.emitter("load_progress")
        bridge.load_progress.connect(self._on_progress)

        form = QFormLayout()
        self.levels = QLineEdit("1, 2, 4, 8")
        self.levels.setToolTip("Concurrent users to test, one level after the other")
        form.addRow("Users per level", self.levels)
        self.prompt_tokens = QSpinBox()
        self.prompt_tokens.setRange(1, 1_000_000)
        self.prompt_tokens.setValue(256)
        form.addRow("Prompt tokens", self.prompt_tokens)
        self.output_tokens = QSpinBox()
        self.output_tokens.setRange(1, 100_000)
        self.output_tokens.setValue(128)
        form.addRow("Output tokens", self.output_tokens)
        self.requests = QSpinBox()
        self.requests.setRange(1, 10_000)
        self.requests.setValue(16)
        form.addRow("Requests per level", self.requests)
        self.start_button = push_button("Start", on_click=self.start)
        self.cancel_button = push_button("Cancel", on_click=self.cancel, enabled=False)
        self.progress = QProgressBar()
        self.progress.setFormat("%v / %m requests")
        self.status = wrapped_label(f"Target: {base_url} · model {model}")
        self.table = read_only_table("benchmarkResults", RESULT_COLUMNS)
        for c in range(len(RESULT_COLUMNS) - 3, len(RESULT_COLUMNS)):
            header_item = self.table.horizontalHeaderItem(c)
            if header_item is not None:
                header_item.setToolTip(GPU_TIP)
        buttons = QHBoxLayout()
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        lay = QVBoxLayout(self)
        lay.addLayout(form)
        lay.addLayout(buttons)
        lay.addWidget(self.progress)
        lay.addWidget(self.status)
        lay.addWidget(self.table, 1)
        self.resize(1000, 420)

    def _levels(self) -> tuple[int, ...]:
        out = []
        for part in self.levels.text().replace(";", ",").split(","):
            part = part.strip()
            if part:
                out.append(int(part))
        if not out or any(n < 1 for n in out):
            raise ValueError("give positive numbers of users, e.g. 1, 2, 4")
        return tuple(out)

    def start(self) -> bool:
        """Start the load test on the pool (False with the reason shown if the input is bad)."""
        try:
            levels = self._levels()
            config = self._config_factory(
                base_url=self._base_url,
                model=self._model,
                concurrency_levels=levels,
                prompt_tokens=self.prompt_tokens.value(),
                output_tokens=self.output_tokens.value(),
                requests_per_level=self.requests.value(),
                api_key=self._api_key,
            )
            validate = getattr(config, "validate", None)
            if validate is not None:
                validate()  # bad settings are told here, before anything runs
        except KvpilotError as exc:
            self._set_status(exc.message, theme.FAIL)
            return False
        except (ValueError, TypeError) as exc:
            self._set_status(str(exc), theme.FAIL)
            return False
        self._cancel = threading.Event()
        cancel = self._cancel
        self.report = None
        self.table.setRowCount(0)
        self.progress.setRange(0, self.requests.value() * len(levels))
        self.progress.setValue(0)
        self.start_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self._set_status("running…", theme.INFO)
        emit = self._emit
        runner = self._runner
        run_in_pool(lambda: runner(config, emit, cancel), self._on_done, self._on_error, owner=self)
        return True

    def cancel(self) -> None:
        if self._cancel is not None:
            self._cancel.set()
            self._set_status("cancelling…", theme.TIGHT)

    def _on_progress(self, p: LoadTestProgress) -> None:
        per_level = self.requests.value()
        self.progress.setValue(
            min(self.progress.maximum(), p.level_index * per_level + p.completed)
        )
        self._set_status(
            f"level {p.level_index + 1}/{p.levels_total}: {p.concurrency} users, "
            f"{p.completed}/{p.planned} done, {p.errors} errors, {p.elapsed_s:.0f} s",
            theme.INFO,
        )

    def _on_done(self, report: LoadTestReport) -> None:
        self.report = report
        self.start_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        self.table.setRowCount(len(report.levels))
        gpu_words = report_gpu_words(report)
        for r, (lv, words) in enumerate(zip(report.levels, gpu_words.levels, strict=True)):
            cells = [
                str(lv.concurrency),
                f"{lv.requests_ok} / {lv.errors}",
                fmt.latency(lv.ttft_p50_s),
                fmt.latency(lv.ttft_p99_s),
                fmt.latency(lv.tpot_p50_s),
                fmt.latency(lv.tpot_p99_s),
                f"{lv.output_tokens_per_s:,.0f}",
                f"{lv.goodput_per_s:.2f}",
                "yes" if lv.meets_slo_p99 else "no",
                *words.cells,
            ]
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if c == len(cells) - 1 and words.throttled:
                    item.setForeground(QBrush(QColor(theme.FAIL)))
                if c >= len(cells) - 3 and words.line:
                    item.setToolTip(words.line)
                self.table.setItem(r, c, item)
        note = "cancelled; finished levels shown" if getattr(report, "cancelled", False) else "done"
        if report.slo_break_concurrency is not None:
            note += (
                f" · goal first missed at {report.slo_break_concurrency} users "
                f"({report.slo_break_reason})"
            )
        if report.server_lost is not None:
            self._set_status(f"stopped early: {report.server_lost}", theme.FAIL)
            return
        throttled = gpu_words.throttle_note
        if throttled is not None:  # a hot card's numbers are not the configuration's
            self._set_status(f"{note} · {throttled}", theme.TIGHT)
            return
        self._set_status(note, theme.OK)

    def _on_error(self, exc: BaseException) -> None:
        self.start_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        message = getattr(exc, "message", None) or str(exc)
        self._set_status(f"benchmark failed: {message}", theme.FAIL)

    def _set_status(self, text: str, color: str) -> None:
        self.status.setText(text)
        self.status.setStyleSheet(f"color: {color}")
