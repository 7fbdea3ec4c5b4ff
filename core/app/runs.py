"""The runs kept: list them, read some by id, and compare them side by side.

``kvpilot runs`` and the window's Runs tab both call these: the records are read from the one
run store in the data folder (:class:`~kvpilot.core.runs.store.RunStore`), and a comparison is
:func:`~kvpilot.core.runs.compare.compare` with each cell already in words
(:func:`~kvpilot.core.runs.compare.format_cell`), the best value of each row marked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kvpilot.core.base import paths
from kvpilot.core.runs.compare import Comparison, compare, format_cell
from kvpilot.core.runs.record import RunRecord
from kvpilot.core.runs.store import RunList, RunStore


@dataclass(frozen=True)
class ComparedRow:
    """One figure across the runs: its ``label``, each run's value in words (``cells``, in the
    runs' order), the column of the best value (``best``, None: nothing to choose between) and
    which way is better (``better``: ``higher``, ``lower`` or None)."""

    label: str
    cells: tuple[str, ...]
    best: int | None
    better: str | None


@dataclass(frozen=True)
class RunsCompared:
    """A comparison (``comparison``, its values and JSON) and its rows in words (``rows``)."""

    comparison: Comparison
    rows: tuple[ComparedRow, ...]

    def best_of(self, label: str) -> int | None:
        """The column of the best value of the row called ``label``.

        Raises:
            KeyError: no such row.
        """
        return self.comparison.row(label).best_index()


def run_store(data_dir: Path | None = None) -> RunStore:
    """The run store of ``data_dir`` (None: kvpilot's data folder)."""
    return RunStore(data_dir or paths.data_dir())


def list_runs(data_dir: Path | None = None) -> RunList:
    """The records that can be read, newest first, and one warning per file skipped."""
    return run_store(data_dir).records()


def read_runs(run_ids: Sequence[str], data_dir: Path | None = None) -> list[RunRecord]:
    """The records ``run_ids``, in that order.

    Raises:
        KvpilotError: an id with no record, or a damaged one (the message says which).
    """
    store = run_store(data_dir)
    return [store.read(i) for i in run_ids]


def compare_runs(runs: Sequence[RunRecord], *, minimum: int = 2) -> RunsCompared:
    """``runs`` side by side, each cell in words.

    Raises:
        KvpilotError: fewer than ``minimum`` runs (as :func:`~kvpilot.core.runs.compare.compare`).
    """
    table = compare(runs, minimum=minimum)
    rows = tuple(
        ComparedRow(row.label, tuple(format_cell(v, row.unit) for v in row.values),
                    row.best_index(), row.better)
        for row in table.rows
    )
    return RunsCompared(table, rows)
