"""GPU panel: the card in one line and its memory as a stacked bar.

The bar splits the card's memory into other processes (named), driver-reserved memory, and,
while a server runs, vLLM's weights, activation + CUDA graphs and KV cache, then free memory.
Without a running server the selected plan is drawn inside the free part ("planned").
Without a GPU the panel offers the spec table: the planner then plans for the chosen card.

Signals:
    planner_gpu_changed(str): the user picked a card from the spec table (planner mode).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from kvpilot.core.fit.budget import overhead_bytes
from kvpilot.gui import format as fmt
from kvpilot.gui import theme
from kvpilot.gui.widgets import Segment, StackedBar

#: parts smaller than this are left out of the legend (they would read "0.0 GiB")
MIN_SHOWN_BYTES = 48 << 20


@dataclass(frozen=True)
class VramSplit:
    """Where the card's memory is, in bytes, for the bar (``other`` maps name -> bytes)."""

    total: int
    other: tuple[tuple[str, int], ...]
    reserved: int
    weights: int
    activation: int
    kv: int
    free: int
    planned: bool  # the vLLM parts are a plan, not a running server


def _short_name(name: str | None, pid: int) -> str:
    name = name or ""
    if "/" in name:
        name = name.rsplit("/", 1)[-1]
    return name or f"pid {pid}"


def process_bytes(gpu: Any) -> dict[int, int | None]:
    """pid -> bytes from a probe snapshot (``processes``) or a sampler sample."""
    procs = getattr(gpu, "processes", None)
    if procs is not None:
        return {p.pid: p.used_bytes for p in procs}
    return dict(getattr(gpu, "process_used_bytes", {}) or {})


def split_vram(
    gpu: Any,
    vllm_pids: Collection[int] = (),
    capacity: Any | None = None,
    names: Mapping[int, str] | None = None,
) -> VramSplit | None:
    """Split a GPU snapshot's (or sample's) memory for the bar.

    ``capacity`` (a :class:`~kvpilot.core.fit.plan.Capacity` or the server's reported capacity)
    gives the weights and KV sizes: the ones vLLM reported while a server runs (``vllm_pids``
    non-empty), else the selected plan's. ``names`` maps pid -> process name.
    """
    total = getattr(gpu, "memory_total_bytes", None)
    if not total:
        return None
    names = dict(names or {})
    for proc in getattr(gpu, "processes", ()) or ():
        names.setdefault(proc.pid, proc.name or "")
    used = gpu.memory_used_bytes or 0
    free = gpu.memory_free_bytes if gpu.memory_free_bytes is not None else max(0, total - used)
    reserved = gpu.memory_reserved_bytes or 0
    others: dict[str, int] = {}
    vllm_used = 0
    attributed = 0
    for pid, n in process_bytes(gpu).items():
        if n is None:
            continue
        attributed += n
        if pid in vllm_pids:
            vllm_used += n
        else:
            key = _short_name(names.get(pid), pid)
            others[key] = others.get(key, 0) + n
    rest = max(0, used - attributed)  # contexts, WSL2 (no per-process memory), other namespaces
    weights = activation = kv = 0
    running = bool(vllm_pids)
    if running:
        if vllm_used == 0 and rest > 0 and capacity is not None:
            # per-process memory not reported (WSL2): attribute the plan's share of the rest
            vllm_used = min(rest, getattr(capacity, "requested_bytes", rest) or rest)
            rest -= vllm_used
        w_bytes = getattr(capacity, "weights_bytes", None) if capacity is not None else None
        kv_bytes = getattr(capacity, "available_kv_bytes", None) if capacity is not None else None
        if w_bytes is not None or kv_bytes is not None:
            weights = min(vllm_used, w_bytes or 0)
            kv = min(vllm_used - weights, kv_bytes or 0)
            activation = vllm_used - weights - kv
        else:
            activation = vllm_used
    if rest >= MIN_SHOWN_BYTES:
        others["other (unattributed)"] = others.get("other (unattributed)", 0) + rest
    planned = False
    if not running and capacity is not None and hasattr(capacity, "activation_peak_bytes"):
        planned = True
        weights = min(free, capacity.weights_bytes)
        activation = min(free - weights, overhead_bytes(capacity))
        kv = min(free - weights - activation, max(0, capacity.available_kv_bytes))
        free = free - weights - activation - kv
    ordered = tuple(sorted(others.items(), key=lambda kv_: -kv_[1]))
    return VramSplit(total, ordered, reserved, weights, activation, kv, free, planned)


def segments_for(split: VramSplit) -> list[Segment]:
    """The stacked-bar segments for a split (other processes first, free last)."""
    segs: list[Segment] = []
    if split.reserved:
        segs.append(Segment("driver", split.reserved, theme.MEM_RESERVED, "reserved by the driver"))
    for name, n in split.other:
        segs.append(Segment(name, n, theme.MEM_OTHER, "another process on this GPU"))
    tag = "planned " if split.planned else ""
    segs.append(Segment(f"{tag}weights", split.weights, theme.MEM_WEIGHTS, "model weights"))
    segs.append(
        Segment(
            f"{tag}act+graphs",
            split.activation,
            theme.MEM_ACTIVATION,
            "activation peak, CUDA graphs and non-torch memory",
        )
    )
    segs.append(Segment(f"{tag}KV", split.kv, theme.MEM_KV, "KV cache"))
    segs.append(Segment("free", split.free, theme.MEM_FREE, "free memory"))
    return segs


class GpuPanel(QWidget):
    """The card line, the VRAM bar, the per-process legend and the start-up warning."""

    planner_gpu_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QLabel("GPU: probing…")
        self.title.setObjectName("gpuTitle")
        self.title.setStyleSheet("font-weight: 600")
        self.title.setWordWrap(True)
        self.spec_combo = QComboBox()
        self.spec_combo.setToolTip("Plan for this card (no GPU was found on this machine)")
        self.spec_combo.setVisible(False)
        self.spec_combo.currentTextChanged.connect(self._on_spec_changed)
        self.bar = StackedBar()
        self.legend = QLabel("")
        self.legend.setWordWrap(True)
        self.warning = QLabel("")
        self.warning.setWordWrap(True)
        self.warning.setVisible(False)
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.spec_combo)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 4, 6, 4)
        lay.setSpacing(3)
        lay.addLayout(top)
        lay.addWidget(self.bar)
        lay.addWidget(self.legend)
        lay.addWidget(self.warning)
        self._gpu: Any | None = None
        self._vllm_pids: frozenset[int] = frozenset()
        self._capacity: Any | None = None
        self._startup_note = ""
        self._names: dict[int, str] = {}

    # ----------------------------------------------------------------- inputs

    def show_probe(self, result: Any, gpu: Any | None) -> None:
        """A probe result: the card line for ``gpu`` or the problem and planner mode."""
        if gpu is None:
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

    def update_sample(self, gpu: Any) -> None:
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

    def set_server(self, vllm_pids: Collection[int], capacity: Any | None) -> None:
        """The running server's process ids and the capacity it reported (empty: none)."""
        self._vllm_pids = frozenset(vllm_pids)
        if capacity is not None or not vllm_pids:
            self._capacity = capacity
        self._redraw()

    def set_plan(self, capacity: Any | None) -> None:
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
        self.bar.set_segments(segments_for(split), split.total)
        names = [f"{name} {fmt.gib_num(n)}" for name, n in split.other if n >= MIN_SHOWN_BYTES]
        vllm_total = split.weights + split.activation + split.kv
        if split.planned:
            names.append(f"plan needs {fmt.gib_num(vllm_total)} GiB")
        elif self._vllm_pids:
            names.append(
                f"vLLM {fmt.gib_num(vllm_total)} GiB"
                if vllm_total >= MIN_SHOWN_BYTES
                else "vLLM holds no memory on this GPU"
            )
        names.append(f"free {fmt.gib_num(split.free)} GiB")
        self.legend.setText(" · ".join(names))

    def _on_spec_changed(self, name: str) -> None:
        if name:
            self.planner_gpu_changed.emit(name)
