"""Every line quoted by the public vLLM start-up reports, read by the scanner.

``benchmarks/data/calibration_cases.json`` and ``calibration_cases_more.json`` quote log lines
(``evidence``) from real reports, vLLM 0.6 to 0.29, with the figures the report gives
(``reported``) and how the start ended (``outcome``). Each case's lines go through one scanner
(for the case's release); every capacity figure read must equal the report's field (to vLLM's
0.01 GiB print rounding), every failed start must be classified as its outcome says, and every
line must either give a figure or be listed below with why it gives none.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from testpaths import REPO

from kvpilot.core.base import failures as fk
from kvpilot.core.base import versions
from kvpilot.core.base.failures import Failure
from kvpilot.core.vllm.logparse import (
    CAPACITY_FORMATS,
    FAILURE_FORMATS,
    CapacityEvent,
    LogScanner,
    classify_exit,
    parse_line,
)

GiB = 1 << 30
DATA = REPO / "benchmarks" / "data"
FILES = ("calibration_cases.json", "calibration_cases_more.json",
         "calibration_cases_2026.json")
CASES = [case for name in FILES for case in json.loads((DATA / name).read_text())]

#: report field -> the scanner's figures that carry it (any of them)
FIELDS: dict[str, tuple[str, ...]] = {
    "weights_gib": ("weights_bytes",),
    "non_torch_gib": ("non_torch_bytes",),
    "activation_peak_gib": ("activation_peak_bytes",),
    "peak_torch_gib": ("peak_torch_bytes",),
    "consumed_weights_plus_nontorch_gib": ("consumed_bytes",),
    "available_kv_gib": ("available_kv_bytes",),
    "cuda_graph_gib": ("cudagraph_bytes", "cudagraph_estimate_bytes"),
    "kv_cache_tokens": ("kv_cache_tokens",),
    "num_gpu_blocks": ("num_gpu_blocks",),
    "max_concurrency": ("max_concurrency",),
    "max_concurrency_at_len": ("max_concurrency_at_len",),
}
#: the case's own fields, compared when a line carried them
CASE_FIELDS = {
    "free_gib_at_startup": "free_at_startup_bytes",
    "gpu_total_gib_reported": "total_bytes",
    "gpu_memory_utilization": "gpu_memory_utilization",
}
#: report fields no start-up line of these releases prints
NOT_PRINTED = {"kv_block_size": "no start-up line prints the block size; the reports infer it"}

TABLE = "the author's table of figures, not a vLLM line"
PROSE = "the author's prose or another program's output, not a vLLM line"
COMMAND = "the command line the author ran, not vLLM output"
HINT = "the author's paraphrase of the summary's --kv-cache-memory hint (no report field)"
ECHO = "vLLM's echo of its settings, version or device: no capacity figure"
PRE_0_21_ADVICE = ("vLLM's advice on the utilization that would keep the pre-0.21 budget: "
                   "utilizations, no capacity figure")

#: (case id, evidence index) -> why that line gives no figure
NO_FIGURE: dict[tuple[str, int], str] = {
    ("llmd-h100-gptoss20b", 3): HINT,
    ("llmd-h100-gptoss120b", 0): TABLE,
    ("llmd-h100x2-llama33-70b-fp8-tp2", 3): "the author's shorthand of the summary's "
    "'X GiB for CUDAGraph memory' term, not the line vLLM prints",
    ("llmd-h100-llama31-8b", 2): HINT,
    ("llmd-h100-qwen3-32b-16000", 0): TABLE,
    ("llmd-h100x2-qwen3-32b-tp2", 0): TABLE,
    ("dl-a100-80-qwen2-7b-u0.25", 0): ECHO,
    ("dl-a100-80-qwen2-7b-u0.5", 0): ECHO,
    ("dl-a100-80x2-qwen2-7b-tp2-u0.25", 0): ECHO,
    ("dl-a100-40x2-qwen2-7b-tp2-u0.5", 0): ECHO,
    ("dl-a100-80x4-gptoss120b-tp4-u0.8", 0): ECHO,
    ("rtx4080-16g-qwen25-7b-awq-32k", 3): PROSE,
    ("rtx4080-16g-qwen25-7b-awq-32k", 4): HINT,
    ("l40s-x8-qwen3-235b-2507-fp8-tp8", 0): ECHO,
    ("rtx4090-cosyvoice2-llm-u0.40", 0): ECHO,
    ("rtx4090-cosyvoice2-llm-u0.40", 6): ECHO,
    ("rtx3090-qwen25-7b-8k-v066", 0): COMMAND,
    ("rtx3090-qwen25-7b-8k-v066", 5): "the author's rendition of the concurrency line "
    "('tokens/request = ... ÷ ...'), not what vLLM prints",
    ("gpu24-uitars7b-qwen2vl-8k-v066", 0): ECHO,
    ("spark-x2-minimax-m27-awq-196k-u0.80-FAIL", 1): "the first part of the KV-too-small "
    "sentence the report wrapped over three lines; read together with the next line",
    ("spark-x2-minimax-m27-awq-196k-u0.80-FAIL", 4): PROSE,
    ("spark-x2-minimax-m27-awq-196k-u0.85", 0): PROSE,
    ("l40s-x4-qwen3-coder-30b-a3b-tp4-32k-v0240", 0): COMMAND,
    ("l40s-x4-qwen3-coder-30b-a3b-tp4-32k-v0240", 4): PROSE,
    ("rtxpro6000-qwen3vl-30b-a3b-fp8-32k-u0.70-v0202", 0): PROSE,
    ("rtxpro6000-qwen3vl-30b-a3b-fp8-32k-u0.70-v0202", 1): PROSE,
    ("rtxpro6000-qwen3vl-30b-a3b-fp8-32k-u0.70-v0202", 3): PROSE,
    ("t4-gemma4-e2b-qat-w4a16-16k-u0.90-v0290", 0): ECHO,
    ("t4-gemma4-e2b-qat-w4a16-16k-u0.90-v0290", 4): PROSE,
    ("t4-gemma4-e2b-qat-w4a16-16k-u0.90-v0290", 5): PROSE,
    ("l4-gemma4-e2b-bf16-8k-u0.90-eager-v0210", 0): PROSE,
    ("l4-gemma4-e2b-bf16-8k-u0.90-eager-v0210", 1): COMMAND,
    ("l4-gemma4-e2b-bf16-8k-u0.90-eager-v0210", 2): PROSE,
    ("l40s-qwen35-9b-awq-int8-16k-u0.48-cotenant", 0): ECHO,
    ("l40s-qwen35-9b-awq-int8-16k-u0.48-cotenant", 1): ECHO,
    ("l40s-qwen35-4b-awq-16k-u0.30-cotenant-FAIL", 0): ECHO,
    ("l40s-qwen35-4b-awq-16k-u0.30-cotenant-FAIL", 3): "vLLM's generic 'EngineCore failed to "
    "start' marker; the negative budget on the line before already names the failure",
    ("a10-gemma4-12b-sleepmode-u0.80", 6): HINT,
    ("l40s-qwen3-14b-bf16-40k-default-v0280", 0): COMMAND,
    ("l40s-qwen3-14b-awq-40k-default-v0280", 0): COMMAND,
    ("l40s-qwen3-14b-awq-40k-default-v0280", 1): TABLE,
    ("l40s-qwen3-14b-awq-40k-default-v0280", 2): TABLE,
    ("l40s-qwen3-14b-awq-40k-default-v0280", 3): TABLE,
    ("l40s-qwen3-14b-awq-1k-u0.95-seqs8-v0280", 0): COMMAND,
    ("l40s-qwen3-14b-awq-1k-u0.95-seqs8-v0280", 1): TABLE,
    ("l40s-qwen3-14b-awq-1k-u0.95-seqs8-v0280", 2): TABLE,
    ("l4-qwen3-14b-awq-40k-default-v0280", 0): TABLE,
    ("l4-qwen3-14b-awq-40k-default-v0280", 1): PROSE,
    ("l4-x2-qwen3-14b-awq-40k-tp2-v0280", 0): TABLE,
    ("l4-x2-qwen3-14b-awq-40k-tp2-v0280", 1): PROSE,
    ("l4-x2-qwen3-14b-awq-40k-pp2-v0280", 0): TABLE,
    ("l4-x2-qwen3-14b-awq-40k-pp2-v0280", 1): PROSE,
    # calibration_cases_2026.json
    ("rtx5090-qwen36-35b-a3b-nvfp4-131k-fp8kv-v0240-run1", 3): ECHO,
    ("rtx5090-qwen36-35b-a3b-nvfp4-131k-fp8kv-v0240-run1", 4): ECHO,
    ("rtx5090-qwen36-35b-a3b-nvfp4-131k-fp8kv-v0240-run2", 3): ECHO,
    ("h100class-x4-qwen35-35b-a3b-ft-dflash-tp4-u0.85-v0260-runA", 2): ECHO,
    ("rtx3090x2-qwen38-27b-fp8-262k-fp8kv-tp2-u0.92-mtp3-v0271", 0): ECHO,
    ("rtx3090x2-qwen38-27b-fp8-262k-fp8kv-tp2-u0.92-mtp3-v0271", 1): ECHO,
    ("rtx3090x2-qwen36-27b-fp8-262k-fp8kv-tp2-v0240", 0): PROSE,
    ("rtx3090x2-qwen36-27b-fp8-262k-fp8kv-tp2-v0240", 1): ECHO,
    ("rtx3090x2-qwen36-27b-fp8-262k-fp8kv-tp2-v0240", 5): ECHO,
    ("rtx5090x2-qwen38-27b-fp8-tp2-262k-mtp-v0261dev", 0): PROSE,
    ("rtx5090x2-qwen38-27b-fp8-tp2-262k-mtp-v0261dev", 1): TABLE,
    ("rtx5090x2-qwen38-27b-fp8-tp2-262k-mtp-v0261dev", 2): PROSE,
    ("rtx5090x2-qwen38-27b-nvfp4-inferact-tp2-262k-mtp-v0261dev", 0): TABLE,
    ("rtx5090x2-qwen38-27b-nvfp4-inferact-tp2-262k-mtp-v0261dev", 1): PROSE,
    ("rtxpro6000-qwen38-27b-fp8-defaults-FAIL-mamba-blocks", 1): "the rest of the "
    "Mamba-blocks error the report wrapped onto a second line; read with the line before",
    ("rtxpro6000-qwen38-27b-fp8-defaults-FAIL-mamba-blocks", 2): TABLE,
    ("rtxpro6000-qwen38-27b-bf16-u0.95-FAIL-mamba-blocks", 0): TABLE,
    ("rtxpro6000-qwen38-27b-bf16-u0.95-FAIL-mamba-blocks", 1): PROSE,
    ("rtx3090x2-qwen38-27b-fp8-131k-fp8kv-tp2-u0.92", 2): PROSE,
    ("rtx3090x2-qwen38-27b-fp8-131k-fp8kv-tp2-u0.92", 3): PROSE,
    ("rtx3090x2-qwen36-27b-dual-262k-tp2-v0202rc1dev129", 0): PROSE,
    ("rtx3090x2-qwen36-27b-dual-262k-tp2-v0202rc1dev129", 1): PROSE,
    ("rtx4090x2-qwen36-27b-autoround-dflash-180k-tp2-v0201rc1dev16", 0): PROSE,
    ("rtx4090x2-qwen36-27b-autoround-dflash-180k-tp2-v0201rc1dev16", 1): PROSE,
    ("rtx4090x2-qwen36-27b-autoround-dflash-180k-tp2-v0201rc1dev16", 2): PROSE,
    ("rtx5090-qwen36-27b-nvfp4-1m-nvfp4kv-u0.70-v0251-patched", 0): COMMAND,
    ("rtx5090-qwen36-27b-nvfp4-1m-nvfp4kv-u0.70-v0251-patched", 1): PROSE,
    ("rtx5090-qwen36-27b-nvfp4-1m-nvfp4kv-u0.70-v0251-patched", 2): "vLLM's padding-layer "
    "warning of hybrid models: a share, no capacity figure",
    ("rtx3090-qwen36-27b-int4-autoround-long-text-u0.93-FAIL-kv-too-small", 2): PROSE,
    ("rtx3090-qwen36-27b-int4-autoround-long-text-u0.93-FAIL-kv-too-small", 3): PROSE,
    ("b300-gemma4-31b-it-bf16-16k-u0.92-v0260", 0): ECHO,
    ("b300-gemma4-31b-it-bf16-16k-u0.92-v0260", 1): ECHO,
    ("b300-gemma4-31b-it-bf16-16k-u0.92-v0260", 3): "the encoder cache's budget and dummy "
    "items: the encoder profile's settings, no capacity figure",
    ("rtx3090ti-vm-gemma4-e4b-it-bf16-32k-u0.90-v0221", 0): ECHO,
    ("rtx3090ti-vm-gemma4-e4b-it-bf16-32k-u0.90-v0221", 1): ECHO,
    ("rtx3090ti-vm-gemma4-e4b-it-bf16-32k-u0.90-v0221", 3): "the encoder cache's budget and "
    "dummy items: the encoder profile's settings, no capacity figure",
    ("rtx3090ti-vm-gemma4-e4b-it-bf16-32k-u0.90-v0221", 6): PRE_0_21_ADVICE,
    ("gpu-unnamed-kaggle-gemma4-31b-it-bf16-32k-u0.94-seqs20-v0230", 0): ECHO,
    ("gpu-unnamed-kaggle-gemma4-31b-it-bf16-32k-u0.94-seqs20-v0230", 1): ECHO,
    ("gpu-unnamed-kaggle-gemma4-31b-it-bf16-32k-u0.94-seqs20-v0230", 2): ECHO,
    ("gpu-unnamed-kaggle-gemma4-31b-it-bf16-32k-u0.94-seqs20-v0230", 6): PRE_0_21_ADVICE,
    ("gpu-unnamed-qwen25-7b-instruct-bf16-4k-u0.95-v0220", 0): ECHO,
    ("gpu-unnamed-qwen25-7b-instruct-bf16-4k-u0.95-v0220", 1): ECHO,
    ("gpu-unnamed-qwen25-7b-instruct-bf16-4k-u0.95-v0220", 5): PRE_0_21_ADVICE,
    ("rtx4070laptop-qwen25-1.5b-instruct-4k-u0.80-v0300", 3): PROSE,
    ("rtx4070laptop-qwen25-1.5b-instruct-4k-u0.80-v0300", 4): PROSE,
    ("rtxpro6000x4-qwen3-235b-2507-fp8-tp4-32k-u0.90-v0271", 4): PROSE,
    ("rtxpro6000x4-qwen3-235b-2507-fp8-tp4-ep-32k-u0.90-v0271", 0): TABLE,
    ("rtxpro6000x4-qwen3-235b-2507-fp8-tp4-ep-32k-u0.90-v0271", 1): PROSE,
    ("rtxpro6000x4-qwen3-235b-2507-fp8-pp4-32k-u0.90-v0271", 0): TABLE,
    ("rtxpro6000x2-qwen3-235b-2507-fp8-tp2-32k-u0.90-v0271-FAIL-oom-loading", 2): PROSE,
    ("rtx5090-qwen3-32b-awq-8k-u0.70-v0280", 0): TABLE,
    ("rtx5090-qwen3-32b-awq-8k-u0.70-v0280", 1): TABLE,
    ("rtx5090-qwen3-32b-awq-8k-u0.70-v0280", 2): PROSE,
    ("rtx5090-qwen3-32b-awq-8k-u0.85-v0280", 0): TABLE,
}

#: vLLM lines that carry a figure the scanner cannot read: (case id, index) -> reason.
#: None may come from a release in the supported range (checked below).
UNREADABLE: dict[tuple[str, int], str] = {}

_TABLE_ONLY = "the report's figures come from its table, not from a quoted vLLM line"
_SUMMARY_ONLY = "the report took it from a summary line it does not quote"
#: report fields that no quoted line carries: case id -> (fields, why)
NOT_IN_EVIDENCE: dict[str, tuple[frozenset[str], str]] = {
    "llmd-h100-gptoss20b": (
        frozenset({"non_torch_gib", "activation_peak_gib", "cuda_graph_gib"}), _SUMMARY_ONLY),
    "llmd-h100-gptoss120b": (frozenset({"weights_gib", "non_torch_gib", "activation_peak_gib",
                                        "available_kv_gib", "cuda_graph_gib"}), _TABLE_ONLY),
    "llmd-h100x2-llama33-70b-fp8-tp2": (
        frozenset({"non_torch_gib", "activation_peak_gib", "cuda_graph_gib"}), _SUMMARY_ONLY),
    "llmd-h100-llama33-70b-fp8-tp1-FAIL": (
        frozenset({"non_torch_gib", "activation_peak_gib", "cuda_graph_gib"}), _SUMMARY_ONLY),
    "llmd-h100-llama31-8b": (
        frozenset({"non_torch_gib", "activation_peak_gib", "cuda_graph_gib"}), _SUMMARY_ONLY),
    "llmd-h100-qwen3-0.6b-16000": (
        frozenset({"non_torch_gib", "activation_peak_gib", "cuda_graph_gib"}), _SUMMARY_ONLY),
    "llmd-h100-qwen3-0.6b-32000": (
        frozenset({"non_torch_gib", "activation_peak_gib", "cuda_graph_gib"}), _SUMMARY_ONLY),
    "llmd-h100-qwen3-32b-16000": (frozenset({"weights_gib", "non_torch_gib",
                                             "activation_peak_gib", "available_kv_gib",
                                             "cuda_graph_gib"}), _TABLE_ONLY),
    "llmd-h100x2-qwen3-32b-tp2": (frozenset({"weights_gib", "non_torch_gib",
                                             "activation_peak_gib", "available_kv_gib",
                                             "cuda_graph_gib"}), _TABLE_ONLY),
    "dl-a100-80-qwen2-7b-u0.5": (frozenset({"cuda_graph_gib"}),
                                 "the report gives the graph size without quoting its line"),
    "dl-a100-80x2-qwen2-7b-tp2-u0.25": (frozenset({"num_gpu_blocks"}),
                                        "the report gives the block count without its line"),
    "rtx4080-16g-qwen25-7b-awq-32k": (
        frozenset({"weights_gib", "non_torch_gib", "activation_peak_gib", "cuda_graph_gib"}),
        "from the author's breakdown, not a quoted vLLM line"),
    "vllm10517-rtx3090-llama31-8b-29k-FAIL": (
        frozenset({"weights_gib"}), "the same weights line as the 20k run, quoted there"),
    "rtx3090-qwen25-7b-8k-v066": (
        frozenset({"max_concurrency", "max_concurrency_at_len"}),
        "only the author's rendition of the concurrency line is quoted"),
    "spark-x2-minimax-m27-awq-196k-u0.85": (
        frozenset({"available_kv_gib", "kv_cache_tokens", "max_concurrency",
                   "max_concurrency_at_len"}), "from the issue's prose"),
    "rtxpro6000-qwen3vl-30b-a3b-fp8-32k-u0.70-v0202": (
        frozenset({"available_kv_gib", "kv_cache_tokens"}), "from the document's prose"),
    "l40s-qwen3-14b-awq-40k-default-v0280": (
        frozenset({"weights_gib", "available_kv_gib", "kv_cache_tokens", "max_concurrency",
                   "max_concurrency_at_len"}), _TABLE_ONLY),
    "l40s-qwen3-14b-awq-1k-u0.95-seqs8-v0280": (
        frozenset({"available_kv_gib", "kv_cache_tokens", "max_concurrency",
                   "max_concurrency_at_len"}), _TABLE_ONLY),
    "l4-qwen3-14b-awq-40k-default-v0280": (
        frozenset({"available_kv_gib", "kv_cache_tokens", "max_concurrency",
                   "max_concurrency_at_len"}), _TABLE_ONLY),
    "l4-x2-qwen3-14b-awq-40k-tp2-v0280": (
        frozenset({"available_kv_gib", "kv_cache_tokens", "max_concurrency",
                   "max_concurrency_at_len"}), _TABLE_ONLY),
    "l4-x2-qwen3-14b-awq-40k-pp2-v0280": (
        frozenset({"available_kv_gib", "kv_cache_tokens", "max_concurrency",
                   "max_concurrency_at_len"}), _TABLE_ONLY),
    "rtx5090x2-qwen38-27b-fp8-tp2-262k-mtp-v0261dev": (
        frozenset({"weights_gib", "kv_cache_tokens"}), _TABLE_ONLY),
    "rtx5090x2-qwen38-27b-nvfp4-inferact-tp2-262k-mtp-v0261dev": (
        frozenset({"weights_gib", "kv_cache_tokens"}), _TABLE_ONLY),
    "rtx3090x2-qwen38-27b-fp8-131k-fp8kv-tp2-u0.92": (
        frozenset({"available_kv_gib"}), "the author's restatement in prose, per GPU"),
    "rtxpro6000-qwen38-27b-fp8-defaults-FAIL-mamba-blocks": (
        frozenset(), "a failed start-up: the error's block counts, no capacity figure"),
    "rtxpro6000-qwen38-27b-bf16-u0.95-FAIL-mamba-blocks": (
        frozenset(), "a failed start-up known from a table row only"),
    "rtxpro6000x4-qwen3-235b-2507-fp8-tp4-ep-32k-u0.90-v0271": (
        frozenset({"weights_gib", "available_kv_gib", "kv_cache_tokens", "max_concurrency",
                   "max_concurrency_at_len"}), _TABLE_ONLY),
    "rtxpro6000x4-qwen3-235b-2507-fp8-pp4-32k-u0.90-v0271": (
        frozenset({"weights_gib", "available_kv_gib", "kv_cache_tokens", "max_concurrency",
                   "max_concurrency_at_len"}), _TABLE_ONLY),
    "rtxpro6000x2-qwen3-235b-2507-fp8-tp2-32k-u0.90-v0271-FAIL-oom-loading": (
        frozenset(), "a start-up that ran out of memory loading its weights: no capacity figure"),
    "rtx5090-qwen3-32b-awq-8k-u0.70-v0280": (
        frozenset({"activation_peak_gib", "consumed_weights_plus_nontorch_gib",
                   "available_kv_gib", "kv_cache_tokens", "max_concurrency",
                   "max_concurrency_at_len", "cuda_graph_gib"}), _TABLE_ONLY),
    "rtx5090-qwen3-32b-awq-8k-u0.85-v0280": (
        frozenset({"activation_peak_gib", "consumed_weights_plus_nontorch_gib",
                   "available_kv_gib", "kv_cache_tokens", "max_concurrency",
                   "max_concurrency_at_len", "cuda_graph_gib"}), _TABLE_ONLY),
}

#: failed start-ups whose report quotes no vLLM line of the failure (a table row only)
FAILURE_NOT_QUOTED = {
    "rtxpro6000-qwen38-27b-bf16-u0.95-FAIL-mamba-blocks": "only the recipe's table row",
}

#: words of an ``outcome`` -> the failure kinds that match it
OUTCOME_KINDS = (
    ("negative available KV", {fk.NEGATIVE_KV_BUDGET}),
    ("No available memory for the cache blocks", {fk.NO_KV_MEMORY, fk.NEGATIVE_KV_BUDGET}),
    ("tokens storable in KV cache", {fk.KV_CACHE_TOO_SMALL}),
    ("KV cache too small", {fk.KV_CACHE_TOO_SMALL}),
    ("exceeds available Mamba cache blocks", {fk.MAMBA_CACHE_BLOCKS}),
    ("CUDA out of memory while loading weights", {fk.CUDA_OOM_LOADING}),
)


def _recognised(line: str) -> bool:
    """The line matches one of the scanner's wordings (it may be superseded by an earlier one)."""
    msg = parse_line(line).message
    return any(row.pattern.search(msg) for row in (*CAPACITY_FORMATS, *FAILURE_FORMATS))


def _scan(case: dict[str, Any]) -> tuple[LogScanner, dict[str, list[Any]], list[int]]:
    scanner = LogScanner(version=case["vllm_version"])
    figures: dict[str, list[Any]] = {}
    silent: list[int] = []
    for i, line in enumerate(case["evidence"]):
        events = scanner.feed(line)
        gave = False
        for ev in events:
            if isinstance(ev, CapacityEvent):
                gave = True
                for key, value in ev.figures().items():
                    figures.setdefault(key, []).append(value)
            elif isinstance(ev, Failure):
                gave = True
        if not gave and not _recognised(line):
            silent.append(i)
    return scanner, figures, silent


def _matches(field: str, reported: float, values: list[Any]) -> bool:
    if "_gib" in field:
        return any(abs(v / GiB - reported) <= 0.0051 for v in values)
    return any(abs(v - reported) <= 0.0051 for v in values)


@pytest.mark.parametrize("case", CASES, ids=[c["case_id"] for c in CASES])
def test_every_quoted_line_gives_a_figure_or_is_explained(case: dict[str, Any]) -> None:
    _, _, silent = _scan(case)
    unexplained = [
        (i, case["evidence"][i]) for i in silent
        if (case["case_id"], i) not in NO_FIGURE and (case["case_id"], i) not in UNREADABLE
    ]
    assert not unexplained
    for (case_id, i) in NO_FIGURE:
        if case_id == case["case_id"]:
            assert i in silent, f"line {i} is read now; drop it from NO_FIGURE"


@pytest.mark.parametrize("case", CASES, ids=[c["case_id"] for c in CASES])
def test_each_figure_agrees_with_the_report(case: dict[str, Any]) -> None:
    _, figures, _ = _scan(case)
    missing_ok, _why = NOT_IN_EVIDENCE.get(case["case_id"], (frozenset(), ""))
    checked = 0
    for field, reported in case["reported"].items():
        if reported is None or field in NOT_PRINTED or field not in FIELDS:
            continue
        values = [v for name in FIELDS[field] for v in figures.get(name, [])]
        if not values:
            assert field in missing_ok, f"{field}={reported} is not read from any quoted line"
            continue
        assert field not in missing_ok, f"{field} is read now; drop it from NOT_IN_EVIDENCE"
        assert _matches(field, reported, values), (field, reported, values)
        checked += 1
    for field, ours in CASE_FIELDS.items():
        reported = case.get(field)
        if reported is not None and figures.get(ours):
            assert _matches(field, reported, figures[ours]), (field, reported, figures[ours])
            checked += 1
    assert checked or case["case_id"] in NOT_IN_EVIDENCE


@pytest.mark.parametrize("case", CASES, ids=[c["case_id"] for c in CASES])
def test_the_failure_kind_agrees_with_the_outcome(case: dict[str, Any]) -> None:
    scanner, _, _ = _scan(case)
    outcome: str = case["outcome"]
    if outcome == "ok" or case["case_id"] in FAILURE_NOT_QUOTED:
        assert scanner.failure is None
        return
    failure = classify_exit(1, scanner, was_ready=False)
    assert failure is not None
    kinds = next(k for words, k in OUTCOME_KINDS if words in outcome)
    assert failure.kind in kinds, (outcome, failure)
    reported = case["reported"]
    if (reported.get("available_kv_gib") or 0) < 0:
        assert failure.kind == fk.NEGATIVE_KV_BUDGET
        assert failure.details["available_kv_bytes"] / GiB == pytest.approx(
            reported["available_kv_gib"], abs=0.0051)
    if reported.get("max_tokens_storable_from_error") is not None:
        assert failure.estimated_max_model_len == reported["max_tokens_storable_from_error"]
    if reported.get("kv_needed_gib_from_error") is not None:
        assert failure.details["needed_kv_bytes"] / GiB == pytest.approx(
            reported["kv_needed_gib_from_error"], abs=0.0051)


def test_no_unreadable_line_from_a_supported_release() -> None:
    by_id = {c["case_id"]: c for c in CASES}
    for (case_id, _i) in UNREADABLE:
        version = by_id[case_id]["vllm_version"]
        assert version is not None
        assert not versions.applies(version, versions.SUPPORTED_MIN), case_id
        assert versions.is_older_than_supported(version), case_id


def test_the_cases_span_the_supported_range() -> None:
    known = [versions.release(c["vllm_version"]) for c in CASES if c["vllm_version"]]
    assert min(r for r in known if r) >= versions.release(versions.SUPPORTED_MIN)
    assert max(r for r in known if r) <= versions.release(versions.SUPPORTED_MAX)
    assert len(CASES) == 65
