"""vLLM log lines -> events: start-up phases, capacity figures, stats, classified failures.

Works for the log formats of vLLM 0.11 to 0.33: the 0.33 prefix
``(EngineCore pid=12) INFO 11-29 08:10:34 [file.py:12] message``, the 0.11 form whose
``(proc pid=)`` part is an ANSI-coloured decoration on every line, and unprefixed lines
(uvicorn, tracebacks, tqdm bars). ANSI codes and carriage-return progress updates are removed
before matching. Unknown or garbage lines produce no event and never raise.

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
  not enough GPU memory" wrapper) ``cuda_oom_loading``.
"""

from __future__ import annotations

import re
import signal
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from kvpilot.core import failures as fk
from kvpilot.core.vllm.runtime import normalize_flag, removed_flag_message

GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10
#: half of the 0.01 GiB step vLLM rounds memory figures to
GIB_ROUNDING_BYTES = GiB // 200

# ------------------------------------------------------------------------------ phases
RESOLVING = "resolving"
DOWNLOADING = "downloading"
LOADING_WEIGHTS = "loading_weights"
PROFILING = "profiling"
KV_CACHE_ALLOCATED = "kv_cache_allocated"
COMPILING = "compiling"
CAPTURING_CUDA_GRAPHS = "capturing_cuda_graphs"
STARTING_API = "starting_api"

PHASES: tuple[str, ...] = (
    RESOLVING,
    DOWNLOADING,
    LOADING_WEIGHTS,
    PROFILING,
    KV_CACHE_ALLOCATED,
    COMPILING,
    CAPTURING_CUDA_GRAPHS,
    STARTING_API,
)
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
    request"; ``consumed_bytes`` is weights + non-torch memory from the 0.2x summary line, and
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
class FailureEvent:
    """A classified failure: ``kind`` from :mod:`kvpilot.core.failures`, one-sentence message.

    ``estimated_max_model_len`` is vLLM's own estimate when the KV cache is too small for the
    context; ``details`` holds the parsed numbers (bytes, tokens, flags) for the fallback engine.
    """

    kind: str
    message: str
    estimated_max_model_len: int | None = None
    line: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)


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


Event = PhaseEvent | CapacityEvent | StatsEvent | FailureEvent | ReadyHintEvent | ShutdownEvent


# ------------------------------------------------------------------------------ line parsing
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_PREFIX = re.compile(
    r"^(?:\((?P<proc>[\w.:-]+) pid=(?P<pid>\d+)\)\s+)?"
    r"(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<ts>\d\d-\d\d \d\d:\d\d:\d\d) "
    r"\[(?P<file>[^\]:]+):(?P<lineno>\d+)\] ?)?"
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

# ------------------------------------------------------------------------------ capacity rules
_CAP_RULES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], dict[str, Any]]], ...] = (
    (
        re.compile(r"Model loading took ([\d.]+) GiB(?: memory)? and ([\d.]+) s"),
        lambda m: {"weights_bytes": gib_to_bytes(m[1]), "weights_load_s": float(m[2])},
    ),
    (
        re.compile(r"Loading weights took ([\d.]+) s"),
        lambda m: {"weights_load_s": float(m[1])},
    ),
    (
        re.compile(r"Available KV cache memory: ([\d.]+) GiB"),
        lambda m: {"available_kv_bytes": gib_to_bytes(m[1])},
    ),
    (
        re.compile(r"Explicitly set \(([\d.]+)/([\d.]+)\) GiB for KV cache"),
        lambda m: {"available_kv_bytes": gib_to_bytes(m[1]), "total_bytes": gib_to_bytes(m[2])},
    ),
    (
        re.compile(r"KV cache size: ([\d,]+) tokens"),
        lambda m: {"kv_cache_tokens": _int(m[1])},
    ),
    (
        re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"),
        lambda m: {"max_concurrency_at_len": _int(m[1]), "max_concurrency": float(m[2])},
    ),
    (
        re.compile(r"Graph capturing finished in [\d.]+ secs?, took ([\d.]+) GiB"),
        lambda m: {"cudagraph_bytes": gib_to_bytes(m[1])},
    ),
    (
        re.compile(r"Estimated CUDA graph memory: ([\d.]+) GiB"),
        lambda m: {"cudagraph_estimate_bytes": gib_to_bytes(m[1])},
    ),
    (
        re.compile(r"CUDA graph pool memory: ([\d.]+) GiB \(actual\), ([\d.]+) GiB \(estimated\)"),
        lambda m: {
            "cudagraph_bytes": gib_to_bytes(m[1]),
            "cudagraph_estimate_bytes": gib_to_bytes(m[2]),
        },
    ),
    (
        re.compile(r"Using max model len (\d+)"),
        lambda m: {"max_model_len": int(m[1])},
    ),
    (
        re.compile(r"Auto-fit max_model_len: reduced from \d+ to (\d+)"),
        lambda m: {"max_model_len": int(m[1])},
    ),
    (
        re.compile(r"Auto-fit max_model_len: full model context length (\d+) fits"),
        lambda m: {"max_model_len": int(m[1])},
    ),
)

_SUMMARY_START = re.compile(
    r"Free memory on device \(([\d.]+)/([\d.]+) GiB\) on startup\. "
    r"Desired GPU memory utilization is \(([\d.]+), ([\d.]+) GiB\)"
)
_SUMMARY_PARTS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], dict[str, Any]]], ...] = (
    (
        re.compile(r"Actual usage is ([\d.]+) GiB for consumed memory"),
        lambda m: {"consumed_bytes": gib_to_bytes(m[1])},
    ),
    (
        re.compile(r"([\d.]+) GiB for peak activation"),
        lambda m: {"activation_peak_bytes": gib_to_bytes(m[1])},
    ),
    (
        re.compile(r"([\d.]+) GiB for CUDAGraph memory"),
        lambda m: {"cudagraph_estimate_bytes": gib_to_bytes(m[1])},
    ),
    (
        re.compile(r"--kv-cache-memory=(\d+)` \([\d.]+ GiB\) to fit into requested memory"),
        lambda m: {"kv_cache_memory_fit_bytes": int(m[1])},
    ),
    (
        re.compile(r"--kv-cache-memory=(\d+)` \([\d.]+ GiB\) to fully utilize"),
        lambda m: {"kv_cache_memory_full_bytes": int(m[1])},
    ),
    (
        re.compile(r"Current kv cache memory in use is ([\d.]+) GiB"),
        lambda m: {"available_kv_bytes": gib_to_bytes(m[1])},
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
    ("tried_to_allocate_bytes", re.compile(r"Tried to allocate ([\d.]+) (GiB|MiB|KiB|bytes)")),
    ("device_total_bytes", re.compile(r"total capacity of ([\d.]+) (GiB|MiB|KiB|bytes)")),
    ("device_free_bytes", re.compile(r"of which ([\d.]+) (GiB|MiB|KiB|bytes) is free")),
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


def _kv_too_small(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    max_len = int(m[1])
    needed = gib_to_bytes(m[2])
    available = gib_to_bytes(m[3])
    est_m = re.search(r"estimated maximum model length is (\d+)", msg)
    est = int(est_m[1]) if est_m else None
    text = f"The {_tokens(max_len)}-token context needs more KV cache than the {m[3]} GiB available"
    text += f"; vLLM estimates {_tokens(est)} tokens would fit." if est else "."
    return FailureEvent(
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


def _free_below_util(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    free, total, util, requested = m["free"], m["total"], m["util"], m["req"]
    what = "RAM" if "CPU memory" in msg else "GPU memory"
    return FailureEvent(
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


def _cpu_kv_alloc(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    free, total, requested = m[1], m[2], m[3]
    return FailureEvent(
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


def _oom(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    details: dict[str, Any] = {"phase": ctx.phase}
    for key, rx in _OOM_SIZES:
        sm = rx.search(msg)
        if sm:
            details[key] = _size_to_bytes(sm[1], sm[2])
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
    else:
        kind = fk.CUDA_OOM_GRAPHS
        text = (
            "The GPU ran out of memory while profiling or capturing CUDA graphs; try eager "
            "mode, fewer sequences or a lower memory fraction."
        )
    return FailureEvent(kind, text, details=details)


def _fp8_triton(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    suggested = re.search(r"--kv-cache-dtype (\w+)", msg)
    dtype = m["dtype"].lower()
    return FailureEvent(
        fk.UNSUPPORTED_KV_DTYPE,
        f"{m['dtype']} KV cache is not supported on this GPU (compute capability {m['cc']}); "
        f"use --kv-cache-dtype {suggested[1] if suggested else 'auto'}.",
        details={
            "kv_cache_dtype": "fp8" if dtype == "fp8" else dtype,
            "compute_capability": m["cc"],
            "suggested_kv_cache_dtype": suggested[1] if suggested else "auto",
        },
    )


def _fp8_arch(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    return FailureEvent(
        fk.UNSUPPORTED_KV_DTYPE,
        "FP8 KV cache is not supported on this GPU (native FP8 needs compute capability 8.9 "
        "or newer); use the auto KV cache dtype.",
        details={"kv_cache_dtype": "fp8", "suggested_kv_cache_dtype": "auto"},
    )


def _backend_kv(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent | None:
    if not re.search(r"kv_cache_dtype not supported|FP8 KV cache", msg):
        return FailureEvent(
            fk.UNSUPPORTED_MODEL,
            "No attention backend of this vLLM supports this model on this GPU (head size, "
            "block size or compute capability); see the reasons vLLM lists in the log.",
            details={"reasons": msg[m.end():].strip()[:300]},
        )
    return FailureEvent(
        fk.UNSUPPORTED_KV_DTYPE,
        "No attention backend on this GPU supports the chosen KV cache dtype; use the auto "
        "KV cache dtype.",
        details={"suggested_kv_cache_dtype": "auto"},
    )


def _quant_cc(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    method = m["method"] or "checkpoint's"
    need, have = int(m["need"]), int(m["have"])
    return FailureEvent(
        fk.UNSUPPORTED_QUANTIZATION,
        f"The {method} quantization needs compute capability {need / 10:.1f} but this GPU has "
        f"{have / 10:.1f}; pick a checkpoint with another quantization.",
        details={"method": m["method"], "min_capability": need, "current_capability": have},
    )


def _model_label(ctx: _Context, fallback: str | None = None) -> str:
    name = fallback or ctx.model
    return f"'{name}'" if name else "The model"


def _not_found_path(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    name = m[1]
    return FailureEvent(
        fk.MODEL_NOT_FOUND,
        f"'{name}' is neither a local folder with a config.json nor a Hugging Face repo id.",
        details={"model": name, "reason": "invalid"},
    )


def _not_found_offline(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    return FailureEvent(
        fk.MODEL_NOT_FOUND,
        f"{_model_label(ctx)} is not in the local Hugging Face cache and offline mode is on; "
        "download it first or turn offline mode off.",
        details={"model": ctx.model, "reason": "offline"},
    )


def _not_found_network(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    return FailureEvent(
        fk.MODEL_NOT_FOUND,
        f"{_model_label(ctx)} is not cached and the Hugging Face hub could not be reached; "
        "check the network or download the model first.",
        details={"model": ctx.model, "reason": "network"},
    )


def _not_found_repo(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    return FailureEvent(
        fk.MODEL_NOT_FOUND,
        f"{_model_label(ctx)} does not exist on the Hugging Face hub (or is private); check "
        "the repo id.",
        details={"model": ctx.model, "reason": "missing"},
    )


def _gated(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    named = re.search(r"Access to model (\S+) is restricted", msg)
    url = re.search(r"huggingface\.co/(?:api/models/)?([\w.-]+/[\w.-]+)", msg)
    name = ctx.model or (named[1] if named else None) or (url[1] if url else None)
    return FailureEvent(
        fk.GATED_REPO,
        f"{_model_label(ctx, name)} is gated or private: accept its licence on huggingface.co "
        "and set a Hugging Face token.",
        details={"model": name},
    )


def _max_len_above(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    requested = int(m[1])
    limits = [float(v) for v in re.findall(r"=([\d.]+)", m[2])]
    model_max = int(min(limits)) if limits else None
    limit = f" of {_tokens(model_max)} tokens" if model_max else ""
    return FailureEvent(
        fk.MAX_MODEL_LEN_ABOVE_MODEL,
        f"The requested {_tokens(requested)}-token context is longer than the model's "
        f"limit{limit}.",
        details={"max_model_len": requested, "model_max_model_len": model_max},
    )


def _port(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    which = f"Port {ctx.port}" if ctx.port else "The port"
    return FailureEvent(
        fk.PORT_IN_USE,
        f"{which} is already in use by another program; pick another port.",
        details={"port": ctx.port},
    )


def _unrecognized(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    args = m[1].split()
    flags = [a for a in args if a.startswith("-") and not re.fullmatch(r"-\d[\d.]*", a)]
    first = flags[0] if flags else (args[0] if args else "?")
    return FailureEvent(
        fk.UNKNOWN_FLAG,
        removed_flag_message(first, ctx.version)
        if first.startswith("-")
        else f"vLLM did not accept the argument {first}.",
        details={"flags": [normalize_flag(f) for f in flags], "arguments": m[1]},
    )


def _task_hint(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    return FailureEvent(
        fk.UNKNOWN_FLAG,
        removed_flag_message("--task", ctx.version),
        details={"flags": ["--task"]},
    )


def _ambiguous(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    return FailureEvent(
        fk.UNKNOWN_FLAG,
        f"{m[1]} is ambiguous for vLLM (it could mean {m[2]}); write the full flag.",
        details={"flags": [m[1]], "candidates": [c.strip() for c in m[2].split(",")]},
    )


def _bad_value(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    flag = m["flag"].split("/")[0]
    value = m["value"]
    return FailureEvent(
        fk.BAD_FLAG_VALUE,
        f"vLLM rejected the value {value} for {flag}.",
        details={"flag": flag, "value": value.strip("'")},
    )


def _bad_value_other(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    flag = m["flag"].split("/")[0]
    return FailureEvent(
        fk.BAD_FLAG_VALUE,
        f"vLLM rejected {flag}: {m['why']}.",
        details={"flag": flag},
    )


def _pydantic(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    field_name = ctx.pydantic_field or "a setting"
    value = re.search(r"input_value=([^,\]]+)", msg)
    shown = f"{field_name}={value[1]}" if value else field_name
    return FailureEvent(
        fk.BAD_FLAG_VALUE,
        f"vLLM rejected {shown}: input should be {m[1].strip().rstrip('.')}.",
        details={
            "flag": "--" + field_name.replace("_", "-") if ctx.pydantic_field else None,
            "value": value[1] if value else None,
        },
    )


def _named_bad_value(flag: str) -> Callable[[re.Match[str], str, _Context], FailureEvent]:
    def build(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
        return FailureEvent(
            fk.BAD_FLAG_VALUE,
            f"vLLM does not know {flag} {m[1]}; pick one of the values it lists.",
            details={"flag": flag, "value": m[1]},
        )

    return build


def _no_kv(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    return FailureEvent(
        fk.NO_KV_MEMORY,
        "No memory is left for the KV cache after loading the model; raise the memory "
        "fraction or use a smaller model.",
    )


def _timeout(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    return FailureEvent(
        fk.STARTUP_TIMEOUT,
        "The vLLM engine did not finish starting in time (VLLM_ENGINE_READY_TIMEOUT_S); "
        "slow weight loading is the usual cause.",
    )


def _engine_died(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    when = "while serving" if ctx.api_up else "during start-up"
    worker = re.search(r"Worker proc (\S+) died unexpectedly \(exit code: (-?\d+)\)", msg)
    if worker:
        cause = f"worker {worker[1]} exited unexpectedly (exit code {worker[2]})"
    elif ctx.root_error:
        cause = ctx.root_error
    else:
        cause = None
    text = f"The vLLM engine died {when}" + (f": {cause.rstrip('.')}." if cause else ".")
    return FailureEvent(fk.ENGINE_DIED, text, details={"root_cause": cause, "serving": ctx.api_up})


def _init_failed(m: re.Match[str], msg: str, ctx: _Context) -> FailureEvent:
    cause = ctx.root_error
    text = "The vLLM engine failed to start" + (f": {cause.rstrip('.')}." if cause else ".")
    return FailureEvent(fk.UNKNOWN, text, details={"root_cause": cause})


_Builder = Callable[[re.Match[str], str, _Context], "FailureEvent | None"]

#: (pattern on the message, builder); first match wins for a line
_FAIL_RULES: tuple[tuple[re.Pattern[str], _Builder], ...] = (
    (
        re.compile(
            r"To serve at least one request with the models?'s max seq len \((\d+)\), "
            r"\(([\d.]+) GiB KV cache is needed, which is larger than the available KV cache "
            r"memory \(([\d.]+) GiB\)"
        ),
        _kv_too_small,
    ),
    (re.compile(r"No available memory for the cache blocks"), _no_kv),
    (re.compile(r"Cannot auto-fit max_model_len: not enough GPU memory"), _no_kv),
    (
        re.compile(
            r"(?:Free memory on device|Available memory on node)[^(]*"
            r"\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is less than desired "
            r"(?:GPU|CPU) memory utilization \((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\)"
        ),
        _free_below_util,
    ),
    (
        re.compile(
            r"Available memory on node \d+ \(([\d.]+)/([\d.]+) GiB\) on kv cache allocation is "
            r"less than requested memory for kv \(([\d.]+) GiB\)"
        ),
        _cpu_kv_alloc,
    ),
    (_OOM_LOADING_WRAPPER, _oom),
    (_OOM, _oom),
    (
        re.compile(
            r"(?P<dtype>FP8|fp8|bfloat16) KV cache is not supported (?:by the \w+ attention "
            r"backend )?on .*?\(compute capability (?P<cc>[\d.]+)\)"
        ),
        _fp8_triton,
    ),
    (re.compile(r"type fp8e4nv not supported in this architecture"), _fp8_arch),
    (
        re.compile(r"No valid attention backend found|Selected backend \S+ is not valid"),
        _backend_kv,
    ),
    (
        re.compile(
            r"The quantization method (?P<method>\S+) is not supported for the current GPU\. "
            r"Minimum capability: (?P<need>\d+)\. Current capability: (?P<have>\d+)"
        ),
        _quant_cc,
    ),
    (
        re.compile(
            r"(?P<method>)Quantization scheme is not supported for the current GPU\. "
            r"Min capability: (?P<need>\d+)\. Current capability: (?P<have>\d+)"
        ),
        _quant_cc,
    ),
    (re.compile(r"GatedRepoError|Cannot access gated repo|gated repo|40[13] Client Error"), _gated),
    (re.compile(r"Invalid repository ID or local directory specified: '([^']*)'"), _not_found_path),
    (re.compile(r"HFValidationError: Repo id must be in the form .*?: '([^']*)'"), _not_found_path),
    (re.compile(r"outgoing traffic has been disabled"), _not_found_offline),
    (
        re.compile(
            r"We couldn't connect to 'https?://[^']+' to load|LocalEntryNotFoundError: An error "
            r"happened while trying to locate"
        ),
        _not_found_network,
    ),
    (re.compile(r"RepositoryNotFoundError|Repository Not Found|404 Client Error"), _not_found_repo),
    (
        re.compile(
            r"User-specified max_model_len \((\d+)\) is greater than the derived max_model_len "
            r"\(([^)]*)\)"
        ),
        _max_len_above,
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
    (
        re.compile(
            r"EngineDeadError|EngineCore encountered a fatal error|died unexpectedly|"
            r"engine core exited unexpectedly"
        ),
        _engine_died,
    ),
    (re.compile(r"Engine core initialization failed"), _init_failed),
)

_NON_DEFAULT_MODEL = re.compile(r"'model(?:_tag)?': '([^']*)'")
_NON_DEFAULT_PORT = re.compile(r"'port': (\d+)")
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

    A :class:`FailureEvent` may be followed by a more specific one (a serving OOM's traceback
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
        self.lines_seen = 0
        self.recent: deque[str] = deque(maxlen=recent_lines)
        self._failure: FailureEvent | None = None
        self._pydantic_field: str | None = None
        self._in_pydantic = False
        self._shutdown_emitted = False

    # ------------------------------------------------------------------ public
    @property
    def failure(self) -> FailureEvent | None:
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

        self._track_errors(msg)
        if not self.shutting_down:
            failure = self._classify(msg, text)
            if failure is not None:
                events.append(failure)
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

    def _track_errors(self, msg: str) -> None:
        stripped = msg.strip()
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

    def _classify(self, msg: str, text: str) -> FailureEvent | None:
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
        summary = _SUMMARY_START.search(msg)
        if summary:
            values.update(
                free_at_startup_bytes=gib_to_bytes(summary[1]),
                total_bytes=gib_to_bytes(summary[2]),
                gpu_memory_utilization=float(summary[3]),
                requested_bytes=gib_to_bytes(summary[4]),
            )
            for pattern, read in _SUMMARY_PARTS:
                m = pattern.search(msg)
                if m:
                    values.update(read(m))
        else:
            for pattern, read in _CAP_RULES:
                m = pattern.search(msg)
                if m:
                    values.update(read(m))
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
) -> FailureEvent | None:
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
    cause = scanner.root_error or scanner.last_error
    last = cause or next((line for line in reversed(scanner.recent) if line.strip()), None)
    if returncode < 0:
        name = _signal_name(returncode)
        kind = fk.ENGINE_DIED if was_ready else fk.UNKNOWN
        return FailureEvent(
            kind,
            f"vLLM was killed by {name}"
            + (" while serving." if was_ready else " during start-up."),
            details={"returncode": returncode, "signal": name},
        )
    if returncode == 2:
        return FailureEvent(
            fk.UNKNOWN,
            "vLLM rejected its command line" + (f": {last.rstrip('.')}." if last else "."),
            line=last or "",
            details={"returncode": returncode},
        )
    return FailureEvent(
        fk.UNKNOWN,
        f"vLLM exited with status {returncode}" + (f": {last.rstrip('.')}." if last else "."),
        line=last or "",
        details={"returncode": returncode, "root_cause": cause},
    )
