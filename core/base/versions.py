"""vLLM releases as comparable values, and the release kvpilot assumes when none is known.

A version string as vLLM reports it (``vllm --version``, ``/version``, a wheel name) can carry
a pre-release (``0.10.2rc1``), a development suffix (``0.29.1rc1.dev17``) and a local part: a
build variant (``+cpu``, ``+cu128``, ``+rocm``) or a git hash (``+gd2d649e67.d20260913``).
:class:`Release` keeps the comparable release number and the build variant apart, so that
``0.32.0+cpu`` and ``0.32.0`` are the same release of different builds: memory accounting,
flags and log formats follow the release, the device follows the variant.

One supported range for the whole program, :data:`SUPPORTED_MIN` to :data:`SUPPORTED_MAX`: the
planner's memory rules and the log scanner's line formats both cover it. A newer release is
planned with the newest rules, its log is read with every known wording (the newest apply to
it), and a failure none of them recognises is reported with vLLM's own last error line.
Which release has which CUDA-graph flag is here too, and :data:`FEATURES` names for every flag
kvpilot knows was dropped the first release without it (``runtime.REMOVED_FLAGS`` reads them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from packaging.version import InvalidVersion, Version

#: the release assumed when none is named, installed or readable (plans, unreadable version
#: text); the newest release whose rules kvpilot knows is SUPPORTED_MAX (0.34.0), whose KV
#: cache follows the free memory at launch, so an unnamed release keeps the 0.33 rules
NEWEST_KNOWN = "0.33.0"

_VARIANT = re.compile(r"^(cpu|rocm\d*|cu\d+|xpu|tpu|hpu|neuron)$")
_LEADING = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")


@dataclass(frozen=True)
class Release:
    """A vLLM release number (``(0, 32, 0)``) and its build variant (``"cpu"`` or None).

    A pre-release counts as its final release (kvpilot's tables change only at final
    releases); compare with :meth:`at_least`.
    """

    parts: tuple[int, ...]
    variant: str | None = None

    @classmethod
    def parse(cls, text: str | None) -> Release:
        """``0.33.0``, ``v0.11.0+cpu``, ``0.10.2rc1``, ``0.29.1rc1.dev17+gabc.d2026``.

        Unknown or unparsable text gives :data:`NEWEST_KNOWN` (no variant). Each text is read
        once (:func:`_parsed`): planning the catalog asks for the same few releases thousands
        of times.
        """
        return _parsed(text)

    @classmethod
    def _read(cls, text: str | None) -> Release:
        """:meth:`parse` itself, uncached."""
        if not text or not text.strip():
            return cls._read(NEWEST_KNOWN)
        raw = text.strip().lstrip("v")
        variant = None
        try:
            parsed = Version(raw)
            parts = tuple(parsed.release)
            if parsed.local:
                for piece in parsed.local.split("."):
                    if _VARIANT.match(piece):
                        variant = piece
                        break
        except InvalidVersion:
            m = _LEADING.match(raw)
            if m is None:
                return cls._read(NEWEST_KNOWN)
            parts = tuple(int(p) for p in m.group(1).split("."))
            local = raw.partition("+")[2]
            variant = local if _VARIANT.match(local) else None
        while len(parts) > 3 and parts[-1] == 0:
            parts = parts[:-1]
        return cls(parts, variant)

    @property
    def number(self) -> str:
        """The release number alone, ``0.32.0`` (always at least three parts)."""
        parts = self.parts + (0,) * max(0, 3 - len(self.parts))
        return ".".join(str(p) for p in parts)

    @property
    def is_cpu_build(self) -> bool:
        """True for vLLM's CPU build (``+cpu``)."""
        return self.variant == "cpu"

    def at_least(self, other: str | Release) -> bool:
        """True when this release is ``other`` or newer (``other`` like ``0.20``, ``0.10.2`` or
        a :class:`Release`; build variants are ignored)."""
        that = other if isinstance(other, Release) else Release.parse(other)
        width = max(len(self.parts), len(that.parts))
        pad = (0,) * width
        return (self.parts + pad)[:width] >= (that.parts + pad)[:width]

    def __str__(self) -> str:
        return self.number + (f"+{self.variant}" if self.variant else "")


@lru_cache(maxsize=256)
def _parsed(text: str | None) -> Release:
    """:meth:`Release.parse`, remembered per text (a :class:`Release` is frozen, so one value
    serves every caller; 256 texts: the releases a session meets are a handful)."""
    return Release._read(text)


@dataclass(frozen=True)
class Feature:
    """A behaviour of vLLM that kvpilot depends on, the releases that have it, and the place in
    vLLM's code or documentation that shows it.

    Attributes:
        name: the key :func:`supports` takes.
        since: first release with it (``"0.0.0"``: every release kvpilot knows).
        source: where vLLM's code shows it (file, function, what changed), and for a removal
            how that was checked.
        until: first release without it (None: still there).
        flag: the ``vllm serve`` flag the row is about (None: a behaviour, not a flag).
        back_in: a release that has it again after ``until`` (a flag vLLM re-added).
        until_exact: False when ``until`` is only a bound: gone by that release at the latest,
            the release that dropped it not recorded.
    """

    name: str
    since: str
    source: str
    until: str | None = None
    flag: str | None = None
    back_in: str | None = None
    until_exact: bool = True

    def has(self, release: Release) -> bool:
        """True when ``release`` has this behaviour (or flag)."""
        if self.back_in is not None and release.at_least(self.back_in):
            return True
        if not release.at_least(self.since):
            return False
        return self.until is None or not release.at_least(self.until)


def _removed_flag(flag: str, until: str, source: str, *, back_in: str | None = None,
                  until_exact: bool = True) -> Feature:
    """A row for a ``vllm serve`` flag that ``until`` no longer accepts."""
    return Feature(flag.removeprefix("--").replace("-", "_") + "_flag", "0.0.0", source,
                   until=until, flag=flag, back_in=back_in, until_exact=until_exact)


#: one row per behaviour; everything that asks "does this release do X" reads this table
FEATURES: dict[str, Feature] = {
    f.name: f
    for f in (
        Feature("default_utilization_0_92", "0.20.0",
                "engine/arg_utils.py: gpu_memory_utilization default 0.92 (0.9 before)"),
        Feature("max_model_len_auto", "0.14.0",
                "config: --max-model-len auto / -1 fits the context to memory"),
        Feature("kv_group_padding_1_25", "0.13.0",
                "v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size: group size "
                "= the largest kind's layer count when under 1.25 x the smallest (padding "
                "layers); absent from the 0.10.2 wheel (0.11 / 0.12 not checked)",
                until="0.19.0"),
        Feature("kv_group_padding_1_5", "0.19.0",
                "v1/core/kv_cache_utils.py: the same rule with 1.5 x (0.19.0, 0.20.0, 0.21.0 "
                "wheels)"),
        Feature("mamba_cache_all_mode", "0.16.0",
                "model_executor/models/config.py MambaModelConfig: prefix caching on a model "
                "with Mamba prefix-caching support sets mamba_cache_mode 'all' (blocks a "
                "multiple of the Mamba chunk, one state block per block); seen in the 0.16.0 and "
                "0.21.0 wheels, the 0.33.0 wheel has only 'align' and 'none'",
                until="0.33.0", until_exact=False),
        Feature("kv_tokens_from_concurrency", "0.21.0",
                "v1/core/kv_cache_utils.py _report_kv_cache_config: 'GPU KV cache size' = "
                "int(max concurrency x max_model_len); 0.10.2 to 0.20.0 print num_blocks // "
                "groups x the smallest block size (checked in the 0.10.2, 0.13.0, 0.16.0, "
                "0.19.0 and 0.20.0 wheels)"),
        Feature("mamba_blocks_check", "0.20.0",
                "config/compilation.py: with FULL decode CUDA graphs a model with Mamba / "
                "linear-attention layers fails start-up when max_num_seqs > the pool's blocks "
                "('exceeds available Mamba cache blocks'; absent from the 0.19.0 wheel)"),
        Feature("kv_in_flight_concurrent_batches", "0.26.0",
                "config/vllm.py max_in_flight_tokens (max_concurrent_batches, 2 with async "
                "scheduling, x max_num_batched_tokens) read by v1/kv_cache_interface.py: a "
                "sliding-window layer reserves window - 1 + in-flight tokens per request "
                "(window - 1 + max_num_batched_tokens in 0.25)"),
        Feature("inductor_combo_benchmark", "0.12.0",
                "config/compilation.py: on torch >= 2.9 (pinned from the 0.12.0 wheel, 2.8 in "
                "0.11.0) Inductor's combo_kernels and benchmark_combo_kernel are set, so a "
                "first compile times kernels on full-size copies of their arguments inside "
                "the memory profile (0.12.0 l. 832-839, 0.28.0 l. 977-986)"),
        Feature("cudagraph_in_budget", "0.20.0",
                "v1/worker/gpu_worker.py determine_available_memory subtracts the CUDA-graph "
                "estimate before the KV cache"),
        # ---- 0.34: the extensible KV cache (read from the 0.34.0 wheel)
        Feature("extensible_kv_cache", "0.34.0",
                "config/vllm.py VllmConfig._resolve_extensible_kv_cache: on when unset on CUDA "
                "and ROCm, unless --kv-cache-memory-bytes or --num-gpu-blocks-override is set, "
                "elastic EP or a KV connector that needs its own memory; v1/engine/core.py "
                "extensible_kv_cache_unsupported_reason turns it off on a driver without VMM"),
        Feature("utilization_default_unset", "0.34.0",
                "config/cache.py CacheConfig.gpu_memory_utilization default None; "
                "resolved_gpu_memory_utilization gives 1.0 with the extensible KV cache, "
                "DEFAULT_GPU_MEMORY_UTILIZATION 0.92 without"),
        Feature("default_block_size_64", "0.34.0",
                "config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE 64 (16 in the 0.33.0 wheel); "
                "platforms/interface.py update_block_size_for_backend keeps it where the "
                "backend supports it (v1/attention/backend.py get_preferred_block_size)"),
        Feature("kv_sized_after_warmup", "0.34.0",
                "v1/worker/extensible_kv_cache.py measure_kv_cache_bytes / "
                "v1/core/kv_cache_planning.py finalize_extensible_kv_cache: with the "
                "extensible KV cache the final size is measured after warm-up and CUDA-graph "
                "capture; v1/worker/gpu/model_runner.py profile_cudagraph_memory returns 0 and "
                "v1/worker/utils.py request_memory skips the free-memory start-up check"),
        Feature("cache_config_tokens_metric", "0.25.0",
                "v1/metrics: vllm:cache_config_info gains kv_cache_size_tokens and "
                "kv_cache_max_concurrency labels"),
        Feature("cache_config_info_metric", "0.25.0",
                "v1/metrics/loggers.py: cache_config_info read after ready for capacity"),
        Feature("limit_mm_per_prompt_json", "0.8.0",
                "engine/arg_utils.py: --limit-mm-per-prompt parses JSON (only 'image=N' "
                "pairs through 0.7; pairs deprecated in 0.8-0.9, removed in 0.10)"),
        Feature("cuda_graph_sizes_flag", "0.9.0",
                "engine/arg_utils.py: --cuda-graph-sizes N (capture sizes up to N); deprecated "
                "in 0.12.0 ('will be removed in v0.13.0'); the 0.12.0 wheel's arg_utils.py "
                "still adds the argument, the 0.13.0 wheel's no longer has it",
                until="0.13.0", flag="--cuda-graph-sizes"),
        Feature("max_cudagraph_capture_size_flag", "0.12.0",
                "engine/arg_utils.py: --max-cudagraph-capture-size N",
                flag="--max-cudagraph-capture-size"),
        Feature("cudagraph_mode_config", "0.10.1",
                "config/compilation.py: --compilation-config cudagraph_mode "
                "(NONE / PIECEWISE / FULL / FULL_AND_PIECEWISE ...)"),
        Feature("full_cudagraphs_by_default", "0.11.0",
                "config: cudagraph_mode defaults to FULL_AND_PIECEWISE (PIECEWISE in 0.10.x)"),
        # ---- engines and memory rules the fit engine follows
        Feature("v0_engine", "0.0.0", "the V0 engine (worker/model_runner.py); 0.11 removed it",
                until="0.11.0"),
        Feature("v1_below_sm80", "0.10.2",
                "engine/arg_utils.py: _is_v1_supported_oracle no longer refuses compute "
                "capability < 8.0 (0.8 to 0.10.1 fall back to V0 there)"),
        Feature("v1_items_per_prompt_rule", "0.10.0",
                "v1/core/encoder_cache_manager.py compute_mm_encoder_budget: dummy items capped "
                "by max_model_len // tokens per item (ceil(budget / tokens) before)"),
        Feature("batch_defaults_huge_gpu", "0.28.0",
                "engine/arg_utils.py get_batch_defaults: >= 160 GiB -> 16384 batched tokens / "
                "1024 sequences"),
        Feature("batch_defaults_a100_small", "0.9.0",
                "engine/arg_utils.py _set_default_args: A100 kept off the large-GPU row"),
        Feature("batch_defaults_gb10_small", "0.33.0",
                "engine/arg_utils.py get_batch_defaults: GB10 (SM 12.1) kept off the large-GPU "
                "row"),
        Feature("blackwell_capture_1024", "0.28.0",
                "config/vllm.py _set_cudagraph_sizes: largest default capture size 1024 on "
                "SM 10.x (is_device_capability_family(100))"),
        Feature("nvfp4_marlin_sm80", "0.10.0",
                "quantization/modelopt.py ModelOptNvFp4Config: get_min_capability 80, NVFP4 "
                "weights through the Marlin FP4 kernel (is_fp4_marlin_supported) off Blackwell "
                "(0.10.0 and 0.11.0 wheels)"),
        Feature("nvfp4_marlin_sm75", "0.20.0",
                "quantization/modelopt.py ModelOptNvFp4Config: get_min_capability 75 (0.20.0 "
                "and 0.28.0 wheels)"),
        Feature("fp8_kv_flashinfer_sm80", "0.12.0",
                "attention backend selection: FP8 KV on SM 8.0-8.8 through FlashInfer"),
        Feature("gguf_quantization", "0.0.0", "model_executor/layers/quantization: gguf moved to "
                "the vllm-gguf-plugin", until="0.25.0"),
        Feature("bitsandbytes_quantization", "0.0.0", "model_executor/layers/quantization: "
                "bitsandbytes moved to the vllm-bnb-plugin", until="0.28.0"),
        # ---- adapters, draft models and pooling (kvpilot.core.fit.lora / .speculative)
        Feature("lora_extra_vocab", "0.0.0",
                "lora/layers/vocal_parallel_embedding.py: (max_loras, lora_extra_vocab_size) "
                "extra embedding rows and an lm_head B stack padded to 256 rows; the 0.11.0 "
                "wheel has them, the 0.20.0 wheel has neither (releases between not checked)",
                until="0.20.0", until_exact=False),
        Feature("lora_cudagraph_specialize", "0.20.0",
                "v1/cudagraph_dispatcher.py _get_lora_cases: [0, max_loras + 1] with "
                "cudagraph_specialize_lora (default True), every size captured without and "
                "with adapters (0.20.0, 0.24.0, 0.28.0 and 0.32.0 wheels; the 0.11.0 wheel has "
                "no cudagraph_specialize_lora; releases between not checked)"),
        Feature("spec_decode_capture_scaled", "0.20.0",
                "config/vllm.py _set_cudagraph_sizes: largest default capture "
                "min(max_num_seqs x (1 + num_speculative_tokens) x 2, 512) in the 0.20.0, "
                "0.24.0, 0.28.0 and 0.32.0 wheels; the 0.11.0 wheel has min(2 x max_num_seqs, "
                "512) whatever the draft (releases between not checked)"),
        Feature("runner_flag", "0.11.0",
                "engine/arg_utils.py: --runner generate/pooling (with --convert) replaces "
                "--task for embedding and reranking models", flag="--runner"),
        # ---- flags vllm serve no longer accepts
        _removed_flag("--swap-space", "0.18.0", "engine/arg_utils.py: CPU swap space removed"),
        _removed_flag("--disable-log-requests", "0.17.0",
                      "engine/arg_utils.py: request logging off by default; the flag is "
                      "accepted again from 0.33.0", back_in="0.33.0"),
        _removed_flag("--calculate-kv-scales", "0.28.0",
                      "engine/arg_utils.py: FP8 KV scales come from the checkpoint"),
        _removed_flag("--max-num-partial-prefills", "0.27.0",
                      "engine/arg_utils.py: concurrent partial prefills removed"),
        _removed_flag("--max-long-partial-prefills", "0.27.0",
                      "engine/arg_utils.py: concurrent partial prefills removed"),
        _removed_flag("--task", "0.13.0",
                      "engine/arg_utils.py: the 0.12.0 wheel still adds --task (deprecated), "
                      "the 0.13.0 wheel's no longer has it; --runner / --convert replace it"),
        _removed_flag("--num-scheduler-steps", "0.11.0", "V0 engine only; gone with it at "
                      "the latest", until_exact=False),
        _removed_flag("--use-v2-block-manager", "0.11.0", "V0 engine only; gone with it at "
                      "the latest", until_exact=False),
        _removed_flag("--preemption-mode", "0.11.0", "V0 engine only; gone with it at the "
                      "latest", until_exact=False),
        _removed_flag("--rope-scaling", "0.12.0", "engine/arg_utils.py: moved into "
                      "--hf-overrides (absent from the 0.12.0 wheel)"),
        _removed_flag("--rope-theta", "0.12.0", "engine/arg_utils.py: moved into "
                      "--hf-overrides (absent from the 0.12.0 wheel)"),
        _removed_flag("--num-lookahead-slots", "0.12.0",
                      "engine/arg_utils.py: absent from the 0.12.0 wheel"),
        _removed_flag("--guided-decoding-backend", "0.12.0", "engine/arg_utils.py: "
                      "--structured-outputs-config replaces it (absent from the 0.12.0 wheel)"),
    )
}


def supports(feature: str, version: str | Release | None) -> bool:
    """True when ``version`` (a string or :class:`Release`; None = :data:`NEWEST_KNOWN`) has
    ``feature`` (a key of :data:`FEATURES`).

    Raises:
        KeyError: ``feature`` is not in the table.
    """
    release = version if isinstance(version, Release) else Release.parse(version)
    return FEATURES[feature].has(release)


def removed_flags() -> list[Feature]:
    """The rows of flags some release dropped (``flag`` and ``until`` set), in table order."""
    return [f for f in FEATURES.values() if f.flag is not None and f.until is not None]


def default_utilization(version: str | Release | None, *, extensible: bool = False) -> float:
    """vLLM's default ``--gpu-memory-utilization`` in ``version``.

    ``extensible``: the extensible KV cache is on (0.34+, ``resolved_gpu_memory_utilization``
    in config/cache.py gives 1.0 then); ignored before 0.34.
    """
    if extensible and supports("utilization_default_unset", version):
        return 1.0
    return 0.92 if supports("default_utilization_0_92", version) else 0.9


#: vLLM's default KV block (tokens) before 0.34 (config/cache.py; kvpilot.core.fit.kv)
BLOCK_SIZE_BEFORE_0_34 = 16
#: config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE in the 0.34.0 wheel
BLOCK_SIZE_0_34 = 64


def default_block_size(version: str | Release | None) -> int:
    """vLLM's default KV block in tokens for ``version``: 64 from 0.34 (the FlashAttention,
    FlashInfer and Triton backends keep that default: ``get_preferred_block_size``), 16
    before.

    A backend whose kernels do not take the default uses its smallest supported size in either
    release (0.34.0 wheel: FlashMLA 64, CUTLASS MLA 128); kvpilot does not pick the backend.
    """
    if supports("default_block_size_64", version):
        return BLOCK_SIZE_0_34
    return BLOCK_SIZE_BEFORE_0_34


def release_number(text: str | None) -> str:
    """The normalised release number of a version string (``0.32.0+cpu`` -> ``0.32.0``)."""
    return Release.parse(text).number


# ------------------------------------------------------------------ the supported range
#: oldest and newest release whose memory accounting and log lines kvpilot was checked against:
#: the planner's rules (kvpilot.core.fit.activation) and the log scanner's line formats
#: (kvpilot.core.vllm.logparse) both cover this range
SUPPORTED_MIN = "0.6.0"
#: 0.34.0's memory rules (the extensible KV cache: kvpilot.core.fit.extensible_kv) and log
#: lines are known; a plan with no release named still assumes NEWEST_KNOWN
SUPPORTED_MAX = "0.34.0"


def release(version: str | None) -> tuple[int, ...] | None:
    """``'0.32.0+cpu'`` -> ``(0, 32, 0)`` (at least three parts, for comparisons); None for
    None or text without a leading release number (unlike :meth:`Release.parse`, which
    assumes :data:`NEWEST_KNOWN`)."""
    if not version or _LEADING.match(version.strip().lstrip("v")) is None:
        return None
    parts = Release.parse(version).parts
    return parts + (0,) * max(0, 3 - len(parts))


def short(version: str) -> str:
    """``'0.33.0'`` -> ``'0.33'`` (major.minor, for sentences)."""
    rel = release(version) or ()
    return ".".join(str(p) for p in ((*rel, 0, 0))[:2])


def at_least(version: str | None, since: str) -> bool:
    """True when ``version`` is ``since`` or newer (an unreadable version counts as newest)."""
    have, need = release(version), release(since)
    if have is None or need is None:
        return True
    return have >= need


def applies(version: str | None, since: str, before: str | None = None) -> bool:
    """True when ``since <= version < before`` (``before`` None: still current).

    An unknown version matches every range; a version newer than :data:`SUPPORTED_MAX` is
    treated as :data:`SUPPORTED_MAX` (the newest known formats apply to it).
    """
    have = release(version)
    if have is None:
        return True
    newest = release(SUPPORTED_MAX)
    assert newest is not None
    if have > newest:
        have = newest
    low = release(since) or ()
    if have < low:
        return False
    if before is None:
        return True
    high = release(before)
    return high is None or have < high


def is_newer_than_supported(version: str | None) -> bool:
    """True for a release after :data:`SUPPORTED_MAX`."""
    have, newest = release(version), release(SUPPORTED_MAX)
    return have is not None and newest is not None and have > newest


def is_older_than_supported(version: str | None) -> bool:
    """True for a release before :data:`SUPPORTED_MIN`."""
    have, oldest = release(version), release(SUPPORTED_MIN)
    return have is not None and oldest is not None and have < oldest


def supported_range_text() -> str:
    """``'vLLM 0.6 to 0.33'``."""
    return f"vLLM {short(SUPPORTED_MIN)} to {short(SUPPORTED_MAX)}"


def support_summary() -> str:
    """What kvpilot supports and what it does with a newer release (settings, README)."""
    newest = short(SUPPORTED_MAX)
    return (
        f"kvpilot knows {supported_range_text()}. With a newer release it plans with the "
        f"{newest} memory rules, reads the log with the newest known formats, and shows vLLM's "
        "own last error line for a failure it does not recognise."
    )


def support_note(version: str | None) -> str | None:
    """One sentence when ``version`` is outside the supported range (None inside it)."""
    if is_newer_than_supported(version):
        return (
            f"vLLM {version} is newer than the newest release kvpilot knows "
            f"({short(SUPPORTED_MAX)}): plans use the {short(SUPPORTED_MAX)} memory rules, the "
            "newest known log formats are tried, and a failure kvpilot does not recognise is "
            "shown with vLLM's own last error line."
        )
    if is_older_than_supported(version):
        return (
            f"vLLM {version} is older than {short(SUPPORTED_MIN)}, the oldest release kvpilot "
            "knows: plans and log reading may be wrong; upgrade vLLM."
        )
    return None


# ------------------------------------------------------------------ CUDA-graph flags by release
def cudagraph_size_flag(version: str | None) -> str | None:
    """The flag that caps the CUDA-graph capture sizes in ``version`` (None before 0.9);
    ``--max-cudagraph-capture-size`` where both exist (0.12)."""
    if supports("max_cudagraph_capture_size_flag", version):
        return "--max-cudagraph-capture-size"
    if supports("cuda_graph_sizes_flag", version):
        return "--cuda-graph-sizes"
    return None


def has_cudagraph_mode(version: str | None) -> bool:
    """True when ``version``'s compilation config takes ``cudagraph_mode``."""
    return supports("cudagraph_mode_config", version)
