"""vLLM log lines -> events: start-up phases, capacity figures, stats, classified failures.

Works for the releases in :mod:`kvpilot.core.base.versions` (``SUPPORTED_MIN`` to
``SUPPORTED_MAX``, the planner's range too). Line prefixes: the 0.33 form
``(EngineCore pid=12) INFO 11-29 08:10:34 [file.py:12] message``, the 0.11 form whose
``(proc pid=)`` part is an ANSI-coloured decoration on every line, the V0 ``INFO 11-20 ...``
form, and unprefixed lines (uvicorn, tracebacks, tqdm bars). ANSI codes and carriage-return
progress updates are removed before matching. Unknown or garbage lines produce no event and
never raise.

The line formats are tables in :mod:`kvpilot.core.vllm.logformats` (prefixes, phases,
capacity figures, stats) and :mod:`kvpilot.core.vllm.logfailures` (failures); every row is
tried on every line, whatever the release, so a newer vLLM is read with the newest known
wordings. A failure sentence wrapped over several lines (a copied terminal) is joined back, and
:func:`classify_exit` gives the failure to report when vLLM exits. The names other modules use
from those modules are re-exported here.

:class:`LogScanner` is stateful: tracebacks span many lines, the root cause (for example "KV
cache too small") wins over the generic "Engine core initialization failed" that follows it,
and ``EngineDeadError`` noise printed after ``[shutdown] API server: shutdown triggered`` (a
requested stop) is ignored.
"""

from __future__ import annotations

import re
import signal
from collections import deque
from dataclasses import replace
from typing import Any

from kvpilot.core.base import failures as fk
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.lifecycle import (  # re-exported: logparse.PROFILING and the others
    CAPTURING_CUDA_GRAPHS,
    COMPILING,
    DOWNLOADING,
    KV_CACHE_ALLOCATED,
    LOADING_WEIGHTS,
    PHASES,
    PROFILING,
    RESOLVING,
    STARTING_API,
)
from kvpilot.core.vllm.logevents import (  # re-exported: logparse.PhaseEvent and the others
    CapacityEvent,
    Event,
    PhaseEvent,
    ReadyHintEvent,
    ShutdownEvent,
    StatsEvent,
)
from kvpilot.core.vllm.logfailures import (  # re-exported: logparse.FAILURE_FORMATS
    EXC_LINE,
    FAIL_RULES,
    FAILURE_FORMATS,
    GENERIC_ERRORS,
    ScanContext,
    rank,
)
from kvpilot.core.vllm.logformats import (  # re-exported: logparse.parse_line and the others
    CAPACITY_FORMATS,
    CAPACITY_HINT,
    ENGINE_PHASES,
    MATCH_CHARS,
    PHASE_RULES,
    LineFormat,
    LogLine,
    gib_to_bytes,
    parse_line,
    parse_stats,
    tokens_text,
)

__all__ = [
    "CAPACITY_FORMATS",
    "CAPTURING_CUDA_GRAPHS",
    "COMPILING",
    "DOWNLOADING",
    "FAILURE_FORMATS",
    "KV_CACHE_ALLOCATED",
    "LOADING_WEIGHTS",
    "PHASES",
    "PROFILING",
    "RESOLVING",
    "STARTING_API",
    "CapacityEvent",
    "Event",
    "LineFormat",
    "LogLine",
    "LogScanner",
    "PhaseEvent",
    "ReadyHintEvent",
    "ShutdownEvent",
    "StatsEvent",
    "classify_exit",
    "formats_table",
    "gib_to_bytes",
    "parse_line",
]


def formats_table() -> str:
    """The line-format table as Markdown: what, releases, wording, a recorded line, where."""
    rows = ["| reads | releases | wording (regex) | recorded line | recorded in |",
            "|---|---|---|---|---|"]

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    for row in (*CAPACITY_FORMATS, *FAILURE_FORMATS):
        line, where = row.examples[0]
        what = row.what + (f" ({row.note})" if row.note else "")
        rows.append(
            f"| {cell(what)} | {row.releases} | `{cell(row.pattern.pattern)}` | "
            f"`{cell(parse_line(line).message[:160])}` | {cell(where)} |"
        )
    return "\n".join(rows) + "\n"




#: the KV-too-small sentence cut over several lines (copied from a terminal, wrapped)
_WRAPPED_HEADS = (re.compile(r"To serve at least one request with the models?'s max seq len"),)
_WRAP_LINES = 3
_ESTIMATE_TAIL = re.compile(r"the estimated maximum model length is (\d+)")
_GRAPH_PROGRESS = re.compile(
    r"Capturing CUDA graphs \((?:(?:decode|mixed prefill-decode), )?(?P<mode>[A-Z_]+)\):\s*"
    r"\d+%.*?(?P<done>\d+)/(?P<total>\d+)"
)

_NON_DEFAULT_MODEL = re.compile(r"'model(?:_tag)?': '([^']*)'")
_NON_DEFAULT_PORT = re.compile(r"'port': (\d+)")
_NON_DEFAULT_UTIL = re.compile(r"'gpu_memory_utilization': ([\d.]+)")
#: ERROR lines that never explain a failure themselves
_NOT_A_CAUSE = re.compile(
    r"Traceback|File \"|\^+$|EngineCore failed to start|Engine core initialization failed|"
    r"During handling of the above exception|The above exception was"
)
_PYDANTIC_HEAD = re.compile(r"\d+ validation errors? for \w+")
_PYDANTIC_FIELD = re.compile(r"^[A-Za-z_][\w.]*$")
_READY_URL = re.compile(r"Starting vLLM (?:API )?server (?:\d+ )?on (\S+)")
_SHUTDOWN_REQUESTED = "[shutdown] API server: shutdown triggered"
_ACCESS_LOG = re.compile(r'(?:INFO:\s+)?[\d.:\[\]a-fA-F]+:\d+ - "[A-Z]+ ')




class LogScanner:
    """Turns vLLM output lines (stdout and stderr, in order) into events.

    ``version`` (the runtime's) lets unknown-flag messages name the removal version; ``port``
    names the port in a port-in-use message when the log does not show it.

    A :class:`Failure` may be followed by a more specific one (a serving OOM's traceback
    comes after "EngineCore encountered a fatal error"); :attr:`failure` always holds the best so
    far. Not thread-safe: feed stdout and stderr lines from one thread or under one lock.
    """

    def __init__(
        self, *, version: str | None = None, port: int | None = None, recent_lines: int = 40
    ) -> None:
        self.version = version
        self.port = port
        self.model: str | None = None
        self.phase: str | None = None
        self.api_up = False
        self.shutting_down = False
        self.capacity = CapacityEvent()
        self.stats: StatsEvent | None = None
        self.root_error: str | None = None
        self.last_error: str | None = None
        #: the last ERROR / CRITICAL line vLLM printed (shown when nothing better explains a
        #: failure: an unrecognised error is never reported blank)
        self.last_error_line: str | None = None
        self.utilization: float | None = None
        #: (mode, graphs done, graphs in all) of the CUDA-graph capture bar last seen
        self.graph_capture: tuple[str, int, int] | None = None
        self._wrapped: list[str] = []
        self.lines_seen = 0
        self.recent: deque[str] = deque(maxlen=recent_lines)
        self._failure: Failure | None = None
        self._pydantic_field: str | None = None
        self._in_pydantic = False
        self._shutdown_emitted = False

    # ------------------------------------------------------------------ public
    @property
    def failure(self) -> Failure | None:
        """The most specific failure seen so far (None while all is well)."""
        return self._failure

    def mark_ready(self) -> None:
        """Tell the scanner the server answered ``/health`` (later OOMs are "while serving")."""
        self.api_up = True

    def feed(self, line: str) -> list[Event]:
        """Events carried by one line (usually none). Never raises on odd input."""
        self.lines_seen += 1
        try:
            return self._feed(parse_line(line))
        except (ValueError, IndexError, OverflowError):  # malformed numbers in a known line
            return []

    # ------------------------------------------------------------------ internals
    def _context(self) -> ScanContext:
        return ScanContext(
            phase=self.phase,
            api_up=self.api_up,
            model=self.model,
            port=self.port,
            version=self.version,
            root_error=self.root_error,
            pydantic_field=self._pydantic_field,
            capacity=self.capacity,
            utilization=self.utilization,
            graph_capture=self.graph_capture,
            last_error_line=self.last_error_line,
        )

    def _feed(self, parsed: LogLine) -> list[Event]:
        msg = parsed.message[:MATCH_CHARS]
        text = parsed.text
        if not text.strip():
            return []
        self.recent.append(text)
        events: list[Event] = []
        if _ACCESS_LOG.match(msg):
            return events  # uvicorn access log: client text, never a vLLM event

        if _SHUTDOWN_REQUESTED in msg:
            self.shutting_down = True
            if not self._shutdown_emitted:
                self._shutdown_emitted = True
                events.append(ShutdownEvent(text, requested=True))
            return events
        if msg.strip() == "INFO:     Shutting down" or text.startswith("INFO:     Shutting down"):
            if not self._shutdown_emitted:
                self._shutdown_emitted = True
                events.append(ShutdownEvent(text, requested=False))
            return events

        if "non-default args:" in msg:
            model = _NON_DEFAULT_MODEL.search(msg)
            port = _NON_DEFAULT_PORT.search(msg)
            if model:
                self.model = model[1]
            if port:
                self.port = int(port[1])
            util = _NON_DEFAULT_UTIL.search(msg)
            if util:
                self.utilization = float(util[1])
        graph = _GRAPH_PROGRESS.search(msg) if "Capturing CUDA graphs" in msg else None
        if graph:
            self.graph_capture = (graph["mode"], int(graph["done"]), int(graph["total"]))

        self._track_errors(msg, parsed.level)
        refreshed = self._refresh_unknown()
        if refreshed is not None:
            events.append(refreshed)
        if not self.shutting_down:
            failure = self._classify(msg, text) or self._classify_wrapped(msg, text)
            if failure is None:
                failure = self._estimate_tail(msg)
            if failure is not None:
                events.append(failure)
                capacity = self._capacity_for(msg, text)  # "Available KV ...: -8.59 GiB"
                if capacity is not None:
                    events.append(capacity)
                return events

        stats = parse_stats(msg, text)
        if stats is not None:
            self.stats = stats
            events.append(stats)
            return events

        if self._failure is None and not self.shutting_down:
            phase = self._phase_for(msg)
            if phase is not None:
                events.append(PhaseEvent(phase, text))

        capacity = self._capacity_for(msg, text)
        if capacity is not None:
            events.append(capacity)

        if "Application startup complete." in msg:
            self.api_up = True
            events.append(ReadyHintEvent(text))
        else:
            ready = _READY_URL.search(msg)
            if ready:
                events.append(ReadyHintEvent(text, url=ready[1]))
        return events

    def _track_errors(self, msg: str, level: str | None = None) -> None:
        stripped = msg.strip()
        if level in ("ERROR", "CRITICAL") and stripped and not _NOT_A_CAUSE.match(stripped):
            self.last_error_line = stripped[:300]
        if _PYDANTIC_HEAD.search(stripped):
            self._in_pydantic = True
            self._pydantic_field = None
        elif self._in_pydantic and _PYDANTIC_FIELD.match(stripped):
            self._pydantic_field = stripped
        exc = EXC_LINE.match(stripped[:300])
        if exc and exc["text"] and not GENERIC_ERRORS.search(stripped):
            cleaned = stripped if exc["cls"] != "Exception" else exc["text"]
            self.last_error = cleaned
            if self.root_error is None:
                self.root_error = cleaned

    def _classify(self, msg: str, text: str) -> Failure | None:
        current = self._failure
        current_rank = rank(current.kind) if current else 0
        for pattern, build in FAIL_RULES:
            match = pattern.search(msg)
            if match is None:
                continue
            event = build(match, msg, self._context())
            if event is None:
                continue
            if rank(event.kind) <= current_rank:
                return None
            event = replace(event, line=text)
            self._failure = event
            return event
        return None

    def _refresh_unknown(self) -> Failure | None:
        """"Engine core initialization failed" seen before its cause (stdout and stderr are
        read apart): once the cause arrives, the failure quotes it."""
        current = self._failure
        if current is None or current.kind != fk.UNKNOWN or current.details.get("root_cause"):
            return None
        cause = self.root_error or self.last_error_line
        if not cause:
            return None
        updated = replace(
            current,
            message=f"The vLLM engine failed to start: {cause.rstrip('.')}.",
            details={**current.details, "root_cause": cause},
        )
        self._failure = updated
        return updated

    def _classify_wrapped(self, msg: str, text: str) -> Failure | None:
        """A failure sentence cut over lines: join up to ``_WRAP_LINES`` lines and retry."""
        if self._wrapped:
            self._wrapped.append(msg.strip())
            joined = " ".join(self._wrapped)
            found = self._classify(joined, text)
            if found is not None or len(self._wrapped) >= _WRAP_LINES:
                self._wrapped = []
            return found
        if any(head.search(msg) for head in _WRAPPED_HEADS):
            self._wrapped = [msg.strip()]
        return None

    def _estimate_tail(self, msg: str) -> Failure | None:
        """vLLM's estimate printed on its own line after a wrapped KV-too-small sentence."""
        current = self._failure
        if current is None or current.kind != fk.KV_CACHE_TOO_SMALL:
            return None
        if current.estimated_max_model_len is not None:
            return None
        tail = _ESTIMATE_TAIL.search(msg)
        if tail is None:
            return None
        est = int(tail[1])
        updated = replace(
            current,
            estimated_max_model_len=est,
            message=current.message.rstrip(".")
            + f"; vLLM estimates {tokens_text(est)} tokens would fit.",
            details={**current.details, "estimated_max_model_len": est},
        )
        self._failure = updated
        return updated

    def _phase_for(self, msg: str) -> str | None:
        phase = next((ph for rx, ph in PHASE_RULES if rx.search(msg)), None)
        if phase is None:
            return None
        current = self.phase
        if phase == current or current == STARTING_API:
            return None
        if current is not None:
            moving_on = PHASES.index(phase) > PHASES.index(current)
            if not moving_on and not (phase in ENGINE_PHASES and current in ENGINE_PHASES):
                return None
        self.phase = phase
        return phase

    def _capacity_for(self, msg: str, text: str) -> CapacityEvent | None:
        values: dict[str, Any] = {}
        if not CAPACITY_HINT.search(msg):
            return None  # most lines: no capacity row can match
        for row in CAPACITY_FORMATS:
            m = row.pattern.search(msg)
            if m and row.read is not None:
                values.update(row.read(m))
        if not values:
            return None
        if values.get("kv_sized_after_warmup"):
            # 0.34: the final size replaces the reserved range "Available KV cache memory" named
            if not self.capacity.kv_sized_after_warmup and \
                    self.capacity.available_kv_bytes is not None:
                values["reserved_kv_bytes"] = self.capacity.available_kv_bytes
        elif "available_kv_bytes" in values and self.capacity.kv_sized_after_warmup:
            # a reservation-sized figure printed after the final size does not replace it
            values["reserved_kv_bytes"] = values.pop("available_kv_bytes")
        merged = self.capacity.merged(CapacityEvent(**values, line=text))
        if (
            merged.consumed_bytes is not None
            and merged.weights_bytes is not None
            and merged.non_torch_bytes is None
        ):
            non_torch = max(0, merged.consumed_bytes - merged.weights_bytes)
            values["non_torch_bytes"] = non_torch
            merged = replace(merged, non_torch_bytes=non_torch)
        self.capacity = merged
        return CapacityEvent(**values, line=text)


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def classify_exit(
    returncode: int | None, scanner: LogScanner, *, was_ready: bool
) -> Failure | None:
    """The failure to report when vLLM exited with ``returncode`` (None while it still runs).

    The log's classification wins; an OOM is re-labelled ``cuda_oom_serving`` when the server
    had been ready. Exit 0 after a requested shutdown is no failure; exit 0 after the engine
    died is ``engine_died`` (vLLM's API server exits 0 then). Otherwise an ``unknown`` failure
    quotes the root error line.
    """
    failure = scanner.failure
    if failure is not None:
        oom = (fk.CUDA_OOM_LOADING, fk.CUDA_OOM_GRAPHS)
        if was_ready and failure.kind in oom:
            return replace(
                failure,
                kind=fk.CUDA_OOM_SERVING,
                message=(
                    "The GPU ran out of memory while serving requests; lower the memory "
                    "fraction, max_num_seqs or max_num_batched_tokens."
                ),
            )
        return failure
    if returncode is None or returncode == 0:
        return None
    if scanner.shutting_down and returncode < 0:
        return None
    cause = scanner.root_error or scanner.last_error or scanner.last_error_line
    last = cause or next((line for line in reversed(scanner.recent) if line.strip()), None)
    if returncode < 0:
        name = _signal_name(returncode)
        kind = fk.ENGINE_DIED if was_ready else fk.UNKNOWN
        return Failure(
            kind,
            f"vLLM was killed by {name}"
            + (" while serving" if was_ready else " during start-up")
            + (
                "; if nobody stopped it, the system may have run out of memory (see "
                "`dmesg`): start it again, with a smaller plan if it happens again."
                if name == "SIGKILL"
                else "; start it again."
            ),
            details={"returncode": returncode, "signal": name},
        )
    if returncode == 2:
        return Failure(
            fk.UNKNOWN,
            "vLLM rejected its command line" + (f": {last.rstrip('.')}." if last else "."),
            line=last or "",
            details={"returncode": returncode},
        )
    return Failure(
        fk.UNKNOWN,
        f"vLLM exited with status {returncode}" + (f": {last.rstrip('.')}." if last else "."),
        line=last or "",
        details={"returncode": returncode, "root_cause": cause},
    )
