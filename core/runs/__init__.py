"""Every server run kept as a record, to list, compare and relaunch (``kvpilot runs``).

:mod:`~kvpilot.core.runs.record` is the record, :mod:`~kvpilot.core.runs.store` the folder of
records (atomic writes, pruning, damaged files skipped), :mod:`~kvpilot.core.runs.recorder` the
supervisor listener that keeps one, :mod:`~kvpilot.core.runs.compare` the side-by-side table.
"""
