"""The wordings vLLM prints, per release: line prefixes, start-up phases, capacity figures
and stats lines.

Line prefixes: the 0.33 form ``(EngineCore pid=12) INFO 11-29 08:10:34 [file.py:12] message``,
the 0.11 form whose ``(proc pid=)`` part is an ANSI-coloured decoration on every line, the V0
``INFO 11-20 ...`` form, and unprefixed lines (uvicorn, tracebacks, tqdm bars). ANSI codes and
carriage-return progress updates are removed before matching.

:data:`CAPACITY_FORMATS` holds every capacity wording (weights, the V0 worker summary, the
0.10.2 "Actual usage is ... bytes" summary, the 0.28+ summary merging weights and non-torch,
available KV including negative values, KV tokens, concurrency, the requested budget and free
memory, CUDA-graph terms), each row with the releases that print it and the recorded lines that
prove it. The failure wordings, in the same :class:`LineFormat` rows, are in
:mod:`kvpilot.core.vllm.logfailures`.

Capacity figures: vLLM prints memory in GiB rounded to 0.01 (``format_gib``), so a value read
here is exact only to +-0.005 GiB (about 5.4 MB); token counts and ``--kv-cache-memory=``
suggestions are exact integers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvpilot.core.base import versions
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.lifecycle import (
    CAPTURING_CUDA_GRAPHS,
    COMPILING,
    DOWNLOADING,
    KV_CACHE_ALLOCATED,
    LOADING_WEIGHTS,
    PROFILING,
    RESOLVING,
    STARTING_API,
)
from kvpilot.core.base.units import GiB, MiB
from kvpilot.core.vllm.logevents import CapacityEvent, StatsEvent

KiB = 1 << 10
#: half of the 0.01 GiB step vLLM rounds memory figures to
GIB_ROUNDING_BYTES = GiB // 200


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


def size_to_bytes(value: str, unit: str) -> int:
    scale = {"GiB": GiB, "MiB": MiB, "KiB": KiB, "bytes": 1, "B": 1}.get(unit, 1)
    return round(float(value) * scale)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def tokens_text(n: int) -> str:
    return f"{n:,}"


#: phases after loading that vLLM may interleave (V2 captures graphs twice, warm-up compiles)
ENGINE_PHASES = frozenset(
    {PROFILING, KV_CACHE_ALLOCATED, COMPILING, CAPTURING_CUDA_GRAPHS}
)

# ------------------------------------------------------------------------------ phase rules
PHASE_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
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
            r"GiB for KV cache on node|Extended KV cache to \d+ blocks",
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
@dataclass
class ScanContext:
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



#: a failure row's reader: (match, message, what the scanner knows) -> the failure, or None
FailureBuilder = Callable[[re.Match[str], str, ScanContext], "Failure | None"]
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
    build: FailureBuilder | None = None
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


CPU32_RUN = "tests/data/vllm_logs/cpu_0.32 (real vLLM 0.32.0 CPU run)"
GPU33_FORMAT = "composed from the vLLM 0.33.0 format string (tests/data/vllm_logs/gpu_excerpts)"
GPU34_FORMAT = "composed from the vLLM 0.34.0 wheel's format string (no GPU run recorded)"


def public_case(case_id: str, version: str) -> str:
    return f"public report {case_id} (vLLM {version}), benchmarks/data"


#: a word every capacity row's wording contains (a cheap test before the rows' patterns)
CAPACITY_HINT = re.compile(r"Gi[Bb]|GB|blocks|tokens|took|max model len|max_model_len|--kv-cache")

#: every capacity wording, oldest release first; all rows are tried on every line
CAPACITY_FORMATS: tuple[LineFormat, ...] = (
    _cap(
        "weights_loaded", "0.6.0", "0.8.0",
        r"Loading model weights took ([\d.]+) GB", _gib("weights_bytes"),
        ("Loading model weights took 15.5083 GB",
         public_case("gpu24-uitars7b-qwen2vl-8k-v066", "0.6.6")),
        ("Loading model weights took 14.9888 GB",
         public_case("vllm10517-rtx3090-llama31-8b-20k", "0.6, V0")),
        note="says GB but divides by 2**30",
    ),
    _cap(
        "weights_loaded", "0.8.0", None,
        r"Model loading took:? ([\d.]+) Gi?B(?: memory)?(?: and ([\d.]+) s)?",
        lambda m: {"weights_bytes": gib_to_bytes(m[1]),
                   **({"weights_load_s": float(m[2])} if m[2] else {})},
        ("Model loading took 6.0160 GB and 533.851791 seconds",
         public_case("t4-llama32-3b-fp16-2k", "0.8.2")),
        ("Model loading took 0.6951 GiB and 0.204926 seconds",
         public_case("rtx4090-cosyvoice2-llm-u0.40", "0.9.0")),
        ("Model loading took 14.2488 GiB", public_case("dl-a100-80-qwen2-7b-u0.25", "0.10.1.1")),
        ("Model loading took 13.04 GiB memory and 5.444196 seconds",
         public_case("l40s-qwen35-9b-awq-int8-16k-u0.48-cotenant", "0.16.1")),
        note="'GiB and' up to 0.27, 'GiB memory and' from 0.12 (V1 runner) and only it from 0.28",
    ),
    _cap(
        "weights_load_time", "0.8.0", None,
        r"Loading weights took ([\d.]+) s", lambda m: {"weights_load_s": float(m[1])},
        ("(Worker pid=30971) INFO 11-29 08:10:33 [default_loader.py:501] Loading weights took "
         "0.01 seconds", CPU32_RUN),
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
         public_case("vllm10517-rtx3090-llama31-8b-20k", "0.6, V0")),
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
         "gpu_memory_utilization (0.89) = 13.18GiB", public_case("t4-llama32-3b-fp16-2k", "0.8.2")),
        ("the current vLLM instance can use total_gpu_memory (23.67GiB) x "
         "gpu_memory_utilization (0.90) = 21.30GiB",
         public_case("gpu24-uitars7b-qwen2vl-8k-v066", "0.6.6")),
        note="V0 worker summary, first line",
    ),
    _cap(
        "v0_weights", "0.6.6", "0.11.0", r"model weights take " + _NUM + "GiB",
        _gib("weights_bytes"),
        ("model weights take 6.02GiB; non_torch_memory takes 0.05GiB; PyTorch activation peak "
         "memory takes 0.90GiB; the rest of the memory reserved for KV Cache is 6.22GiB.",
         public_case("t4-llama32-3b-fp16-2k", "0.8.2")),
        note="V0 worker summary, second line",
    ),
    _cap(
        "v0_non_torch", "0.6.6", "0.11.0", r"non_torch_memory (?:takes )?" + _NUM + "GiB",
        _gib("non_torch_bytes"),
        ("model weights take 0.70GiB; non_torch_memory takes 0.07GiB; PyTorch activation peak "
         "memory takes 1.12GiB; the rest of the memory reserved for KV Cache is 7.57GiB.",
         public_case("rtx4090-cosyvoice2-llm-u0.40", "0.9.0")),
    ),
    _cap(
        "v0_activation_peak", "0.6.6", "0.11.0",
        r"PyTorch activation peak memory takes " + _NUM + "GiB", _gib("activation_peak_bytes"),
        ("model weights take 15.51GiB; non_torch_memory takes 0.28GiB; PyTorch activation peak "
         "memory takes 1.16GiB; the rest of the memory reserved for KV Cache is 4.36GiB.",
         public_case("gpu24-uitars7b-qwen2vl-8k-v066", "0.6.6")),
    ),
    _cap(
        "v0_available_kv", "0.6.6", "0.11.0",
        r"the rest (?:of the memory )?reserved for KV Cache is " + _NUM + "GiB",
        _gib("available_kv_bytes"),
        ("model weights take 6.02GiB; non_torch_memory takes 0.05GiB; PyTorch activation peak "
         "memory takes 0.90GiB; the rest of the memory reserved for KV Cache is 6.22GiB.",
         public_case("t4-llama32-3b-fp16-2k", "0.8.2")),
        note="negative when the budget is exceeded (V0 then raises 'No available memory')",
    ),
    _cap(
        "v0_gpu_blocks", "0.6.0", "0.11.0", r"#?\s*(?:GPU|cuda|CUDA) blocks: (\d+)",
        lambda m: {"num_gpu_blocks": int(m[1])},
        ("# GPU blocks: 5102, # CPU blocks: 4681",
         public_case("gpu24-uitars7b-qwen2vl-8k-v066", "0.6.6")),
        ("# cuda blocks: 3637, # CPU blocks: 1170", public_case("t4-llama32-3b-fp16-2k", "0.8.2")),
        note="'# GPU blocks' in 0.6, '# <device> blocks' from 0.7",
    ),
    _cap(
        "v1_gpu_blocks", "0.10.0", "0.12.0", r"num_gpu_blocks is ?: ?(\d+)",
        lambda m: {"num_gpu_blocks": int(m[1])},
        ("Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: "
         "330018", public_case("dl-a100-80x4-gptoss120b-tp4-u0.8", "0.10.1.1")),
        note="the metrics logger's start-up line",
    ),
    _cap(
        "available_kv", "0.9.0", None, r"Available KV cache memory: " + _NUM + " GiB",
        _gib("available_kv_bytes"),
        ("Available KV cache memory: 5.01 GiB",
         public_case("dl-a100-80-qwen2-7b-u0.25", "0.10.1.1")),
        ("[gpu_worker.py:424] Available KV cache memory: -8.59 GiB",
         public_case("l40s-qwen35-4b-awq-16k-u0.30-cotenant-FAIL", "0.16.1")),
        note="'%.2f' up to 0.13, '%s' (format_gib) from 0.16; negative: see negative_kv_budget",
    ),
    _cap(
        "explicit_kv_cpu", "0.20.0", None,
        r"Explicitly set \(([\d.]+)/([\d.]+)\) GiB for KV cache",
        lambda m: {"available_kv_bytes": gib_to_bytes(m[1]), "total_bytes": gib_to_bytes(m[2])},
        ("(Worker pid=30971) INFO 11-29 08:10:34 [cpu_worker.py:260] Explicitly set "
         "(1.0/23.54) GiB for KV cache on node 0.", CPU32_RUN),
        note="CPU backend",
    ),
    _cap(
        "kv_tokens", "0.8.0", None, r"KV cache size:\s+([\d,]+) tokens",
        lambda m: {"kv_cache_tokens": _int(m[1])},
        ("GPU KV cache size: 93,872 tokens", public_case("dl-a100-80-qwen2-7b-u0.25", "0.10.1.1")),
        ("GPU KV cache size:         1,037,152 tokens",
         public_case("l40s-x4-qwen3-coder-30b-a3b-tp4-32k-v0240", "0.24.0")),
        ("GPU KV cache size: 519,681 tokens, Maximum concurrency for 16,384 tokens per "
         "request: 31.72x", public_case("t4-gemma4-e2b-qat-w4a16-16k-u0.90-v0290", "0.29.0")),
        note="own line up to 0.27, one line with the concurrency from 0.28 ('CPU' on CPU)",
    ),
    _cap(
        "max_concurrency", "0.6.4", None,
        r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x",
        lambda m: {"max_concurrency_at_len": _int(m[1]), "max_concurrency": float(m[2])},
        ("Maximum concurrency for 2048 tokens per request: 28.41x",
         public_case("t4-llama32-3b-fp16-2k", "0.8.2")),
        ("Maximum concurrency for 16,384 tokens per request: 5.73x",
         public_case("dl-a100-80-qwen2-7b-u0.25", "0.10.1.1")),
        note="V0 executor without thousands separators, V1 with; absent in 0.6.0",
    ),
    _cap(
        "cudagraph_captured", "0.6.4", None,
        r"Graph capturing finished in [\d.]+ secs?, took " + _NUM + " GiB",
        _gib("cudagraph_bytes"),
        ("Graph capturing finished in 41 secs, took 0.17 GiB",
         public_case("t4-llama32-3b-fp16-2k", "0.8.2")),
        ("Graph capturing finished in 3 secs, took 0.51 GiB",
         public_case("l40s-qwen35-9b-awq-int8-16k-u0.48-cotenant", "0.16.1")),
        note="0.6.0 prints the time only",
    ),
    _cap(
        "cudagraph_estimate", "0.19.0", None,
        r"Estimated CUDA graph memory: ([\d.]+) GiB", _gib("cudagraph_estimate_bytes"),
        ("(EngineCore pid=4188) INFO 11-29 10:40:33 [gpu_model_runner.py:5321] Estimated CUDA "
         "graph memory: 0.51 GiB total", GPU33_FORMAT),
        note="V1 model runner; 0.17/0.18 not checked",
    ),
    _cap(
        "cudagraph_pool", "0.19.0", None,
        r"CUDA graph pool memory: ([\d.]+) GiB \(actual\), ([\d.]+) GiB \(estimated\)",
        lambda m: {"cudagraph_bytes": gib_to_bytes(m[1]),
                   "cudagraph_estimate_bytes": gib_to_bytes(m[2])},
        ("(EngineCore pid=4188) INFO 11-29 10:40:38 [gpu_worker.py:1004] CUDA graph pool "
         "memory: 0.49 GiB (actual), 0.51 GiB (estimated), difference: 0.02 GiB (3.9%).",
         GPU33_FORMAT),
    ),
    _cap(
        "summary_free_at_startup", "0.10.2", None,
        r"Free memory on device:? \(?([\d.]+)/([\d.]+) GiB\)? on startup(?! is less)",
        lambda m: {"free_at_startup_bytes": gib_to_bytes(m[1]), "total_bytes": gib_to_bytes(m[2])},
        ("Free memory on device (21.83/22.06 GiB) on startup.",
         public_case("a10-gemma4-12b-sleepmode-u0.80", "unstated, 0.26-0.27 wording")),
        note="the memory summary; INFO in 0.10.2 and from 0.26, DEBUG in 0.11-0.25",
    ),
    _cap(
        "summary_requested_budget", "0.10.2", None,
        r"Desired GPU memory utilization is \(([\d.]+), ([\d.]+) GiB\)",
        lambda m: {"gpu_memory_utilization": float(m[1]), "requested_bytes": gib_to_bytes(m[2])},
        ("Desired GPU memory utilization is (0.8, 17.65 GiB).",
         public_case("a10-gemma4-12b-sleepmode-u0.80", "unstated, 0.26-0.27 wording")),
    ),
    _cap(
        "summary_weights", "0.10.2", "0.28.0", r"Actual usage is " + _NUM + " GiB for weight",
        _gib("weights_bytes"),
        ("Actual usage is 8.28 GiB for weight, 1.02 GiB for peak activation,",
         public_case("a10-gemma4-12b-sleepmode-u0.80", "unstated, 0.26-0.27 wording")),
    ),
    _cap(
        "summary_consumed", "0.28.0", None,
        r"Actual usage is " + _NUM + r" GiB for consumed memory", _gib("consumed_bytes"),
        ("(EngineCore pid=4188) INFO 11-29 10:40:38 [gpu_worker.py:1045] Free memory on device "
         "(23.1/23.53 GiB) on startup. Desired GPU memory utilization is (0.92, 21.65 GiB). "
         "Actual usage is 15.42 GiB for consumed memory (weights + non-torch), 1.0 GiB for peak "
         "activation, and 0.49 GiB for CUDAGraph memory.", GPU33_FORMAT),
        note="weights and non-torch merged; non-torch = consumed - weights loaded",
    ),
    _cap(
        "summary_activation_peak", "0.10.2", None, _NUM + r" GiB for peak activation",
        _gib("activation_peak_bytes"),
        ("Actual usage is 8.28 GiB for weight, 1.02 GiB for peak activation,",
         public_case("a10-gemma4-12b-sleepmode-u0.80", "unstated, 0.26-0.27 wording")),
    ),
    _cap(
        "summary_non_torch", "0.10.2", "0.28.0", _NUM + r" GiB for non-torch memory",
        _gib("non_torch_bytes"),
        ("-3.58 GiB for non-torch memory, and 0.68 GiB for CUDAGraph memory.",
         public_case("a10-gemma4-12b-sleepmode-u0.80", "unstated, 0.26-0.27 wording")),
        note="can be negative (memory freed during profiling)",
    ),
    _cap(
        "summary_cudagraph", "0.10.2", None, _NUM + r" GiB for CUDAGraph memory",
        _gib("cudagraph_bytes"),
        ("-3.58 GiB for non-torch memory, and 0.68 GiB for CUDAGraph memory.",
         public_case("a10-gemma4-12b-sleepmode-u0.80", "unstated, 0.26-0.27 wording")),
        note="the captured pool (capture_model's result)",
    ),
    _cap(
        "summary_kv_fit", "0.10.2", None,
        r"--kv-cache-memory=(\d+)`?(?: \([\d.]+ GiB\))? to fit into requested memory",
        lambda m: {"kv_cache_memory_fit_bytes": int(m[1])},
        ("--kv-cache-memory=68930180199 (64.2 GiB) to fit into requested memory",
         public_case("llmd-h100-qwen3-0.6b-16000", "unstated, >= 0.11")),
        note="without the '(x GiB)' in 0.10.2",
    ),
    _cap(
        "summary_kv_full", "0.10.2", None,
        r"--kv-cache-memory=(\d+)`?(?: \([\d.]+ GiB\))? to fully utilize",
        lambda m: {"kv_cache_memory_full_bytes": int(m[1])},
        ("Replace gpu_memory_utilization config with `--kv-cache-memory=5068061409` (4.72 GiB) "
         "to fit into requested memory, or `--kv-cache-memory=6001454284` (5.59 GiB) to fully "
         "utilize gpu memory.", GPU33_FORMAT),
    ),
    _cap(
        "summary_kv_in_use", "0.10.2", None,
        r"Current kv cache memory in use is (\d+(?:\.\d+)?) (GiB|bytes)",
        lambda m: {"available_kv_bytes": size_to_bytes(m[1], m[2])},
        ("(Worker_TP2_EP2) Free memory on device (43.93/44.42 GiB) on startup. Desired GPU memory "
         "utilization is (0.9, 39.98 GiB). Actual usage is 27.72 GiB for weight, 1.4 GiB for peak "
         "activation, 0.21 GiB for non-torch memory, and 3.45 GiB for CUDAGraph memory. ... "
         "Current kv cache memory in use is 11423138508 bytes.",
         public_case("l40s-x8-qwen3-235b-2507-fp8-tp8", "0.10.2")),
        note="bytes in 0.10.2, GiB later",
    ),
    _cap(
        "max_model_len", "0.9.0", None, r"Using max model len (\d+)",
        lambda m: {"max_model_len": int(m[1])},
        ("(APIServer pid=29939) INFO 11-29 08:10:11 [model.py:2152] Using max model len 1024",
         CPU32_RUN),
    ),
    _cap(
        "max_model_len_auto_fit", "0.14.0", None,
        r"Auto-fit max_model_len: (?:reduced from \d+ to (\d+)|full model context length (\d+) "
        r"fits)(?!.*the final length is set after)",
        lambda m: {"max_model_len": int(m[1] or m[2])},
        ("Auto-fit max_model_len: reduced from 131072 to 32640 to fit in available KV cache "
         "memory (1.0 GiB CPU)", "vLLM 0.32.0 CPU run (reference notes)"),
        note="0.34 with the extensible KV cache adds '; the final length is set after CUDA "
        "graph capture and warmup' to a tentative fit: that is max_model_len_tentative",
    ),
    # ---- 0.34: the extensible KV cache (v1/worker/extensible_kv_cache.py,
    # v1/core/kv_cache_planning.py); lines composed from the 0.34.0 wheel's format strings
    _cap(
        "max_model_len_tentative", "0.34.0", None,
        r"Auto-fit max_model_len: (?:reduced from \d+ to (\d+)|full model context length (\d+) "
        r"fits).*the final length is set after CUDA graph capture and warmup",
        lambda m: {"max_model_len_tentative": int(m[1] or m[2])},
        ("Auto-fit max_model_len: reduced from 131072 to 32768 to fit in available KV cache "
         "memory (8.21 GiB GPU); the final length is set after CUDA graph capture and warmup",
         GPU34_FORMAT),
        note="v1/core/kv_cache_planning.py _auto_fit_max_model_len before warm-up",
    ),
    _cap(
        "max_model_len_final", "0.34.0", None,
        r"Auto-fit max_model_len: using max_model_len=(\d+), which fits|"
        r"--max-model-len auto reduced max_model_len from \d+ to (\d+)",
        lambda m: {"max_model_len": int(m[1] or m[2])},
        ("Auto-fit max_model_len: using max_model_len=32768, which fits in the KV cache memory "
         "left after CUDA graph capture and warmup (4.91 GiB GPU).", GPU34_FORMAT),
        ("--max-model-len auto reduced max_model_len from 131072 to 30000 (4.91 GiB GPU left "
         "for the KV cache after CUDA graph capture and warmup).", GPU34_FORMAT),
        note="after warm-up (finalize_extensible_kv_cache), or any 0.34 fit without the "
        "extension; the WARNING form below 8,192 tokens reads the same",
    ),
    _cap(
        "kv_after_warmup", "0.34.0", None,
        r"Memory after warmup: ([\d.]+) GiB free, .*?; (\d+) KV cache blocks \(([\d.]+) GiB\) "
        r"fit within the requested ([\d.]+) GiB",
        lambda m: {"free_after_warmup_bytes": gib_to_bytes(m[1]), "num_gpu_blocks": int(m[2]),
                   "available_kv_bytes": gib_to_bytes(m[3]), "kv_sized_after_warmup": True,
                   "requested_bytes": gib_to_bytes(m[4])},
        ("Memory after warmup: 6.55 GiB free, 0.52 GiB committed to the KV cache, 0.69 GiB kept "
         "for transient activations (0.69 GiB allocated at peak, 0.12 GiB of torch reservation "
         "growth); 4320 KV cache blocks (4.91 GiB) fit within the requested 23.65 GiB. Torch "
         "may reserve up to 15.61 GiB.", GPU34_FORMAT),
        note="v1/worker/extensible_kv_cache.py measure_kv_cache_blocks: the final size",
    ),
    _cap(
        "kv_extended", "0.34.0", None,
        r"Extended KV cache to (\d+) blocks \(([\d.]+) GiB\)",
        lambda m: {"num_gpu_blocks": int(m[1]), "available_kv_bytes": gib_to_bytes(m[2]),
                   "kv_sized_after_warmup": True},
        ("Extended KV cache to 4320 blocks (4.91 GiB).", GPU34_FORMAT),
        note="v1/worker/extensible_kv_cache.py extend_kv_cache: the committed final cache",
    ),
    _cap(
        "kv_withheld", "0.34.0", None,
        r"gpu_memory_utilization=([\d.]+) caps this instance at ([\d.]+) GiB, keeping ([\d.]+) "
        r"GiB of free device memory out of the KV cache",
        lambda m: {"gpu_memory_utilization": float(m[1]), "requested_bytes": gib_to_bytes(m[2]),
                   "kv_withheld_bytes": gib_to_bytes(m[3])},
        ("gpu_memory_utilization=0.85 caps this instance at 20.1 GiB, keeping 1.5 GiB of free "
         "device memory out of the KV cache. The extensible KV cache is sized from the memory "
         "measured after warmup and CUDA graph capture, so vLLM's own use needs no headroom "
         "below 1.0.", GPU34_FORMAT),
        note="WARNING, only for 0.7 < utilization < 1.0 withholding >= 1 GiB",
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


def parse_stats(message: str, line: str) -> StatsEvent | None:
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
