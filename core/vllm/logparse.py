"""vLLM log lines -> events: start-up phases, capacity figures, stats, classified failures.

Works for the releases in :mod:`kvpilot.core.vllm.versions` (``SUPPORTED_MIN`` to
``SUPPORTED_MAX``, the planner's range too). Line prefixes: the 0.33 form
``(EngineCore pid=12) INFO 11-29 08:10:34 [file.py:12] message``, the 0.11 form whose
``(proc pid=)`` part is an ANSI-coloured decoration on every line, the V0 ``INFO 11-20 ...``
form, and unprefixed lines (uvicorn, tracebacks, tqdm bars). ANSI codes and carriage-return
progress updates are removed before matching. Unknown or garbage lines produce no event and
never raise.

What is read is one table: :data:`CAPACITY_FORMATS` (weights, the V0 worker summary, the
0.10.2 "Actual usage is ... bytes" summary, the 0.28+ summary merging weights and non-torch,
available KV including negative values, KV tokens, concurrency, the requested budget and free
memory, CUDA-graph terms) and :data:`FAILURE_FORMATS` (every wording of the failures the
fallback engine answers), each row with the releases that print it and the recorded lines that
prove it. Every row is tried on every line, whatever the release, so a newer vLLM is read with
the newest known wordings; a failure no row recognises is reported with vLLM's own last error
line (:func:`classify_exit`), never blank. A failure sentence wrapped over several lines (a
copied terminal) is joined back.

:class:`LogScanner` is stateful: tracebacks span many lines, the root cause (for example "KV
cache too small") wins over the generic "Engine core initialization failed" that follows it,
and ``EngineDeadError`` noise printed after ``[shutdown] API server: shutdown triggered`` (a
requested stop) is ignored.

Capacity figures: vLLM prints memory in GiB rounded to 0.01 (``format_gib``), so a value read
here is exact only to +-0.005 GiB (about 5.4 MB); token counts and ``--kv-cache-memory=``
suggestions are exact integers.

Classification choices:

* The CPU backend's "Available memory on node N (free/total GiB) on kv cache allocation is less
  than requested memory for kv (X GiB)" (an explicit KV size larger than free RAM) is reported as
  ``free_memory_below_utilization`` with ``details['requested_for'] == 'kv_cache'``: it is the
  same "asked for more than is free" situation as the utilization check, and its remedy is the
  same (ask for less), whereas ``no_kv_memory`` means nothing is left after the weights.
* CUDA out of memory is split by what happened so far: after "Application startup complete"
  (or :meth:`LogScanner.mark_ready`) it is ``cuda_oom_serving``; during profiling, compilation or
  graph capture it is ``cuda_oom_graphs``; otherwise (loading, or vLLM's "Failed to load model -
  not enough GPU memory" wrapper) ``cuda_oom_loading``. The capture bar seen last ("Capturing
  CUDA graphs (FULL): 57% ... 20/35") is kept in the failure's details (mode, graphs done).
* A negative "Available KV cache memory" (or V0 "reserved for KV Cache is -X") is
  ``negative_kv_budget``, classified at that line with the figure; the "No available memory for
  the cache blocks" vLLM raises next does not replace it (``no_kv_memory`` is that message on
  its own). Its remedy is a utilization that covers what vLLM measured, not a shorter context.
* The V0 "max seq len (N) is larger than the maximum number of tokens that can be stored in KV
  cache (M)" is ``kv_cache_too_small`` with M as the estimated maximum length.
"""

from __future__ import annotations

import re
import signal
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from kvpilot.core import failures as fk
from kvpilot.core.failures import Failure
from kvpilot.core.units import GiB, MiB
from kvpilot.core.vllm import versions
from kvpilot.core.vllm.phases import (  # re-exported: logparse.PROFILING and the others
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
from kvpilot.core.vllm.runtime import normalize_flag, removed_flag_message

KiB = 1 << 10
#: half of the 0.01 GiB step vLLM rounds memory figures to
GIB_ROUNDING_BYTES = GiB // 200

# ------------------------------------------------------------------------------ phases
# the names live in kvpilot.core.vllm.phases (imported above, re-exported from here)
#: phases after loading that vLLM may interleave (V2 captures graphs twice, warm-up compiles)
_ENGINE_PHASES = frozenset({PROFILING, KV_CACHE_ALLOCATED, COMPILING, CAPTURING_CUDA_GRAPHS})


# ------------------------------------------------------------------------------ events
@dataclass(frozen=True)
class PhaseEvent:
    """vLLM entered a start-up phase (one of :data:`PHASES`)."""

    phase: str
    line: str


@dataclass(frozen=True)
class CapacityEvent:
    """Capacity figures read from one line (None = not on this line). Memory in bytes.

    ``max_concurrency`` is vLLM's "Maximum concurrency for ``max_concurrency_at_len`` tokens per
    request"; ``consumed_bytes`` is weights + non-torch memory from the 0.28+ summary line,
    ``num_gpu_blocks`` the KV blocks (V0 and 0.10 lines), ``peak_torch_bytes`` the V0 profile's
    torch peak (pre-0.6.6 line); ``available_kv_bytes`` may be negative (budget exceeded), and
    ``kv_cache_memory_fit_bytes`` / ``kv_cache_memory_full_bytes`` are the two
    ``--kv-cache-memory=`` values it suggests (to fit the requested memory / to use all of it).
    """

    weights_bytes: int | None = None
    weights_load_s: float | None = None
    available_kv_bytes: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_at_len: int | None = None
    cudagraph_bytes: int | None = None
    cudagraph_estimate_bytes: int | None = None
    free_at_startup_bytes: int | None = None
    total_bytes: int | None = None
    requested_bytes: int | None = None
    activation_peak_bytes: int | None = None
    non_torch_bytes: int | None = None
    consumed_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_memory_fit_bytes: int | None = None
    kv_cache_memory_full_bytes: int | None = None
    max_model_len: int | None = None
    num_gpu_blocks: int | None = None
    peak_torch_bytes: int | None = None
    line: str = ""

    def merged(self, newer: CapacityEvent) -> CapacityEvent:
        """This reading updated with every figure ``newer`` carries (``line`` from ``newer``)."""
        updates = {
            f.name: getattr(newer, f.name)
            for f in fields(self)
            if getattr(newer, f.name) is not None and f.name != "line"
        }
        return replace(self, line=newer.line or self.line, **updates)

    def figures(self) -> dict[str, Any]:
        """The figures that are set, without ``line``."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name != "line" and getattr(self, f.name) is not None
        }


@dataclass(frozen=True)
class StatsEvent:
    """The periodic "Engine 000: Avg prompt throughput ..." line.

    Fractions are 0-1; ``prefix_hit_frac`` is None when the line has no hit rate;
    ``preemptions`` counts the preemptions in the interval (0 when not printed).
    """

    prompt_tokens_per_s: float
    generation_tokens_per_s: float
    running: int
    waiting: int
    kv_usage_frac: float
    prefix_hit_frac: float | None
    preemptions: int
    line: str = ""


@dataclass(frozen=True)
class ReadyHintEvent:
    """A line that usually means the HTTP server is up (readiness is still ``/health``)."""

    line: str
    url: str | None = None


@dataclass(frozen=True)
class ShutdownEvent:
    """vLLM began shutting down; ``requested`` when a signal / stop request triggered it."""

    line: str
    requested: bool = True


Event = PhaseEvent | CapacityEvent | StatsEvent | Failure | ReadyHintEvent | ShutdownEvent


# ------------------------------------------------------------------------------ line parsing
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_PREFIX = re.compile(
    r"^(?:\((?P<proc>[\w.:-]+) pid=(?P<pid>\d+)\)\s+)?"
    r"(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<ts>\d\d-\d\d \d\d:\d\d:\d\d) "
    r"\[?(?P<file>[^\]:\s\[]+):(?P<lineno>\d+)\] ?)?"  # 0.6.x: no "[" before the file
)
#: only this many characters of a message are matched against the rules (config dumps can be
#: tens of kB; every message kvpilot reads carries its figures well before this point)
MATCH_CHARS = 4096


@dataclass(frozen=True)
class LogLine:
    """One log line split into vLLM's prefix fields (None when absent) and the message."""

    raw: str
    text: str
    process: str | None
    pid: int | None
    level: str | None
    file: str | None
    message: str


def clean_line(raw: str) -> str:
    """Drop ANSI codes, the trailing newline and all but the last carriage-return update."""
    text = _ANSI.sub("", raw).rstrip("\r\n")
    if "\r" in text:
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
    return text


def parse_line(raw: str) -> LogLine:
    """Split a log line (any supported version) into prefix fields and message."""
    text = clean_line(raw)
    match = _PREFIX.match(text[:400])
    if match is None:  # pragma: no cover - every group is optional
        return LogLine(raw, text, None, None, None, None, text)
    pid = match.group("pid")
    return LogLine(
        raw=raw,
        text=text,
        process=match.group("proc"),
        pid=int(pid) if pid else None,
        level=match.group("level"),
        file=match.group("file"),
        message=text[match.end() :],
    )


def gib_to_bytes(value: str | float) -> int:
    """``'1.25'`` GiB -> bytes (rounded to the nearest byte)."""
    return round(float(value) * GiB)


def _size_to_bytes(value: str, unit: str) -> int:
    scale = {"GiB": GiB, "MiB": MiB, "KiB": KiB, "bytes": 1, "B": 1}.get(unit, 1)
    return round(float(value) * scale)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _tokens(n: int) -> str:
    return f"{n:,}"


# ------------------------------------------------------------------------------ phase rules
_PHASE_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), phase)
    for p, phase in (
        (
            r"non-default args:|Resolved architecture:|Using max model len|"
            r"vLLM (?:API )?server version|Initializing a V1 LLM engine",
            RESOLVING,
        ),
        (r"^Downloading |Fetching \d+ files|\.safetensors:\s+\d+%", DOWNLOADING),
        (
            r"Starting to load model|Loading model from scratch|"
            r"Loading safetensors checkpoint shards|Loading weights took",
            LOADING_WEIGHTS,
        ),
        (
            r"Model loading took|Memory profiling takes|Profiling CUDA graph memory|"
            r"Estimated CUDA graph memory|Initial profiling/warmup run",
            PROFILING,
        ),
        (
            r"for vLLM's torch\.compile|Dynamo bytecode transform time|Compiling a graph for|"
            r"torch\.compile (?:takes|took|and initial)|Directly load the compiled graph|"
            r"Starting torch\.compile|Compile and warming up model",
            COMPILING,
        ),
        (
            r"Available KV cache memory: [\d.]+ GiB|KV cache size: [\d,]+ tokens|"
            r"GiB for KV cache on node",
            KV_CACHE_ALLOCATED,
        ),
        (
            r"Capturing CUDA graphs|Graph capturing finished|Capturing cudagraphs",
            CAPTURING_CUDA_GRAPHS,
        ),
        (
            r"Supported[ _]tasks:|Starting vLLM (?:API )?server|Available routes are|"
            r"Started server process",
            STARTING_API,
        ),
    )
)

# ------------------------------------------------------------------------------ line formats
_Reader = Callable[[re.Match[str]], dict[str, Any]]
#: a signed decimal as vLLM prints memory figures (negative budgets and non-torch terms occur)
_NUM = r"(-?\d+(?:\.\d+)?)"


@dataclass(frozen=True)
class LineFormat:
    """One wording vLLM uses for a capacity figure or a failure, with the releases that print it.

    ``what`` names the figure (capacity rows) or the failure kind (failure rows); ``since`` and
    ``before`` bound the releases (``before`` None: still printed by the newest known release;
    releases kvpilot has no source for are marked in ``note``). ``examples`` are recorded lines
    (``(line, where it was recorded)``) the rule must read: public start-up reports
    (``benchmarks/data/calibration_cases*.json``), the real CPU runs in ``tests/data/vllm_logs``,
    or lines composed from the release's format string where no recording exists. ``context``
    lines are fed to the scanner before an example (a failure that depends on the phase).
    Exactly one of ``read`` (capacity: match -> figures in bytes / tokens) and ``build``
    (failure) is set.
    """

    what: str
    since: str
    before: str | None
    pattern: re.Pattern[str]
    examples: tuple[tuple[str, str], ...]
    read: _Reader | None = None
    build: _Builder | None = None
    context: tuple[str, ...] = ()
    note: str = ""

    @property
    def releases(self) -> str:
        """``'0.6 - 0.10'``, ``'0.10.2 -'`` or ``'0.6 - before 0.6.6'`` (``before`` exclusive)."""
        start = _release_label(self.since)
        if self.before is None:
            return f"{start} -"
        rel = versions.release(self.before) or (0, 0, 0)
        if rel[1] > 0 and not any(rel[2:]):
            return f"{start} - {rel[0]}.{rel[1] - 1}"
        return f"{start} - before {_release_label(self.before)}"

    def applies_to(self, version: str | None) -> bool:
        """True when ``version`` prints this wording (an unknown version: every row applies)."""
        return versions.applies(version, self.since, self.before)


def _release_label(version: str) -> str:
    """``'0.28.0'`` -> ``'0.28'``, ``'0.10.2'`` -> ``'0.10.2'``."""
    rel = versions.release(version) or (0, 0, 0)
    return ".".join(str(p) for p in (rel if any(rel[2:]) else rel[:2]))


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


def _gib(key: str, group: int = 1) -> _Reader:
    return lambda m: {key: gib_to_bytes(m[group])}


def _cap(
    what: str,
    since: str,
    before: str | None,
    pattern: str,
    read: _Reader,
    *examples: tuple[str, str],
    note: str = "",
) -> LineFormat:
    return LineFormat(what, since, before, re.compile(pattern), examples, read=read, note=note)


_CPU32 = "tests/data/vllm_logs/cpu_0.32 (real vLLM 0.32.0 CPU run)"
_GPU33 = "composed from the vLLM 0.33.0 format string (tests/data/vllm_logs/gpu_excerpts)"


def _case(case_id: str, version: str) -> str:
    return f"public report {case_id} (vLLM {version}), benchmarks/data"


#: a word every capacity row's wording contains (a cheap test before the rows' patterns)
_CAPACITY_HINT = re.compile(r"Gi[Bb]|GB|blocks|tokens|took|max model len|max_model_len|--kv-cache")

#: every capacity wording, oldest release first; all rows are tried on every line
CAPACITY_FORMATS: tuple[LineFormat, ...] = (
    _cap(
        "weights_loaded", "0.6.0", "0.8.0",
        r"Loading model weights took ([\d.]+) GB", _gib("weights_bytes"),
        ("Loading model weights took 15.5083 GB",
         _case("gpu24-uitars7b-qwen2vl-8k-v066", "0.6.6")),
        ("Loading model weights took 14.9888 GB",
         _case("vllm10517-rtx3090-llama31-8b-20k", "0.6, V0")),
        note="says GB but divides by 2**30",
    ),
    _cap(
        "weights_loaded", "0.8.0", None,
        r"Model loading took:? ([\d.]+) Gi?B(?: memory)?(?: and ([\d.]+) s)?",
        lambda m: {"weights_bytes": gib_to_bytes(m[1]),
                   **({"weights_load_s": float(m[2])} if m[2] else {})},
        ("Model loading took 6.0160 GB and 533.851791 seconds",
         _case("t4-llama32-3b-fp16-2k", "0.8.2")),
        ("Model loading took 0.6951 GiB and 0.204926 seconds",
         _case("rtx4090-cosyvoice2-llm-u0.40", "0.9.0")),
        ("Model loading took 14.2488 GiB", _case("dl-a100-80-qwen2-7b-u0.25", "0.10.1.1")),
        ("Model loading took 13.04 GiB memory and 5.444196 seconds",
         _case("l40s-qwen35-9b-awq-int8-16k-u0.48-cotenant", "0.16.1")),
        note="'GiB and' up to 0.27, 'GiB memory and' from 0.12 (V1 runner) and only it from 0.28",
    ),
    _cap(
        "weights_load_time", "0.8.0", None,
        r"Loading weights took ([\d.]+) s", lambda m: {"weights_load_s": float(m[1])},
        ("(Worker pid=30971) INFO 11-29 08:10:33 [default_loader.py:501] Loading weights took "
         "0.01 seconds", _CPU32),
    ),
    _cap(
        "v0_profiling_results", "0.6.4", "0.6.6",
        r"Memory profiling results: total_gpu_memory=([\d.]+)GiB initial_memory_usage="
        r"[\d.]+GiB peak_torch_memory=([\d.]+)GiB memory_usage_post_profile=[\d.]+Gi[bB] "
        r"non_torch_memory=" + _NUM + r"GiB kv_cache_size=" + _NUM + r"GiB "
        r"gpu_memory_utilization=([\d.]+)",
        lambda m: {"total_bytes": gib_to_bytes(m[1]), "peak_torch_bytes": gib_to_bytes(m[2]),
                   "non_torch_bytes": gib_to_bytes(m[3]), "available_kv_bytes": gib_to_bytes(m[4]),
                   "gpu_memory_utilization": float(m[5])},
        ("Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB "
         "peak_torch_memory=17.06GiB memory_usage_post_profile=15.35GiB "
         "non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90",
         _case("vllm10517-rtx3090-llama31-8b-20k", "0.6, V0")),
        ("INFO 11-20 10:00:00 worker.py:232] Memory profiling results: total_gpu_memory=23.58GiB "
         "initial_memory_usage=15.34GiB peak_torch_memory=17.98GiB "
         "memory_usage_post_profile=15.35Gib non_torch_memory=0.35GiB kv_cache_size=2.89GiB "
         "gpu_memory_utilization=0.90", "composed from the vLLM 0.6.4 format string"),
        note="V0 worker; absent in 0.6.0, 0.6.1-0.6.3 not checked; 0.6.4 prints 'Gib' once",
    ),
    _cap(
        "v0_requested_budget", "0.6.6", "0.11.0",
        r"total_gpu_memory \(([\d.]+)GiB\) x (?:gpu_memory_utilization \()?([\d.]+)\)? = "
        r"([\d.]+)GiB",
        lambda m: {"total_bytes": gib_to_bytes(m[1]), "gpu_memory_utilization": float(m[2]),
                   "requested_bytes": gib_to_bytes(m[3])},
        ("the current vLLM instance can use total_gpu_memory (14.74GiB) x "
         "gpu_memory_utilization (0.89) = 13.18GiB", _case("t4-llama32-3b-fp16-2k", "0.8.2")),
        ("the current vLLM instance can use total_gpu_memory (23.67GiB) x "
         "gpu_memory_utilization (0.90) = 21.30GiB",
         _case("gpu24-uitars7b-qwen2vl-8k-v066", "0.6.6")),
        note="V0 worker summary, first line",
    ),
    _cap(
        "v0_weights", "0.6.6", "0.11.0", r"model weights take " + _NUM + "GiB",
        _gib("weights_bytes"),
        ("model weights take 6.02GiB; non_torch_memory takes 0.05GiB; PyTorch activation peak "
         "memory takes 0.90GiB; the rest of the memory reserved for KV Cache is 6.22GiB.",
         _case("t4-llama32-3b-fp16-2k", "0.8.2")),
        note="V0 worker summary, second line",
    ),
    _cap(
        "v0_non_torch", "0.6.6", "0.11.0", r"non_torch_memory (?:takes )?" + _NUM + "GiB",
        _gib("non_torch_bytes"),
        ("model weights take 0.70GiB; non_torch_memory takes 0.07GiB; PyTorch activation peak "
         "memory takes 1.12GiB; the rest of the memory reserved for KV Cache is 7.57GiB.",
         _case("rtx4090-cosyvoice2-llm-u0.40", "0.9.0")),
    ),
    _cap(
        "v0_activation_peak", "0.6.6", "0.11.0",
        r"PyTorch activation peak memory takes " + _NUM + "GiB", _gib("activation_peak_bytes"),
        ("model weights take 15.51GiB; non_torch_memory takes 0.28GiB; PyTorch activation peak "
         "memory takes 1.16GiB; the rest of the memory reserved for KV Cache is 4.36GiB.",
         _case("gpu24-uitars7b-qwen2vl-8k-v066", "0.6.6")),
    ),
    _cap(
        "v0_available_kv", "0.6.6", "0.11.0",
        r"the rest (?:of the memory )?reserved for KV Cache is " + _NUM + "GiB",
        _gib("available_kv_bytes"),
        ("model weights take 6.02GiB; non_torch_memory takes 0.05GiB; PyTorch activation peak "
         "memory takes 0.90GiB; the rest of the memory reserved for KV Cache is 6.22GiB.",
         _case("t4-llama32-3b-fp16-2k", "0.8.2")),
        note="negative when the budget is exceeded (V0 then raises 'No available memory')",
    ),
    _cap(
        "v0_gpu_blocks", "0.6.0", "0.11.0", r"#?\s*(?:GPU|cuda|CUDA) blocks: (\d+)",
        lambda m: {"num_gpu_blocks": int(m[1])},
        ("# GPU blocks: 5102, # CPU blocks: 4681",
         _case("gpu24-uitars7b-qwen2vl-8k-v066", "0.6.6")),
        ("# cuda blocks: 3637, # CPU blocks: 1170", _case("t4-llama32-3b-fp16-2k", "0.8.2")),
        note="'# GPU blocks' in 0.6, '# <device> blocks' from 0.7",
    ),
    _cap(
        "v1_gpu_blocks", "0.10.0", "0.12.0", r"num_gpu_blocks is ?: ?(\d+)",
        lambda m: {"num_gpu_blocks": int(m[1])},
        ("Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: "
         "330018", _case("dl-a100-80x4-gptoss120b-tp4-u0.8", "0.10.1.1")),
        note="the metrics logger's start-up line",
    ),
    _cap(
        "available_kv", "0.9.0", None, r"Available KV cache memory: " + _NUM + " GiB",
        _gib("available_kv_bytes"),
        ("Available KV cache memory: 5.01 GiB", _case("dl-a100-80-qwen2-7b-u0.25", "0.10.1.1")),
        ("[gpu_worker.py:424] Available KV cache memory: -8.59 GiB",
         _case("l40s-qwen35-4b-awq-16k-u0.30-cotenant-FAIL", "0.16.1")),
        note="'%.2f' up to 0.13, '%s' (format_gib) from 0.16; negative: see negative_kv_budget",
    ),
    _cap(
        "explicit_kv_cpu", "0.20.0", None,
        r"Explicitly set \(([\d.]+)/([\d.]+)\) GiB for KV cache",
        lambda m: {"available_kv_bytes": gib_to_bytes(m[1]), "total_bytes": gib_to_bytes(m[2])},
        ("(Worker pid=30971) INFO 11-29 08:10:34 [cpu_worker.py:260] Explicitly set "
         "(1.0/23.54) GiB for KV cache on node 0.", _CPU32),
        note="CPU backend",
    ),
    _cap(
        "kv_tokens", "0.8.0", None, r"KV cache size:\s+([\d,]+) tokens",
        lambda m: {"kv_cache_tokens": _int(m[1])},
        ("GPU KV cache size: 93,872 tokens", _case("dl-a100-80-qwen2-7b-u0.25", "0.10.1.1")),
        ("GPU KV cache size:         1,037,152 tokens",
         _case("l40s-x4-qwen3-coder-30b-a3b-tp4-32k-v0240", "0.24.0")),
        ("GPU KV cache size: 519,681 tokens, Maximum concurrency for 16,384 tokens per "
         "request: 31.72x", _case("t4-gemma4-e2b-qat-w4a16-16k-u0.90-v0290", "0.29.0")),
        note="own line up to 0.27, one line with the concurrency from 0.28 ('CPU' on CPU)",
    ),
    _cap(
        "max_concurrency", "0.6.4", None,
        r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x",
        lambda m: {"max_concurrency_at_len": _int(m[1]), "max_concurrency": float(m[2])},
        ("Maximum concurrency for 2048 tokens per request: 28.41x",
         _case("t4-llama32-3b-fp16-2k", "0.8.2")),
        ("Maximum concurrency for 16,384 tokens per request: 5.73x",
         _case("dl-a100-80-qwen2-7b-u0.25", "0.10.1.1")),
        note="V0 executor without thousands separators, V1 with; absent in 0.6.0",
    ),
    _cap(
        "cudagraph_captured", "0.6.4", None,
        r"Graph capturing finished in [\d.]+ secs?, took " + _NUM + " GiB",
        _gib("cudagraph_bytes"),
        ("Graph capturing finished in 41 secs, took 0.17 GiB",
         _case("t4-llama32-3b-fp16-2k", "0.8.2")),
        ("Graph capturing finished in 3 secs, took 0.51 GiB",
         _case("l40s-qwen35-9b-awq-int8-16k-u0.48-cotenant", "0.16.1")),
        note="0.6.0 prints the time only",
    ),
    _cap(
        "cudagraph_estimate", "0.19.0", None,
        r"Estimated CUDA graph memory: ([\d.]+) GiB", _gib("cudagraph_estimate_bytes"),
        ("(EngineCore pid=4188) INFO 11-29 10:40:33 [gpu_model_runner.py:5321] Estimated CUDA "
         "graph memory: 0.51 GiB total", _GPU33),
        note="V1 model runner; 0.17/0.18 not checked",
    ),
    _cap(
        "cudagraph_pool", "0.19.0", None,
        r"CUDA graph pool memory: ([\d.]+) GiB \(actual\), ([\d.]+) GiB \(estimated\)",
        lambda m: {"cudagraph_bytes": gib_to_bytes(m[1]),
                   "cudagraph_estimate_bytes": gib_to_bytes(m[2])},
        ("(EngineCore pid=4188) INFO 11-29 10:40:38 [gpu_worker.py:1004] CUDA graph pool "
         "memory: 0.49 GiB (actual), 0.51 GiB (estimated), difference: 0.02 GiB (3.9%).",
         _GPU33),
    ),
    _cap(
        "summary_free_at_startup", "0.10.2", None,
        r"Free memory on device:? \(?([\d.]+)/([\d.]+) GiB\)? on startup(?! is less)",
        lambda m: {"free_at_startup_bytes": gib_to_bytes(m[1]), "total_bytes": gib_to_bytes(m[2])},
        ("Free memory on device (21.83/22.06 GiB) on startup.",
         _case("a10-gemma4-12b-sleepmode-u0.80", "unstated, 0.26-0.27 wording")),
        note="the memory summary; INFO in 0.10.2 and from 0.26, DEBUG in 0.11-0.25",
    ),
    _cap(
        "summary_requested_budget", "0.10.2", None,
        r"Desired GPU memory utilization is \(([\d.]+), ([\d.]+) GiB\)",
        lambda m: {"gpu_memory_utilization": float(m[1]), "requested_bytes": gib_to_bytes(m[2])},
        ("Desired GPU memory utilization is (0.8, 17.65 GiB).",
         _case("a10-gemma4-12b-sleepmode-u0.80", "unstated, 0.26-0.27 wording")),
    ),
    _cap(
        "summary_weights", "0.10.2", "0.28.0", r"Actual usage is " + _NUM + " GiB for weight",
        _gib("weights_bytes"),
        ("Actual usage is 8.28 GiB for weight, 1.02 GiB for peak activation,",
         _case("a10-gemma4-12b-sleepmode-u0.80", "unstated, 0.26-0.27 wording")),
    ),
    _cap(
        "summary_consumed", "0.28.0", None,
        r"Actual usage is " + _NUM + r" GiB for consumed memory", _gib("consumed_bytes"),
        ("(EngineCore pid=4188) INFO 11-29 10:40:38 [gpu_worker.py:1045] Free memory on device "
         "(23.1/23.53 GiB) on startup. Desired GPU memory utilization is (0.92, 21.65 GiB). "
         "Actual usage is 15.42 GiB for consumed memory (weights + non-torch), 1.0 GiB for peak "
         "activation, and 0.49 GiB for CUDAGraph memory.", _GPU33),
        note="weights and non-torch merged; non-torch = consumed - weights loaded",
    ),
    _cap(
        "summary_activation_peak", "0.10.2", None, _NUM + r" GiB for peak activation",
        _gib("activation_peak_bytes"),
        ("Actual usage is 8.28 GiB for weight, 1.02 GiB for peak activation,",
         _case("a10-gemma4-12b-sleepmode-u0.80", "unstated, 0.26-0.27 wording")),
    ),
    _cap(
        "summary_non_torch", "0.10.2", "0.28.0", _NUM + r" GiB for non-torch memory",
        _gib("non_torch_bytes"),
        ("-3.58 GiB for non-torch memory, and 0.68 GiB for CUDAGraph memory.",
         _case("a10-gemma4-12b-sleepmode-u0.80", "unstated, 0.26-0.27 wording")),
        note="can be negative (memory freed during profiling)",
    ),
    _cap(
        "summary_cudagraph", "0.10.2", None, _NUM + r" GiB for CUDAGraph memory",
        _gib("cudagraph_bytes"),
        ("-3.58 GiB for non-torch memory, and 0.68 GiB for CUDAGraph memory.",
         _case("a10-gemma4-12b-sleepmode-u0.80", "unstated, 0.26-0.27 wording")),
        note="the captured pool (capture_model's result)",
    ),
    _cap(
        "summary_kv_fit", "0.10.2", None,
        r"--kv-cache-memory=(\d+)`?(?: \([\d.]+ GiB\))? to fit into requested memory",
        lambda m: {"kv_cache_memory_fit_bytes": int(m[1])},
        ("--kv-cache-memory=68930180199 (64.2 GiB) to fit into requested memory",
         _case("llmd-h100-qwen3-0.6b-16000", "unstated, >= 0.11")),
        note="without the '(x GiB)' in 0.10.2",
    ),
    _cap(
        "summary_kv_full", "0.10.2", None,
        r"--kv-cache-memory=(\d+)`?(?: \([\d.]+ GiB\))? to fully utilize",
        lambda m: {"kv_cache_memory_full_bytes": int(m[1])},
        ("Replace gpu_memory_utilization config with `--kv-cache-memory=5068061409` (4.72 GiB) "
         "to fit into requested memory, or `--kv-cache-memory=6001454284` (5.59 GiB) to fully "
         "utilize gpu memory.", _GPU33),
    ),
    _cap(
        "summary_kv_in_use", "0.10.2", None,
        r"Current kv cache memory in use is (\d+(?:\.\d+)?) (GiB|bytes)",
        lambda m: {"available_kv_bytes": _size_to_bytes(m[1], m[2])},
        ("(Worker_TP2_EP2) Free memory on device (43.93/44.42 GiB) on startup. Desired GPU memory "
         "utilization is (0.9, 39.98 GiB). Actual usage is 27.72 GiB for weight, 1.4 GiB for peak "
         "activation, 0.21 GiB for non-torch memory, and 3.45 GiB for CUDAGraph memory. ... "
         "Current kv cache memory in use is 11423138508 bytes.",
         _case("l40s-x8-qwen3-235b-2507-fp8-tp8", "0.10.2")),
        note="bytes in 0.10.2, GiB later",
    ),
    _cap(
        "max_model_len", "0.9.0", None, r"Using max model len (\d+)",
        lambda m: {"max_model_len": int(m[1])},
        ("(APIServer pid=29939) INFO 11-29 08:10:11 [model.py:2152] Using max model len 1024",
         _CPU32),
    ),
    _cap(
        "max_model_len_auto_fit", "0.14.0", None,
        r"Auto-fit max_model_len: (?:reduced from \d+ to (\d+)|full model context length (\d+) "
        r"fits)",
        lambda m: {"max_model_len": int(m[1] or m[2])},
        ("Auto-fit max_model_len: reduced from 131072 to 32640 to fit in available KV cache "
         "memory (1.0 GiB CPU)", "vLLM 0.32.0 CPU run (reference notes)"),
    ),
)


# ------------------------------------------------------------------------------ stats
_STATS_HEAD = re.compile(r"^(?:Engine \d+|\d+ Engines Aggregated): Avg prompt throughput")
_STATS_FIELDS = {
    "prompt": re.compile(r"Avg prompt throughput: ([\d.]+) tokens/s"),
    "gen": re.compile(r"Avg generation throughput: ([\d.]+) tokens/s"),
    "running": re.compile(r"Running: (\d+) reqs"),
    "waiting": re.compile(r"Waiting: (\d+) reqs"),
    "kv": re.compile(r"KV cache usage: ([\d.]+)%"),
    "prefix": re.compile(r"(?<![a-z] )Prefix cache hit rate: ([\d.]+)%"),
    "preempt": re.compile(r"Preemptions: (\d+)"),
}


def _parse_stats(message: str, line: str) -> StatsEvent | None:
    if not _STATS_HEAD.match(message):
        return None
    found = {k: rx.search(message) for k, rx in _STATS_FIELDS.items()}
    required = ("prompt", "gen", "running", "waiting", "kv")
    if any(found[k] is None for k in required):
        return None

    def get(key: str) -> str:
        match = found[key]
        assert match is not None
        return match.group(1)

    return StatsEvent(
        prompt_tokens_per_s=float(get("prompt")),
        generation_tokens_per_s=float(get("gen")),
        running=int(get("running")),
        waiting=int(get("waiting")),
        kv_usage_frac=float(get("kv")) / 100.0,
        prefix_hit_frac=float(get("prefix")) / 100.0 if found["prefix"] else None,
        preemptions=int(get("preempt")) if found["preempt"] else 0,
        line=line,
    )


# ------------------------------------------------------------------------------ failures
#: how much a kind outranks others: a later failure replaces the current one only when higher
_RANK = {fk.UNKNOWN: 1, fk.ENGINE_DIED: 2, fk.STARTUP_TIMEOUT: 2, fk.GATED_REPO: 4}
_SPECIFIC_RANK = 3

_EXC_LINE = re.compile(
    r"^(?:[A-Za-z_]\w{0,80}\.){0,8}"
    r"(?P<cls>[A-Za-z_]\w{0,80}(?:Error|Exception|Interrupt)|Exception)(?:: (?P<text>.*))?$"
)
_GENERIC_ERRORS = re.compile(
    r"EngineDeadError|Engine core initialization failed|WorkerProc initialization failed|"
    r"Worker failed with error|EngineCore encountered an issue|^RuntimeError: cancelled$|"
    r"Error retrieving file list"
)
_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory on device")
_OOM_LOADING_WRAPPER = re.compile(r"Failed to load model - not enough GPU memory")
_OOM_SIZES = (
    (
        "tried_to_allocate_bytes",
        re.compile(r"(?:Tried|trying) to allocate ([\d.]+) (GiB|MiB|KiB|bytes)"),
    ),
    ("device_total_bytes", re.compile(r"total capacity of ([\d.]+) (GiB|MiB|KiB|bytes)")),
    ("device_free_bytes", re.compile(r"of which ([\d.]+) (GiB|MiB|KiB|bytes) is free")),
    ("device_free_bytes", re.compile(r"\(free: (\d+)()")),
    ("device_total_bytes", re.compile(r", total: (\d+)()\)")),
)


@dataclass
class _Context:
    """What the scanner knows when classifying a line."""

    phase: str | None
    api_up: bool
    model: str | None
    port: int | None
    version: str | None
    root_error: str | None
    pydantic_field: str | None
    capacity: CapacityEvent = field(default_factory=CapacityEvent)
    utilization: float | None = None
    graph_capture: tuple[str, int, int] | None = None  # (mode, graphs done, graphs in all)
    last_error_line: str | None = None


def _kv_too_small(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    max_len = int(m[1])
    needed = gib_to_bytes(m[2])
    available = gib_to_bytes(m[3])
    est_m = re.search(r"estimated maximum model length is (\d+)", msg)
    est = int(est_m[1]) if est_m else None
    text = f"The {_tokens(max_len)}-token context needs more KV cache than the {m[3]} GiB available"
    text += f"; vLLM estimates {_tokens(est)} tokens would fit." if est else "."
    return Failure(
        fk.KV_CACHE_TOO_SMALL,
        text,
        est,
        details={
            "max_model_len": max_len,
            "needed_kv_bytes": needed,
            "available_kv_bytes": available,
            "estimated_max_model_len": est,
        },
    )


def _kv_tokens_too_few(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    """The V0 wording: the KV cache holds M tokens, fewer than one max-length sequence."""
    max_len, capacity = int(m[1]), int(m[2])
    return Failure(
        fk.KV_CACHE_TOO_SMALL,
        f"The {_tokens(max_len)}-token context is longer than the {_tokens(capacity)} tokens "
        f"the KV cache holds; a context of {_tokens(capacity)} tokens fits.",
        capacity,
        details={
            "max_model_len": max_len,
            "kv_capacity_tokens": capacity,
            "estimated_max_model_len": capacity,
        },
    )


def _negative_budget(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    """vLLM's KV budget came out negative (weights + activations + other tenants > budget)."""
    available = gib_to_bytes(m[1])
    util = ctx.utilization
    if util is None:
        util = ctx.capacity.gpu_memory_utilization
    asks = f"utilization {util:g}" if util is not None else "the memory fraction"
    return Failure(
        fk.NEGATIVE_KV_BUDGET,
        f"vLLM's KV cache budget came out at {m[1]} GiB: the model, its activations and any "
        f"other program using this GPU need more than {asks} gives vLLM; raise the memory "
        "fraction to one that covers them or close the other program on the GPU.",
        details={
            "available_kv_bytes": available,
            "gpu_memory_utilization": util,
            "weights_bytes": ctx.capacity.weights_bytes,
            "requested_bytes": ctx.capacity.requested_bytes,
            "total_bytes": ctx.capacity.total_bytes,
        },
    )


def _free_below_util(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    free, total, util, requested = m["free"], m["total"], m["util"], m["req"]
    what = "RAM" if "CPU memory" in msg else "GPU memory"
    return Failure(
        fk.FREE_MEMORY_BELOW_UTILIZATION,
        f"Only {free} of {total} GiB {what} is free, less than the {requested} GiB that "
        f"utilization {util} asks for; lower the memory fraction or close other programs "
        "using it.",
        details={
            "free_bytes": gib_to_bytes(free),
            "total_bytes": gib_to_bytes(total),
            "gpu_memory_utilization": float(util),
            "requested_bytes": gib_to_bytes(requested),
            "requested_for": "utilization",
        },
    )


def _cpu_kv_alloc(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    free, total, requested = m[1], m[2], m[3]
    return Failure(
        fk.FREE_MEMORY_BELOW_UTILIZATION,
        f"Only {free} of {total} GiB is free, less than the {requested} GiB asked for the KV "
        "cache; lower the KV cache size.",
        details={
            "free_bytes": gib_to_bytes(free),
            "total_bytes": gib_to_bytes(total),
            "gpu_memory_utilization": None,
            "requested_bytes": gib_to_bytes(requested),
            "requested_for": "kv_cache",
        },
    )


def _oom(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    details: dict[str, Any] = {"phase": ctx.phase}
    for key, rx in _OOM_SIZES:
        sm = rx.search(msg)
        if sm:
            details[key] = _size_to_bytes(sm[1], sm[2])
    if ctx.graph_capture is not None and not ctx.api_up:
        mode, done, total = ctx.graph_capture
        details.update(cudagraph_mode=mode, graphs_captured=done, graphs_total=total)
    if ctx.api_up:
        kind = fk.CUDA_OOM_SERVING
        text = (
            "The GPU ran out of memory while serving requests; lower the memory fraction, "
            "max_num_seqs or max_num_batched_tokens."
        )
    elif _OOM_LOADING_WRAPPER.search(msg) or ctx.phase not in _ENGINE_PHASES:
        kind = fk.CUDA_OOM_LOADING
        text = (
            "The GPU ran out of memory while loading the model weights; use a smaller or "
            "quantized checkpoint or free GPU memory used by other programs."
        )
    elif ctx.graph_capture is not None:
        kind = fk.CUDA_OOM_GRAPHS
        mode, done, total = ctx.graph_capture
        text = (
            f"The GPU ran out of memory while capturing CUDA graphs ({mode}, {done} of {total} "
            "done); try eager mode, smaller capture sizes, PIECEWISE graphs or a lower memory "
            "fraction."
        )
    else:
        kind = fk.CUDA_OOM_GRAPHS
        text = (
            "The GPU ran out of memory while profiling or capturing CUDA graphs; try eager "
            "mode, fewer sequences or a lower memory fraction."
        )
    return Failure(kind, text, details=details)


def _fp8_triton(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    suggested = re.search(r"--kv-cache-dtype (\w+)", msg)
    dtype = m["dtype"].lower()
    return Failure(
        fk.UNSUPPORTED_KV_DTYPE,
        f"{m['dtype']} KV cache is not supported on this GPU (compute capability {m['cc']}); "
        f"use --kv-cache-dtype {suggested[1] if suggested else 'auto'}.",
        details={
            "kv_cache_dtype": "fp8" if dtype == "fp8" else dtype,
            "compute_capability": m["cc"],
            "suggested_kv_cache_dtype": suggested[1] if suggested else "auto",
        },
    )


def _fp8_arch(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    return Failure(
        fk.UNSUPPORTED_KV_DTYPE,
        "FP8 KV cache is not supported on this GPU (native FP8 needs compute capability 8.9 "
        "or newer); use the auto KV cache dtype.",
        details={"kv_cache_dtype": "fp8", "suggested_kv_cache_dtype": "auto"},
    )


def _backend_kv(m: re.Match[str], msg: str, ctx: _Context) -> Failure | None:
    if not re.search(r"kv_cache_dtype not supported|FP8 KV cache", msg):
        return Failure(
            fk.UNSUPPORTED_MODEL,
            "No attention backend of this vLLM supports this model on this GPU (head size, "
            "block size or compute capability); see the reasons vLLM lists in the log.",
            details={"reasons": msg[m.end():].strip()[:300]},
        )
    return Failure(
        fk.UNSUPPORTED_KV_DTYPE,
        "No attention backend on this GPU supports the chosen KV cache dtype; use the auto "
        "KV cache dtype.",
        details={"suggested_kv_cache_dtype": "auto"},
    )


def _quant_cc(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    method = m["method"] or "checkpoint's"
    need, have = int(m["need"]), int(m["have"])
    return Failure(
        fk.UNSUPPORTED_QUANTIZATION,
        f"The {method} quantization needs compute capability {need / 10:.1f} but this GPU has "
        f"{have / 10:.1f}; pick a checkpoint with another quantization.",
        details={"method": m["method"], "min_capability": need, "current_capability": have},
    )


def _model_label(ctx: _Context, fallback: str | None = None) -> str:
    name = fallback or ctx.model
    return f"'{name}'" if name else "The model"


def _not_found_path(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    name = m[1]
    folder = name.startswith(("/", "~", "./", "../"))  # a folder, not a repo id: not there
    if folder and ctx.phase in (LOADING_WEIGHTS, PROFILING, COMPILING):
        return Failure(
            fk.MODEL_NOT_FOUND,
            f"The model folder '{name}' was removed (or moved) while vLLM was loading it; put "
            "the model back or pick another one, and start again.",
            details={"model": name, "reason": "removed_while_loading"},
        )
    if folder:
        return Failure(
            fk.MODEL_NOT_FOUND,
            f"The model folder '{name}' does not exist or has no config.json (removed, moved or "
            "mistyped); put the model back or pick another one.",
            details={"model": name, "reason": "missing_folder"},
        )
    return Failure(
        fk.MODEL_NOT_FOUND,
        f"'{name}' is neither a local folder with a config.json nor a Hugging Face repo id.",
        details={"model": name, "reason": "invalid"},
    )


def _weights_unreadable(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    name = m[1]
    return Failure(
        fk.MODEL_NOT_FOUND,
        f"vLLM found no readable weights in the model folder '{name}' while loading it (the "
        "folder was emptied or made unreadable after vLLM had started); put the weights back "
        "or give them read permission, and start again.",
        details={"model": name, "reason": "weights_unreadable"},
    )


#: why a Hub model could not be found, and what the user is told after its name
_HUB_NOT_FOUND: dict[str, str] = {
    "offline": "is not in the local Hugging Face cache and offline mode is on; download it "
    "first or turn offline mode off.",
    "network": "is not cached and the Hugging Face hub could not be reached; check the network "
    "or download the model first.",
    "missing": "does not exist on the Hugging Face hub (or is private); check the repo id.",
}


def _hub_not_found(reason: str) -> _Builder:
    """The builder of a MODEL_NOT_FOUND failure for a Hub model (``reason`` a key of
    :data:`_HUB_NOT_FOUND`)."""
    told = _HUB_NOT_FOUND[reason]

    def build(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
        return Failure(
            fk.MODEL_NOT_FOUND,
            f"{_model_label(ctx)} {told}",
            details={"model": ctx.model, "reason": reason},
        )

    return build


def _gated(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    named = re.search(r"Access to model (\S+) is restricted", msg)
    url = re.search(r"huggingface\.co/(?:api/models/)?([\w.-]+/[\w.-]+)", msg)
    name = ctx.model or (named[1] if named else None) or (url[1] if url else None)
    return Failure(
        fk.GATED_REPO,
        f"{_model_label(ctx, name)} is gated or private: accept its licence on huggingface.co "
        "and set a Hugging Face token.",
        details={"model": name},
    )


def _max_len_above(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    requested = int(m[1])
    limits = [float(v) for v in re.findall(r"=([\d.]+)", m[2])]
    model_max = int(min(limits)) if limits else None
    limit = f" of {_tokens(model_max)} tokens" if model_max else ""
    return Failure(
        fk.MAX_MODEL_LEN_ABOVE_MODEL,
        f"The requested {_tokens(requested)}-token context is longer than the model's "
        f"limit{limit}.",
        details={"max_model_len": requested, "model_max_model_len": model_max},
    )


def _port(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    which = f"Port {ctx.port}" if ctx.port else "The port"
    return Failure(
        fk.PORT_IN_USE,
        f"{which} is already in use by another program; pick another port.",
        details={"port": ctx.port},
    )


def _unrecognized(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    args = m[1].split()
    flags = [a for a in args if a.startswith("-") and not re.fullmatch(r"-\d[\d.]*", a)]
    first = flags[0] if flags else (args[0] if args else "?")
    return Failure(
        fk.UNKNOWN_FLAG,
        removed_flag_message(first, ctx.version)
        if first.startswith("-")
        else f"vLLM did not accept the argument {first}.",
        details={"flags": [normalize_flag(f) for f in flags], "arguments": m[1]},
    )


def _task_hint(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    return Failure(
        fk.UNKNOWN_FLAG,
        removed_flag_message("--task", ctx.version),
        details={"flags": ["--task"]},
    )


def _ambiguous(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    return Failure(
        fk.UNKNOWN_FLAG,
        f"{m[1]} is ambiguous for vLLM (it could mean {m[2]}); write the full flag.",
        details={"flags": [m[1]], "candidates": [c.strip() for c in m[2].split(",")]},
    )


def _bad_value(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    flag = m["flag"].split("/")[0]
    value = m["value"]
    return Failure(
        fk.BAD_FLAG_VALUE,
        f"vLLM rejected the value {value} for {flag}.",
        details={"flag": flag, "value": value.strip("'")},
    )


def _bad_value_other(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    flag = m["flag"].split("/")[0]
    return Failure(
        fk.BAD_FLAG_VALUE,
        f"vLLM rejected {flag}: {m['why']}.",
        details={"flag": flag},
    )


def _pydantic(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    field_name = ctx.pydantic_field or "a setting"
    value = re.search(r"input_value=([^,\]]+)", msg)
    shown = f"{field_name}={value[1]}" if value else field_name
    return Failure(
        fk.BAD_FLAG_VALUE,
        f"vLLM rejected {shown}: input should be {m[1].strip().rstrip('.')}.",
        details={
            "flag": "--" + field_name.replace("_", "-") if ctx.pydantic_field else None,
            "value": value[1] if value else None,
        },
    )


def _named_bad_value(flag: str) -> Callable[[re.Match[str], str, _Context], Failure]:
    def build(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
        return Failure(
            fk.BAD_FLAG_VALUE,
            f"vLLM does not know {flag} {m[1]}; pick one of the values it lists.",
            details={"flag": flag, "value": m[1]},
        )

    return build


def _no_kv(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    return Failure(
        fk.NO_KV_MEMORY,
        "No memory is left for the KV cache after loading the model; raise the memory "
        "fraction or use a smaller model.",
    )


def _timeout(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    return Failure(
        fk.STARTUP_TIMEOUT,
        "The vLLM engine did not finish starting in time (VLLM_ENGINE_READY_TIMEOUT_S); "
        "slow weight loading is the usual cause.",
    )


def _engine_died(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    when = "while serving" if ctx.api_up else "during start-up"
    worker = re.search(r"Worker proc (\S+) died unexpectedly \(exit code: (-?\d+)\)", msg)
    if worker:
        cause = f"worker {worker[1]} exited unexpectedly (exit code {worker[2]})"
    elif ctx.root_error:
        cause = ctx.root_error
    else:
        cause = None
    text = f"The vLLM engine died {when}" + (f": {cause.rstrip('.')}." if cause else ".")
    return Failure(fk.ENGINE_DIED, text, details={"root_cause": cause, "serving": ctx.api_up})


def _init_failed(m: re.Match[str], msg: str, ctx: _Context) -> Failure:
    cause = ctx.root_error or ctx.last_error_line
    text = "The vLLM engine failed to start" + (f": {cause.rstrip('.')}." if cause else ".")
    return Failure(fk.UNKNOWN, text, details={"root_cause": cause})


_Builder = Callable[[re.Match[str], str, _Context], "Failure | None"]

def _fail(
    kind: str,
    since: str,
    before: str | None,
    pattern: str,
    build: _Builder,
    *examples: tuple[str, str],
    context: tuple[str, ...] = (),
    note: str = "",
) -> LineFormat:
    return LineFormat(
        kind, since, before, re.compile(pattern), examples, build=build, context=context,
        note=note,
    )


_ISSUE_OOM = "public report of a graph-capture OOM (recent V1 release, V2 model runner)"
_GRAPH_BAR = "Capturing CUDA graphs (FULL):  57%|█████▋    | 20/35 [00:02<00:01,  9.10it/s]"

#: every wording of the failures the fallback engine answers (kvpilot.core.fit.fallback)
FAILURE_FORMATS: tuple[LineFormat, ...] = (
    _fail(
        fk.KV_CACHE_TOO_SMALL, "0.8.0", None,
        r"To serve at least one request with the models?'s max seq len \((\d+)\),\s*\(?"
        r"([\d.]+) GiB KV cache is needed, which is larger than the available KV cache memory "
        r"\(([\d.]+) GiB\)",
        _kv_too_small,
        ("(EngineCore pid=6087) ERROR 11-29 08:19:51 [core.py:1510] ValueError: To serve at "
         "least one request with the model's max seq len (1024), (0.0 GiB KV cache is needed, "
         "which is larger than the available KV cache memory (0.0 GiB). Based on the available "
         "memory, the estimated maximum model length is 128.", _CPU32),
        ("ValueError: To serve at least one request with the models's max seq len (131072), "
         "(24.00 GiB KV cache is needed, which is larger than the available KV cache memory "
         "(5.31 GiB). Based on the available memory, the estimated maximum model length is "
         "28960.", "composed from the vLLM 0.11.0 format string ('models's')"),
        note="'models's' up to 0.1x, 'model's' later; the estimate from 0.9",
    ),
    _fail(
        fk.KV_CACHE_TOO_SMALL, "0.6.0", "0.11.0",
        r"The model's max seq len \((\d+)\) is larger than the maximum number of tokens that "
        r"can be stored in KV cache \((\d+)\)",
        lambda m, msg, ctx: _kv_tokens_too_few(m, msg, ctx),
        ("The model's max seq len (29000) is larger than the maximum number of tokens that can "
         "be stored in KV cache (23648).",
         _case("vllm10517-rtx3090-llama31-8b-29k-FAIL", "0.6, V0")),
        note="V0 worker (and the 0.6 V1 worker); carries the token capacity, not GiB",
    ),
    _fail(
        fk.NEGATIVE_KV_BUDGET, "0.9.0", None,
        r"Available KV cache memory: (-\d+(?:\.\d+)?) GiB", _negative_budget,
        ("[gpu_worker.py:424] Available KV cache memory: -8.59 GiB",
         _case("l40s-qwen35-4b-awq-16k-u0.30-cotenant-FAIL", "0.16.1")),
        ("Available KV cache memory: -1.44 GiB (NEGATIVE - INSUFFICIENT)",
         _case("llmd-h100-llama33-70b-fp8-tp1-FAIL", "unstated V1")),
        note="vLLM goes on to raise 'No available memory for the cache blocks'",
    ),
    _fail(
        fk.NEGATIVE_KV_BUDGET, "0.6.6", "0.11.0",
        r"the rest (?:of the memory )?reserved for KV Cache is (-\d+(?:\.\d+)?)GiB",
        _negative_budget,
        ("model weights take 20.51GiB; non_torch_memory takes 0.28GiB; PyTorch activation peak "
         "memory takes 1.16GiB; the rest of the memory reserved for KV Cache is -0.65GiB.",
         "composed from the vLLM 0.6.6 format string"),
    ),
    _fail(
        fk.NO_KV_MEMORY, "0.6.0", None, r"No available memory for the cache blocks", _no_kv,
        ("(EngineCore pid=7532) ERROR 11-29 08:20:41 [core.py:1510] ValueError: No available "
         "memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
         "the engine (this flag also controls CPU memory reservation on the CPU backend, despite "
         "its name).", _CPU32),
        ("ValueError: No available memory for the cache blocks.",
         _case("llmd-h100-llama33-70b-fp8-tp1-FAIL", "unstated V1")),
    ),
    _fail(
        fk.NO_KV_MEMORY, "0.14.0", None, r"Cannot auto-fit max_model_len: not enough GPU memory",
        _no_kv,
        ("ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve "
         "even a single token. Try increasing `gpu_memory_utilization`.",
         "composed from the vLLM 0.33.0 format string"),
    ),
    _fail(
        fk.FREE_MEMORY_BELOW_UTILIZATION, "0.9.0", None,
        r"(?:Free memory on device|Available memory on node)[^(]*"
        r"\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is less than desired "
        r"(?:GPU|CPU) memory utilization \((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\)",
        _free_below_util,
        ("(VllmWorker-0 pid=8622) ERROR 11-29 08:22:12 [multiproc_executor.py:953] ValueError: "
         "Available memory on node 0 (21.09/23.54 GiB) on startup is less than desired CPU "
         "memory utilization (0.92, 21.66 GiB).", _CPU32),
        ("(EngineCore pid=4188) ERROR 11-29 10:12:03 [core.py:1584] ValueError: Free memory on "
         "device cuda:0 (20.91/23.53 GiB) on startup is less than desired GPU memory utilization "
         "(0.92, 21.65 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
         "processes.", _GPU33),
        note="the device name ('cuda:0') is in the sentence from 0.2x",
    ),
    _fail(
        fk.FREE_MEMORY_BELOW_UTILIZATION, "0.20.0", None,
        r"Available memory on node \d+ \(([\d.]+)/([\d.]+) GiB\) on kv cache allocation is "
        r"less than requested memory for kv \(([\d.]+) GiB\)",
        _cpu_kv_alloc,
        ("(Worker pid=8123) ERROR 11-29 08:21:36 [multiproc_executor.py:1063] ValueError: "
         "Available memory on node 0 (22.04/23.54 GiB) on kv cache allocation is less than "
         "requested memory for kv (100.0 GiB).", _CPU32),
        note="CPU backend, explicit KV size",
    ),
    _fail(
        fk.CUDA_OOM_LOADING, "0.13.0", None, r"Failed to load model - not enough GPU memory", _oom,
        ("(EngineCore pid=4188) ERROR 11-29 10:00:40 [gpu_model_runner.py:5079] Failed to load "
         "model - not enough GPU memory. Try lowering --gpu-memory-utilization to free memory "
         "for weights, increasing --tensor-parallel-size, or using --quantization.", _GPU33),
        note="V1 model runner's wrapper around the OOM while loading (absent in 0.12)",
    ),
    _fail(
        fk.CUDA_OOM_GRAPHS, "0.20.0", None,
        r"memory allocation failed with OOM on device \d+ while trying to allocate", _oom,
        ("[rank0] memory allocation failed with OOM on device 0 while trying to allocate "
         "2097152 bytes (free: 2031616, total: 23661248512)", _ISSUE_OOM),
        context=(_GRAPH_BAR,),
        note="below the V2 runner's '(FULL)' capture bar, then 'Engine core initialization "
        "failed'; the report names no release and the line is not in vLLM's Python code",
    ),
    _fail(
        fk.CUDA_OOM_GRAPHS, "0.6.0", None,
        r"CUDA out of memory|OutOfMemoryError|out of memory on device", _oom,
        ("(EngineCore pid=4188) ERROR 11-29 10:05:49 [core.py:1584] torch.OutOfMemoryError: CUDA "
         "out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 23.53 GiB of "
         "which 41.06 MiB is free.", _GPU33),
        context=("Capturing CUDA graphs (PIECEWISE):  37%|███▋      | 25/67 [00:01<00:02]",),
        note="torch's message; loading / graphs / serving is told by the phase reached",
    ),
    _fail(
        fk.UNSUPPORTED_KV_DTYPE, "0.20.0", None,
        r"(?P<dtype>FP8|fp8|bfloat16) KV cache is not supported (?:by the \w+ attention "
        r"backend )?on .*?\(compute capability (?P<cc>[\d.]+)\)",
        _fp8_triton,
        ("(EngineCore pid=4188) ERROR 11-29 10:20:18 [core.py:1584] ValueError: FP8 KV cache is "
         "not supported by the Triton attention backend on NVIDIA GeForce RTX 3090 (compute "
         "capability 8.6); native FP8 (fp8e4nv) requires SM89+. Re-run with --kv-cache-dtype "
         "bfloat16.", _GPU33),
    ),
    _fail(
        fk.UNSUPPORTED_KV_DTYPE, "0.10.0", "0.12.0",
        r"type fp8e4nv not supported in this architecture", _fp8_arch,
        ("triton.compiler.errors.CompilationError: at 58:20: type fp8e4nv not supported in this "
         "architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')",
         "composed from vLLM issue #26431 (0.11.0, RTX 3090)"),
    ),
    _fail(
        fk.UNSUPPORTED_KV_DTYPE, "0.12.0", None,
        r"No valid attention backend found|Selected backend \S+ is not valid", _backend_kv,
        ("ValueError: No valid attention backend found for cuda with head_size: 128, dtype: "
         "torch.bfloat16, kv_cache_dtype: fp8, block_size: 16. Reasons: {FLASH_ATTN: "
         "[kv_cache_dtype not supported]}.", "composed from the vLLM 0.33.0 format string"),
        note="kind unsupported_model when no reason names the KV dtype",
    ),
    _fail(
        fk.UNSUPPORTED_QUANTIZATION, "0.6.0", None,
        r"The quantization method (?P<method>\S+) is not supported for the current GPU\. "
        r"Minimum capability: (?P<need>\d+)\. Current capability: (?P<have>\d+)",
        _quant_cc,
        ("Value error, The quantization method modelopt is not supported for the current GPU. "
         "Minimum capability: 80. Current capability: 75.", _GPU33),
    ),
    _fail(
        fk.UNSUPPORTED_QUANTIZATION, "0.6.0", None,
        r"(?P<method>)Quantization scheme is not supported for the current GPU\. "
        r"Min capability: (?P<need>\d+)\. Current capability: (?P<have>\d+)",
        _quant_cc,
        ("RuntimeError: Quantization scheme is not supported for the current GPU. Min "
         "capability: 89. Current capability: 86.", "composed from the vLLM 0.33.0 format "
         "string (compressed-tensors)"),
    ),
    _fail(
        fk.MAX_MODEL_LEN_ABOVE_MODEL, "0.6.0", None,
        r"User-specified max_model_len \((\d+)\) is greater than the derived max_model_len "
        r"\(([^)]*)\)",
        _max_len_above,
        ("Value error, User-specified max_model_len (4096) is greater than the derived "
         "max_model_len (max_position_embeddings=2048.0 or model_max_length=None in model's "
         "config.json).", _CPU32),
    ),
)

_ENGINE_DIED_FORMAT = _fail(
    fk.ENGINE_DIED, "0.8.0", None,
    r"EngineDeadError|EngineCore encountered a fatal error|died unexpectedly|"
    r"engine core exited unexpectedly",
    _engine_died,
    ("(EngineCore pid=6087) ERROR 11-29 08:19:55 [multiproc_executor.py:315] Worker proc "
     "VllmWorker-0 died unexpectedly (exit code: 0), shutting down executor.", _CPU32),
    note="only while the scanner is not shutting down",
)

#: failures no fallback changes the plan for (classified for the message only)
_OTHER_FAIL_RULES: tuple[tuple[re.Pattern[str], _Builder], ...] = (
    (re.compile(r"GatedRepoError|Cannot access gated repo|gated repo|40[13] Client Error"), _gated),
    (re.compile(r"Invalid repository ID or local directory specified: '([^']*)'"), _not_found_path),
    (re.compile(r"HFValidationError: Repo id must be in the form .*?: '([^']*)'"), _not_found_path),
    # pydantic's wording of the same HFValidationError (ModelConfig built from a vanished folder)
    (re.compile(r"Value error, Repo id must be in the form .*?: '([^']*)'"), _not_found_path),
    (re.compile(r"Cannot find any model weights with `([^`]*)`"), _weights_unreadable),
    (re.compile(r"outgoing traffic has been disabled"), _hub_not_found("offline")),
    (
        re.compile(
            r"We couldn't connect to 'https?://[^']+' to load|LocalEntryNotFoundError: An error "
            r"happened while trying to locate"
        ),
        _hub_not_found("network"),
    ),
    (
        re.compile(r"RepositoryNotFoundError|Repository Not Found|404 Client Error"),
        _hub_not_found("missing"),
    ),
    (re.compile(r"\[Errno (?:98|48)\] Address already in use|WinError 10048"), _port),
    (re.compile(r"error: unrecognized arguments: (.*)$"), _unrecognized),
    (re.compile(r"^Hint: --task is not a vllm serve option"), _task_hint),
    (re.compile(r"error: ambiguous option: (\S+) could match (.*)$"), _ambiguous),
    (
        re.compile(
            r"error: argument (?P<flag>\S+?): (?:invalid [\w ]+ value|invalid choice): "
            r"(?P<value>'[^']*')"
        ),
        _bad_value,
    ),
    (re.compile(r"error: argument (?P<flag>\S+?): (?P<why>expected .*)$"), _bad_value_other),
    (re.compile(r"^\s*Input should be (.*?)(?: \[type=.*)?$"), _pydantic),
    (re.compile(r"Invalid kv_cache_dtype: '([^']*)'"), _named_bad_value("--kv-cache-dtype")),
    (re.compile(r"Unknown quantization method: ([^.\s]+)"), _named_bad_value("--quantization")),
    (re.compile(r"Timed out waiting for engine core processes to start"), _timeout),
)

#: (pattern on the message, builder); first match wins for a line
_FAIL_RULES: tuple[tuple[re.Pattern[str], _Builder], ...] = (
    *((f.pattern, f.build) for f in FAILURE_FORMATS if f.build is not None),
    *_OTHER_FAIL_RULES,
    (_ENGINE_DIED_FORMAT.pattern, _engine_died),
    (re.compile(r"Engine core initialization failed"), _init_failed),
)

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


def _rank(kind: str) -> int:
    return _RANK.get(kind, _SPECIFIC_RANK)


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
    def _context(self) -> _Context:
        return _Context(
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

        stats = _parse_stats(msg, text)
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
        exc = _EXC_LINE.match(stripped[:300])
        if exc and exc["text"] and not _GENERIC_ERRORS.search(stripped):
            cleaned = stripped if exc["cls"] != "Exception" else exc["text"]
            self.last_error = cleaned
            if self.root_error is None:
                self.root_error = cleaned

    def _classify(self, msg: str, text: str) -> Failure | None:
        current = self._failure
        current_rank = _rank(current.kind) if current else 0
        for pattern, build in _FAIL_RULES:
            match = pattern.search(msg)
            if match is None:
                continue
            event = build(match, msg, self._context())
            if event is None:
                continue
            if _rank(event.kind) <= current_rank:
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
            + f"; vLLM estimates {_tokens(est)} tokens would fit.",
            details={**current.details, "estimated_max_model_len": est},
        )
        self._failure = updated
        return updated

    def _phase_for(self, msg: str) -> str | None:
        phase = next((ph for rx, ph in _PHASE_RULES if rx.search(msg)), None)
        if phase is None:
            return None
        current = self.phase
        if phase == current or current == STARTING_API:
            return None
        if current is not None:
            moving_on = PHASES.index(phase) > PHASES.index(current)
            if not moving_on and not (phase in _ENGINE_PHASES and current in _ENGINE_PHASES):
                return None
        self.phase = phase
        return phase

    def _capacity_for(self, msg: str, text: str) -> CapacityEvent | None:
        values: dict[str, Any] = {}
        if not _CAPACITY_HINT.search(msg):
            return None  # most lines: no capacity row can match
        for row in CAPACITY_FORMATS:
            m = row.pattern.search(msg)
            if m and row.read is not None:
                values.update(row.read(m))
        if not values:
            return None
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
