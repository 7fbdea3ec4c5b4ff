"""Failure classification of vLLM log lines: every wording of the failures kvpilot names,
what each becomes (a :class:`kvpilot.core.base.failures.Failure` with its figures). The scanner
(:mod:`kvpilot.core.vllm.logparse`) feeds it lines with what it knows (:class:`ScanContext`).

:data:`FAILURE_FORMATS` holds the failures the fallback engine answers, each row with the
releases that print it and the recorded lines that prove it; the other rules classify failures
no fallback changes the plan for. A failure no rule recognises is reported with vLLM's own last
error line (``logparse.classify_exit``), never blank.

Classification choices:

* The CPU backend's KV-allocation check ("Available memory on node N ... on kv cache allocation
  is less than requested memory for kv") is classified by its own rules, in
  :mod:`kvpilot.core.vllm.cpu_kv_failures`.
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
from collections.abc import Callable
from typing import Any

from kvpilot.core.base import failures as fk
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.lifecycle import COMPILING, LOADING_WEIGHTS, PROFILING
from kvpilot.core.runtimes.discovery import normalize_flag, removed_flag_message
from kvpilot.core.vllm.cpu_kv_failures import CPU_KV_FORMATS
from kvpilot.core.vllm.logformats import (
    CPU32_RUN,
    ENGINE_PHASES,
    GPU33_FORMAT,
    FailureBuilder,
    LineFormat,
    ScanContext,
    gib_to_bytes,
    public_case,
    size_to_bytes,
    tokens_text,
)

# ------------------------------------------------------------------------------ failures
#: how much a kind outranks others: a later failure replaces the current one only when higher
_RANK = {fk.UNKNOWN: 1, fk.ENGINE_DIED: 2, fk.STARTUP_TIMEOUT: 2, fk.GATED_REPO: 4}
_SPECIFIC_RANK = 3

EXC_LINE = re.compile(
    r"^(?:[A-Za-z_]\w{0,80}\.){0,8}"
    r"(?P<cls>[A-Za-z_]\w{0,80}(?:Error|Exception|Interrupt)|Exception)(?:: (?P<text>.*))?$"
)
GENERIC_ERRORS = re.compile(
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


def _context_too_long(text: str, max_len: int, fits: int | None, **figures: int) -> Failure:
    """``kv_cache_too_small``: the ``max_len``-token context does not fit the KV cache; ``fits``
    is the longest context that does (tokens, None when vLLM does not say), ``figures`` the
    other numbers the line gave (bytes or tokens), kept in the details between the two."""
    return Failure(
        fk.KV_CACHE_TOO_SMALL,
        text,
        fits,
        details={"max_model_len": max_len, **figures, "estimated_max_model_len": fits},
    )


def _kv_too_small(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    max_len = int(m[1])
    needed = gib_to_bytes(m[2])
    available = gib_to_bytes(m[3])
    est_m = re.search(r"estimated maximum model length is (\d+)", msg)
    est = int(est_m[1]) if est_m else None
    text = (f"The {tokens_text(max_len)}-token context needs more KV cache than the {m[3]} GiB "
            "available")
    text += f"; vLLM estimates {tokens_text(est)} tokens would fit." if est else "."
    return _context_too_long(
        text, max_len, est, needed_kv_bytes=needed, available_kv_bytes=available
    )


def _kv_tokens_too_few(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    """The V0 wording: the KV cache holds M tokens, fewer than one max-length sequence."""
    max_len, capacity = int(m[1]), int(m[2])
    text = (f"The {tokens_text(max_len)}-token context is longer than the "
            f"{tokens_text(capacity)} tokens the KV cache holds; a context of "
            f"{tokens_text(capacity)} tokens fits.")
    return _context_too_long(text, max_len, capacity, kv_capacity_tokens=capacity)


def _mamba_blocks(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    """vLLM 0.20+: a hybrid linear-attention model has fewer pool blocks than sequences."""
    seqs, blocks = int(m[1]), int(m[2])
    return Failure(
        fk.MAMBA_CACHE_BLOCKS,
        f"--max-num-seqs {seqs} is more than the {blocks} blocks of the KV pool; each decoding "
        f"sequence of this hybrid model needs one block for its linear-attention state, so at "
        f"most {blocks} sequences can start.",
        details={"max_num_seqs": seqs, "num_blocks": blocks},
    )


def _negative_budget(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
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


def _free_below_util(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
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


def _oom(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    details: dict[str, Any] = {"phase": ctx.phase}
    for key, rx in _OOM_SIZES:
        sm = rx.search(msg)
        if sm:
            details[key] = size_to_bytes(sm[1], sm[2])
    if ctx.graph_capture is not None and not ctx.api_up:
        mode, done, total = ctx.graph_capture
        details.update(cudagraph_mode=mode, graphs_captured=done, graphs_total=total)
    if ctx.api_up:
        kind = fk.CUDA_OOM_SERVING
        text = (
            "The GPU ran out of memory while serving requests; lower the memory fraction, "
            "max_num_seqs or max_num_batched_tokens."
        )
    elif _OOM_LOADING_WRAPPER.search(msg) or ctx.phase not in ENGINE_PHASES:
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


def _fp8_triton(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
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


def _fp8_arch(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    return Failure(
        fk.UNSUPPORTED_KV_DTYPE,
        "FP8 KV cache is not supported on this GPU (native FP8 needs compute capability 8.9 "
        "or newer); use the auto KV cache dtype.",
        details={"kv_cache_dtype": "fp8", "suggested_kv_cache_dtype": "auto"},
    )


def _backend_kv(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure | None:
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


def _quant_cc(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    method = m["method"] or "checkpoint's"
    need, have = int(m["need"]), int(m["have"])
    return Failure(
        fk.UNSUPPORTED_QUANTIZATION,
        f"The {method} quantization needs compute capability {need / 10:.1f} but this GPU has "
        f"{have / 10:.1f}; pick a checkpoint with another quantization.",
        details={"method": m["method"], "min_capability": need, "current_capability": have},
    )


def _model_label(ctx: ScanContext, fallback: str | None = None) -> str:
    name = fallback or ctx.model
    return f"'{name}'" if name else "The model"


def _not_found_path(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
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


def _weights_unreadable(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
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


def _hub_not_found(reason: str) -> FailureBuilder:
    """The builder of a MODEL_NOT_FOUND failure for a Hub model (``reason`` a key of
    :data:`_HUB_NOT_FOUND`)."""
    told = _HUB_NOT_FOUND[reason]

    def build(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
        return Failure(
            fk.MODEL_NOT_FOUND,
            f"{_model_label(ctx)} {told}",
            details={"model": ctx.model, "reason": reason},
        )

    return build


def _gated(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    named = re.search(r"Access to model (\S+) is restricted", msg)
    url = re.search(r"huggingface\.co/(?:api/models/)?([\w.-]+/[\w.-]+)", msg)
    name = ctx.model or (named[1] if named else None) or (url[1] if url else None)
    return Failure(
        fk.GATED_REPO,
        f"{_model_label(ctx, name)} is gated or private: accept its licence on huggingface.co "
        "and set a Hugging Face token.",
        details={"model": name},
    )


def _max_len_above(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    requested = int(m[1])
    limits = [float(v) for v in re.findall(r"=([\d.]+)", m[2])]
    model_max = int(min(limits)) if limits else None
    limit = f" of {tokens_text(model_max)} tokens" if model_max else ""
    return Failure(
        fk.MAX_MODEL_LEN_ABOVE_MODEL,
        f"The requested {tokens_text(requested)}-token context is longer than the model's "
        f"limit{limit}.",
        details={"max_model_len": requested, "model_max_model_len": model_max},
    )


def _port(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    which = f"Port {ctx.port}" if ctx.port else "The port"
    return Failure(
        fk.PORT_IN_USE,
        f"{which} is already in use by another program; pick another port.",
        details={"port": ctx.port},
    )


def _unrecognized(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
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


def _task_hint(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    return Failure(
        fk.UNKNOWN_FLAG,
        removed_flag_message("--task", ctx.version),
        details={"flags": ["--task"]},
    )


def _ambiguous(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    return Failure(
        fk.UNKNOWN_FLAG,
        f"{m[1]} is ambiguous for vLLM (it could mean {m[2]}); write the full flag.",
        details={"flags": [m[1]], "candidates": [c.strip() for c in m[2].split(",")]},
    )


def _bad_value(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    flag = m["flag"].split("/")[0]
    value = m["value"]
    return Failure(
        fk.BAD_FLAG_VALUE,
        f"vLLM rejected the value {value} for {flag}.",
        details={"flag": flag, "value": value.strip("'")},
    )


def _bad_value_other(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    flag = m["flag"].split("/")[0]
    return Failure(
        fk.BAD_FLAG_VALUE,
        f"vLLM rejected {flag}: {m['why']}.",
        details={"flag": flag},
    )


def _lora_cpu_slots(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    return Failure(
        fk.BAD_FLAG_VALUE,
        f"vLLM needs --max-cpu-loras ({m[1]}) at least --max-loras ({m[2]}); raise it or "
        "lower --max-loras.",
        details={"flag": "--max-cpu-loras", "value": m[1]},
    )


def _lora_vocab(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    return Failure(
        fk.UNSUPPORTED_MODEL,
        f"vLLM serves LoRA adapters only for vocabularies up to {int(m[1]):,} tokens; this "
        "model's is larger.",
    )


def _pydantic(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
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


def _named_bad_value(flag: str) -> Callable[[re.Match[str], str, ScanContext], Failure]:
    def build(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
        return Failure(
            fk.BAD_FLAG_VALUE,
            f"vLLM does not know {flag} {m[1]}; pick one of the values it lists.",
            details={"flag": flag, "value": m[1]},
        )

    return build


#: 0.34's hints (v1/core/kv_cache_planning.py _more_kv_cache_memory_hint and the after-warm-up
#: hint of _auto_fit_max_model_len): the extensible KV cache already had every free byte
_ALL_MEMORY_HINT = re.compile(
    r"already takes all device memory|CUDA graph capture and warmup left no memory")


def _no_kv(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    util = ctx.utilization if ctx.utilization is not None else \
        ctx.capacity.gpu_memory_utilization
    if _ALL_MEMORY_HINT.search(msg) or ctx.capacity.kv_sized_after_warmup or (
            util is not None and util >= 1.0):
        after = " and CUDA graphs" if "warmup" in msg else ""
        return Failure(
            fk.NO_KV_MEMORY,
            f"No memory is left for the KV cache after the model, its activations{after}; "
            "vLLM already gives the cache all free GPU memory, so use a shorter context, "
            "fewer sequences or a smaller model, or close other programs on the GPU.",
            details={"all_memory": True},
        )
    return Failure(
        fk.NO_KV_MEMORY,
        "No memory is left for the KV cache after loading the model; raise the memory "
        "fraction or use a smaller model.",
    )


def _timeout(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    return Failure(
        fk.STARTUP_TIMEOUT,
        "The vLLM engine did not finish starting in time (VLLM_ENGINE_READY_TIMEOUT_S); "
        "slow weight loading is the usual cause.",
    )


def _engine_died(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
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


def _init_failed(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    cause = ctx.root_error or ctx.last_error_line
    text = "The vLLM engine failed to start" + (f": {cause.rstrip('.')}." if cause else ".")
    return Failure(fk.UNKNOWN, text, details={"root_cause": cause})



def _fail(
    kind: str,
    since: str,
    before: str | None,
    pattern: str,
    build: FailureBuilder,
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
         "memory, the estimated maximum model length is 128.", CPU32_RUN),
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
         public_case("vllm10517-rtx3090-llama31-8b-29k-FAIL", "0.6, V0")),
        note="V0 worker (and the 0.6 V1 worker); carries the token capacity, not GiB",
    ),
    _fail(
        fk.NEGATIVE_KV_BUDGET, "0.9.0", None,
        r"Available KV cache memory: (-\d+(?:\.\d+)?) GiB", _negative_budget,
        ("[gpu_worker.py:424] Available KV cache memory: -8.59 GiB",
         public_case("l40s-qwen35-4b-awq-16k-u0.30-cotenant-FAIL", "0.16.1")),
        ("Available KV cache memory: -1.44 GiB (NEGATIVE - INSUFFICIENT)",
         public_case("llmd-h100-llama33-70b-fp8-tp1-FAIL", "unstated V1")),
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
        fk.MAMBA_CACHE_BLOCKS, "0.20.0", None,
        r"max_num_seqs \((\d+)\) exceeds available Mamba cache blocks \((\d+)\)",
        _mamba_blocks,
        ("(EngineCore pid=4188) ERROR 11-29 10:31:07 [core.py:1584] ValueError: max_num_seqs "
         "(256) exceeds available Mamba cache blocks (143). Each decode sequence requires one "
         "Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs "
         "to at most 143 or increase gpu_memory_utilization.",
         "composed from the vLLM 0.20.0 / 0.21.0 format string (config/compilation.py)"),
        note="FULL decode CUDA graphs only (eager and PIECEWISE skip the check)",
    ),
    _fail(
        fk.NO_KV_MEMORY, "0.6.0", None, r"No available memory for the cache blocks", _no_kv,
        ("(EngineCore pid=7532) ERROR 11-29 08:20:41 [core.py:1510] ValueError: No available "
         "memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
         "the engine (this flag also controls CPU memory reservation on the CPU backend, despite "
         "its name).", CPU32_RUN),
        ("ValueError: No available memory for the cache blocks.",
         public_case("llmd-h100-llama33-70b-fp8-tp1-FAIL", "unstated V1")),
        ("ValueError: No available memory for the cache blocks. The extensible KV cache "
         "already takes all device memory left after the model and its activations; decrease "
         "`max_model_len` or `max_num_seqs`, or the model needs a device with more memory. See "
         "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
         "composed from the vLLM 0.34.0 wheel's format string"),
    ),
    _fail(
        fk.NO_KV_MEMORY, "0.14.0", None, r"Cannot auto-fit max_model_len: not enough GPU memory",
        _no_kv,
        ("ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve "
         "even a single token. Try increasing `gpu_memory_utilization`.",
         "composed from the vLLM 0.33.0 format string"),
        ("ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve "
         "even a single token. CUDA graph capture and warmup left no memory for the KV cache. "
         "Increase `gpu_memory_utilization`, reduce the memory CUDA graphs take (fewer or "
         "smaller capture sizes in the compilation config), or use more GPUs.",
         "composed from the vLLM 0.34.0 wheel's format string (after warm-up)"),
    ),
    _fail(
        fk.FREE_MEMORY_BELOW_UTILIZATION, "0.9.0", None,
        r"(?:Free memory on device|Available memory on node)[^(]*"
        r"\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is less than desired "
        r"(?:GPU|CPU) memory utilization \((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\)",
        _free_below_util,
        ("(VllmWorker-0 pid=8622) ERROR 11-29 08:22:12 [multiproc_executor.py:953] ValueError: "
         "Available memory on node 0 (21.09/23.54 GiB) on startup is less than desired CPU "
         "memory utilization (0.92, 21.66 GiB).", CPU32_RUN),
        ("(EngineCore pid=4188) ERROR 11-29 10:12:03 [core.py:1584] ValueError: Free memory on "
         "device cuda:0 (20.91/23.53 GiB) on startup is less than desired GPU memory utilization "
         "(0.92, 21.65 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
         "processes.", GPU33_FORMAT),
        note="the device name ('cuda:0') is in the sentence from 0.2x",
    ),
    *CPU_KV_FORMATS,
    _fail(
        fk.CUDA_OOM_LOADING, "0.13.0", None, r"Failed to load model - not enough GPU memory", _oom,
        ("(EngineCore pid=4188) ERROR 11-29 10:00:40 [gpu_model_runner.py:5079] Failed to load "
         "model - not enough GPU memory. Try lowering --gpu-memory-utilization to free memory "
         "for weights, increasing --tensor-parallel-size, or using --quantization.", GPU33_FORMAT),
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
         "which 41.06 MiB is free.", GPU33_FORMAT),
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
         "bfloat16.", GPU33_FORMAT),
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
         "Minimum capability: 80. Current capability: 75.", GPU33_FORMAT),
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
         "config.json).", CPU32_RUN),
    ),
)

_ENGINE_DIED_FORMAT = _fail(
    fk.ENGINE_DIED, "0.8.0", None,
    r"EngineDeadError|EngineCore encountered a fatal error|died unexpectedly|"
    r"engine core exited unexpectedly",
    _engine_died,
    ("(EngineCore pid=6087) ERROR 11-29 08:19:55 [multiproc_executor.py:315] Worker proc "
     "VllmWorker-0 died unexpectedly (exit code: 0), shutting down executor.", CPU32_RUN),
    note="only while the scanner is not shutting down",
)

#: failures no fallback changes the plan for (classified for the message only)
_OTHER_FAIL_RULES: tuple[tuple[re.Pattern[str], FailureBuilder], ...] = (
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
            r"(?P<value>'[^']*'|[^\s(']+)"
        ),
        _bad_value,
    ),
    (re.compile(r"error: argument (?P<flag>\S+?): (?P<why>expected .*)$"), _bad_value_other),
    (re.compile(r"^\s*Input should be (.*?)(?: \[type=.*)?$"), _pydantic),
    (re.compile(r"Invalid kv_cache_dtype: '([^']*)'"), _named_bad_value("--kv-cache-dtype")),
    # config/lora.py LoRAConfig and lora/layers/logits_processor.py refusals
    (re.compile(r"max_cpu_loras \((\d+)\) must be >= max_loras \((\d+)\)"), _lora_cpu_slots),
    (re.compile(r"When using LoRA, vocab size must be <= (\d+)"), _lora_vocab),
    (re.compile(r"Unknown quantization method: ([^.\s]+)"), _named_bad_value("--quantization")),
    (re.compile(r"Timed out waiting for engine core processes to start"), _timeout),
)

#: (pattern on the message, builder); first match wins for a line
FAIL_RULES: tuple[tuple[re.Pattern[str], FailureBuilder], ...] = (
    *((f.pattern, f.build) for f in FAILURE_FORMATS if f.build is not None),
    *_OTHER_FAIL_RULES,
    (_ENGINE_DIED_FORMAT.pattern, _engine_died),
    (re.compile(r"Engine core initialization failed"), _init_failed),
)


def rank(kind: str) -> int:
    return _RANK.get(kind, _SPECIFIC_RANK)
