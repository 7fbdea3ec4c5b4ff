"""GPU panel: the card in one line and its memory as a stacked bar.

The bar draws core's split of the card's memory (:mod:`kvpilot.core.app.vram`): other processes
(named), driver-reserved memory, and, while a server runs, vLLM's weights, activation + CUDA graphs
and KV cache, then free memory. Without a running server the selected plan is drawn inside the
free part ("planned").
Without a GPU the panel offers the spec table: the planner then plans for the chosen card.

Signals:
    planner_gpu_changed(str): the user picked a card from the spec table (planner mode).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QWidget

from kvpilot.core.app.vram import MIN_SHOWN_BYTES, VramSplit, process_bytes, split_vram
from kvpilot.gui import format as fmt
from kvpilot.gui import theme
from kvpilot.gui.widgets.layouts import column_layout, row_layout
from kvpilot.gui.widgets.small import Segment, StackedBar, wrapped_label

if TYPE_CHECKING:
    from kvpilot.core.app.vram import ReportedMemory
    from kvpilot.core.base.plan import Capacity
    from kvpilot.core.hardware.probe import GpuSnapshot, ProbeResult
    from kvpilot.core.hardware.sampler import GpuSample

def segments_for(split: VramSplit) -> list[Segment]:
    """The stacked-bar segments for a split (other processes first, free last)."""
    segs: list[Segment] = []
    if split.reserved_bytes:
        segs.append(
            Segment("driver", split.reserved_bytes, theme.MEM_RESERVED, "reserved by the driver")
        )
    for name, n in split.other_bytes:
        segs.append(Segment(name, n, theme.MEM_OTHER, "another process on this GPU"))
    tag = "planned " if split.planned else ""
    segs.append(Segment(f"{tag}weights", split.weights_bytes, theme.MEM_WEIGHTS, "model weights"))
    segs.append(
        Segment(
            f"{tag}act+graphs",
            split.activation_bytes,
            theme.MEM_ACTIVATION,
            "activation peak, CUDA graphs and non-torch memory",
        )
    )
    segs.append(Segment(f"{tag}KV", split.kv_bytes, theme.MEM_KV, "KV cache"))
    segs.append(Segment("free", split.free_bytes, theme.MEM_FREE, "free memory"))
    return segs


class GpuPanel(QWidget):
    """The card line, the VRAM bar, the per-process legend and the start-up warning."""

    planner_gpu_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = wrapped_label("GPU: probing…", name="gpuTitle", heading=True)
        self.spec_combo = QComboBox()
        self.spec_combo.setToolTip("Plan for this card (no GPU was found on this machine)")
        self.spec_combo.setVisible(False)
        self.spec_combo.currentTextChanged.connect(self._on_spec_changed)
        self.bar = StackedBar()
        self.legend = wrapped_label()
        self.warning = wrapped_label()
        self.warning.setVisible(False)
        top = row_layout((self.title, 1), self.spec_combo)
        column_layout(self, top, self.bar, self.legend, self.warning, margins_px=(6, 4, 6, 4),
                      spacing_px=3)
        self._gpu: GpuSnapshot | GpuSample | None = None
        self._vllm_pids: frozenset[int] = frozenset()
        self._capacity: Capacity | ReportedMemory | None = None
        self._startup_note = ""
        self._names: dict[int, str] = {}

    # ----------------------------------------------------------------- inputs

    def show_probe(self, result: ProbeResult | None, gpu: GpuSnapshot | None) -> None:
        """A probe result: the card line for ``gpu`` or the problem and planner mode."""
        if gpu is None or result is None:
            problem = getattr(result, "error", None)
            why = problem.message if problem is not None else "no NVIDIA GPU found"
            fix = f" — {problem.action}" if problem is not None and problem.action else ""
            self.title.setText(f"No GPU: {why}{fix}. Planning for:")
            self.title.setStyleSheet(f"font-weight: 600; color: {theme.FAIL}")
            self.title.setWordWrap(True)
            self.spec_combo.setVisible(True)
            self.bar.set_segments([])
            self.bar.setVisible(False)  # nothing measured: each plan shows its own bar
            self.legend.setText("")
            return
        self.spec_combo.setVisible(False)
        self.bar.setVisible(True)
        cc = gpu.compute_capability
        parts = [
            gpu.name or "unknown GPU",
            f"driver {result.driver_version}" if result.driver_version else None,
            f"CUDA {result.cuda_driver_version}" if result.cuda_driver_version else None,
            f"sm_{cc[0]}{cc[1]}" if cc else None,
            fmt.gib(gpu.memory_total_bytes, 1),
        ]
        source = getattr(result, "source", "nvml")
        if source and source != "nvml":
            parts.append(f"({source})")
        self.title.setText("GPU  " + " · ".join(p for p in parts if p))
        self.title.setStyleSheet("font-weight: 600")
        self.update_sample(gpu)

    def set_spec_names(self, names: Sequence[str], current: str | None = None) -> None:
        """Fill the planner-mode card list (spec table names)."""
        self.spec_combo.blockSignals(True)
        self.spec_combo.clear()
        self.spec_combo.addItems(list(names))
        if current and current in names:
            self.spec_combo.setCurrentText(current)
        self.spec_combo.blockSignals(False)

    def update_sample(self, gpu: GpuSnapshot | GpuSample) -> None:
        """A fresh GPU snapshot (from the sampler or a probe); probes also refresh names."""
        for proc in getattr(gpu, "processes", ()) or ():
            self._names[proc.pid] = proc.name or ""
        self._gpu = gpu
        self._redraw()

    def unknown_pids(self) -> set[int]:
        """Pids in the last sample whose name is not known yet (a probe refreshes them)."""
        if self._gpu is None:
            return set()
        return set(process_bytes(self._gpu)) - set(self._names) - set(self._vllm_pids)

    def set_server(
        self, vllm_pids: Collection[int], capacity: Capacity | ReportedMemory | None
    ) -> None:
        """The running server's process ids and the capacity it reported (empty: none)."""
        self._vllm_pids = frozenset(vllm_pids)
        if capacity is not None or not vllm_pids:
            self._capacity = capacity
        self._redraw()

    def set_plan(self, capacity: Capacity | None) -> None:
        """The selected plan's predicted budget (drawn as 'planned' while no server runs)."""
        if not self._vllm_pids:
            self._capacity = capacity
            self._redraw()

    def set_startup_limit(self, text: str, warn: bool) -> None:
        """The "at most gpu_memory_utilization X will start" line (amber when ``warn``)."""
        self._startup_note = text
        self.warning.setText(text)
        color = theme.TIGHT if warn else theme.MUTED
        self.warning.setStyleSheet(f"color: {color}")
        self.warning.setVisible(bool(text))

    # ----------------------------------------------------------------- drawing

    def _redraw(self) -> None:
        if self._gpu is None:
            return
        split = split_vram(self._gpu, self._vllm_pids, self._capacity, self._names)
        if split is None:
            self.bar.set_segments([])
            self.legend.setText("memory not reported by this GPU")
            return
        self.bar.set_segments(segments_for(split), split.total_bytes)
        names = [
            f"{name} {fmt.gib_num(n)}" for name, n in split.other_bytes if n >= MIN_SHOWN_BYTES
        ]
        vllm_total = split.vllm_bytes
        if split.planned:
            names.append(f"plan needs {fmt.gib_num(vllm_total)} GiB")
        elif self._vllm_pids:
            names.append(
                f"vLLM {fmt.gib_num(vllm_total)} GiB"
                if vllm_total >= MIN_SHOWN_BYTES
                else "vLLM holds no memory on this GPU"
            )
        names.append(f"free {fmt.gib_num(split.free_bytes)} GiB")
        self.legend.setText(" · ".join(names))

    def _on_spec_changed(self, name: str) -> None:
        if name:
            self.planner_gpu_changed.emit(name)
