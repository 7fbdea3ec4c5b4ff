"""Runs side by side: one table that ``kvpilot runs compare`` prints and the Runs view shows.

:func:`compare` lines two or more :class:`~kvpilot.core.runs.record.RunRecord` up row by row:
what was launched, predicted and reported capacity, the start-up time, and for every concurrency
any of them was load-tested at, output tokens/s, TTFT and TPOT P50/P99 and J/token (the newest
test's level at that concurrency). Each numeric row says whether higher or lower is better, so
that a face can mark the best run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.runs.record import LevelSummary, RunRecord

Cell = float | int | str | None
HIGHER = "higher"
LOWER = "lower"


@dataclass(frozen=True)
class ComparisonRow:
    """One line: ``label``, ``unit`` ("" for text), one value per run, and ``better``
    (``higher``, ``lower`` or None when not a figure of merit)."""

    label: str
    unit: str
    values: tuple[Cell, ...]
    better: str | None = None
    group: str = ""

    def best_index(self) -> int | None:
        """The run with the best value (None: not a figure of merit, fewer than two values,
        or all equal)."""
        numbers = [(i, float(v)) for i, v in enumerate(self.values)
                   if isinstance(v, int | float) and not isinstance(v, bool)]
        if self.better is None or len(numbers) < 2 or len({v for _, v in numbers}) == 1:
            return None  # nothing to choose between
        pick = max if self.better == HIGHER else min
        return pick(numbers, key=lambda p: p[1])[0]


@dataclass(frozen=True)
class Comparison:
    """The runs compared (their ids, in order) and the rows."""

    run_ids: tuple[str, ...]
    rows: tuple[ComparisonRow, ...]

    def row(self, label: str) -> ComparisonRow:
        """The row called ``label``.

        Raises:
            KeyError: no such row.
        """
        for r in self.rows:
            if r.label == label:
                return r
        raise KeyError(label)

    def to_json(self) -> dict[str, object]:
        return {
            "runs": list(self.run_ids),
            "rows": [{"label": r.label, "unit": r.unit, "group": r.group, "better": r.better,
                      "values": list(r.values), "best": r.best_index()} for r in self.rows],
        }


def _level_row(
    runs: Sequence[RunRecord], c: int, label: str, unit: str, better: str | None,
    pick: Callable[[LevelSummary], Cell],
) -> ComparisonRow:
    values = []
    for run in runs:
        level = run.levels_by_concurrency().get(c)
        values.append(pick(level) if level is not None else None)
    return ComparisonRow(f"{label} @ {c}", unit, tuple(values), better, f"{c} users")


def compare(runs: Sequence[RunRecord], *, minimum: int = 2) -> Comparison:
    """The side-by-side table of ``runs`` (in the order given); ``minimum`` 1 lets a face show
    one run in the same rows.

    Raises:
        KvpilotError: fewer than ``minimum`` runs.
    """
    if len(runs) < max(1, minimum):
        raise KvpilotError("compare needs two runs or more; `kvpilot runs` lists them")

    def text(get: Callable[[RunRecord], Cell]) -> tuple[Cell, ...]:
        return tuple(get(r) for r in runs)

    # what was measured first (it is why runs are compared), then what was launched
    rows = [
        ComparisonRow("KV tokens predicted", "tokens",
                      text(lambda r: r.predicted.get("kv_cache_tokens")), HIGHER, "capacity"),
        ComparisonRow("KV tokens reported", "tokens",
                      text(lambda r: r.reported.get("kv_cache_tokens")), HIGHER, "capacity"),
        ComparisonRow("max concurrency predicted", "x",
                      text(lambda r: r.predicted.get("max_concurrency")), HIGHER, "capacity"),
        ComparisonRow("max concurrency reported", "x",
                      text(lambda r: r.reported.get("max_concurrency")), HIGHER, "capacity"),
        ComparisonRow("start-up", "s", text(lambda r: r.startup_s), LOWER, "capacity"),
    ]
    levels = sorted({c for r in runs for c in r.levels_by_concurrency()})
    for c in levels:
        rows += [
            _level_row(runs, c, "output tokens/s", "tokens/s", HIGHER,
                       lambda lv: lv.output_tokens_per_s),
            _level_row(runs, c, "TTFT P50", "s", LOWER, lambda lv: lv.ttft_p50_s),
            _level_row(runs, c, "TTFT P99", "s", LOWER, lambda lv: lv.ttft_p99_s),
            _level_row(runs, c, "TPOT P50", "s", LOWER, lambda lv: lv.tpot_p50_s),
            _level_row(runs, c, "TPOT P99", "s", LOWER, lambda lv: lv.tpot_p99_s),
            _level_row(runs, c, "J/token", "J", LOWER, lambda lv: lv.j_per_token),
            _level_row(runs, c, "throttled", "", None, _throttle_words),
        ]
    for name, label, unit, better in (("power_w", "mean power", "W", LOWER),
                                      ("temperature_c", "max temperature", "°C", LOWER),
                                      ("generation_tokens_per_s", "mean tokens/s", "tokens/s",
                                       HIGHER)):
        stat = "max" if label.startswith("max") else "mean"
        values = tuple(_stat(r, name, stat) for r in runs)
        if any(v is not None for v in values):
            rows.append(ComparisonRow(label, unit, values, better, "telemetry"))
    for name in ("max_model_len", "max_num_seqs", "kv_cache_dtype", "gpu_memory_utilization",
                 "kv_cache_memory_bytes", "quantization", "enforce_eager",
                 "tensor_parallel_size"):
        values = tuple(_setting(r, name) for r in runs)
        if any(v is not None for v in values):
            rows.append(ComparisonRow(name, "", values, group="settings"))
    rows += [
        ComparisonRow("model", "", text(lambda r: r.model), group="launch"),
        ComparisonRow("profile", "", text(lambda r: r.profile or "-"), group="launch"),
        ComparisonRow("started", "", text(lambda r: r.started_at), group="launch"),
        ComparisonRow("ended", "", text(lambda r: r.state + (f" ({r.failure_kind})"
                                                             if r.failure_kind else "")),
                      group="launch"),
        ComparisonRow("vLLM", "", text(lambda r: r.runtime_version), group="launch"),
    ]
    return Comparison(tuple(r.id for r in runs), tuple(rows))


def _throttle_words(level: LevelSummary) -> Cell:
    """"no", or the reasons that slowed the card ("power cap, thermal"); None: not reported."""
    if level.throttled is None:
        return None
    if not level.throttled:
        return "no"
    return ", ".join(level.throttle_reasons) or "yes"


def _stat(run: RunRecord, series: str, stat: str) -> Cell:
    summary = run.telemetry.get(series)
    return None if summary is None else summary.max if stat == "max" else summary.mean


def _setting(run: RunRecord, name: str) -> Cell:
    value = run.settings.get(name)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return value if isinstance(value, int | float | str) else None


def format_cell(value: Cell, unit: str) -> str:
    """A cell as text: numbers to 3-4 significant figures with the unit, "-" for none."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if unit == "tokens" and isinstance(value, int | float):
        return f"{int(value):,}"
    if unit == "s" and isinstance(value, int | float):
        if value >= 1:
            return f"{value:.2f} s"
        ms = value * 1000
        return f"{ms:.1f} ms" if ms < 10 else f"{ms:.0f} ms"
    if isinstance(value, float):
        text = f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"
    else:
        text = f"{value:,}"
    return f"{text} {unit}".rstrip() if unit not in ("", "x") else (
        f"{text}x" if unit == "x" else text)


def format_comparison(table: Comparison) -> str:
    """The table as aligned text, the best value of each figure of merit marked ``*``."""
    header = ["", *table.run_ids]
    lines = [header]
    group = None
    for row in table.rows:
        if row.group != group:
            group = row.group
            lines.append([f"[{group}]", *([""] * len(table.run_ids))])
        best = row.best_index()
        cells = [format_cell(v, row.unit) + (" *" if i == best else "")
                 for i, v in enumerate(row.values)]
        lines.append([row.label, *cells])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                     for line in lines)
