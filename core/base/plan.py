"""A deployment plan (what would be passed to ``vllm serve``) and its predicted capacity.

:class:`ServingSettings` are the ``vllm serve`` settings that decide memory: one type for the
plan, the launch command, the measurement key and the settings profile. :class:`PlanInputs` adds
the model and the GPU; :class:`Capacity` is the budget computed from it by
:func:`kvpilot.core.fit.budget.compute_capacity`, every term in bytes and each with the place it
came from, so that a user interface can show and explain it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, asdict, dataclass, field, fields, replace
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from kvpilot.core.base.failures import Failure
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.versions import NEWEST_KNOWN

#: what a deployment is for (the recommender's goal), with the words the GUI shows for it
USE_CASE_LABELS: dict[str, str] = {"chat": "chat", "long-docs": "long documents",
                                   "batch": "batch", "coding": "coding"}
USE_CASES: tuple[str, ...] = tuple(USE_CASE_LABELS)

#: term sources (``BudgetTerm.source``)
FROM_FILE = "file"  # read from the checkpoint on disk
FROM_CATALOG = "catalog"
FROM_MODEL = "model"  # kvpilot's model of vLLM (this module's arithmetic)
FROM_DEFAULT = "default"  # a vLLM default for this version / GPU
FROM_USER = "user"  # given explicitly
FROM_MEASURED = "measured"  # reported by vLLM in an earlier launch on this GPU
FROM_CALIBRATED = "calibrated"  # the model corrected by a measurement of other settings
FROM_FITTED = "fitted"  # a constant fitted on public start-up logs (see core/fit/activation.py)



class Verdict(StrEnum):
    """Whether vLLM starts a plan (``Capacity.verdict``); the value is the JSON spelling."""

    FITS = "fits"
    #: the uncertainty band straddles the fit / no-fit line: vLLM may or may not start it
    BORDERLINE = "borderline"
    DOES_NOT_FIT = "does_not_fit"

    @property
    def words(self) -> str:
        """The verdict as the CLI and the window say it: "fits", "borderline", "does not fit"."""
        return self.value.replace("_", " ")


VERDICT_FITS = Verdict.FITS
VERDICT_BORDERLINE = Verdict.BORDERLINE
VERDICT_DOES_NOT_FIT = Verdict.DOES_NOT_FIT

#: failure kinds, in vLLM's terms (``Failure.kind``): see :mod:`kvpilot.core.base.failures`

#: vLLM's default ``--max-lora-rank`` (config/lora.py LoRAConfig)
DEFAULT_MAX_LORA_RANK = 16

#: the ranks ``--max-lora-rank`` accepts (config/lora.py ``MaxLoRARanks``: the same in the
#: 0.20.0, 0.24.0, 0.28.0 and 0.32.0 wheels); 0.11.0's ``possible_max_ranks`` lacks 1
ALLOWED_RANKS: tuple[int, ...] = (1, 8, 16, 32, 64, 128, 256, 320, 512)


@dataclass(frozen=True, kw_only=True)
class ServingSettings:
    """The ``vllm serve`` settings that decide memory, shared by plan, command, measurement
    and settings profile.

    ``None`` means "let vLLM choose" (the fit engine fills in that release's default and
    records it in ``Capacity.inputs``). ``max_model_len`` is tokens; ``kv_cache_memory_bytes``
    bytes per GPU; ``enable_prefix_caching`` None is vLLM's default (on for generative models).
    ``limit_mm_per_prompt`` is images per prompt for a vision-language model (``--limit-mm-per-
    prompt``; 0 = text only: images and videos disabled, no encoder profile; None = vLLM's
    default).
    """

    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    kv_cache_dtype: str = "auto"
    quantization: str | None = None
    enforce_eager: bool = False
    enable_prefix_caching: bool | None = None
    tensor_parallel_size: int = 1
    dtype: str | None = None
    block_size: int | None = None
    limit_mm_per_prompt: int | None = None
    #: largest CUDA-graph capture size (None: vLLM's default, min(2 x max_num_seqs, 512))
    max_cudagraph_capture_size: int | None = None
    #: ``--compilation-config`` cudagraph_mode (None: the release's default; "PIECEWISE" ...)
    cudagraph_mode: str | None = None
    #: ``--enable-lora`` and its slots: adapters per batch (``--max-loras``, None: vLLM's 1),
    #: the largest rank (``--max-lora-rank``, None: 16), adapters cached in host memory
    #: (``--max-cpu-loras``, None: ``max_loras``) and ``--lora-dtype`` (None: "auto", the
    #: model's dtype); see :mod:`kvpilot.core.fit.lora`
    enable_lora: bool = False
    max_loras: int | None = None
    max_lora_rank: int | None = None
    max_cpu_loras: int | None = None
    lora_dtype: str | None = None
    #: ``--fully-sharded-loras``: under tensor parallelism each GPU keeps a slice of the LoRA
    #: stacks' rank / hidden rows instead of the whole (see :mod:`kvpilot.core.fit.lora`)
    fully_sharded_loras: bool = False
    #: ``--speculative-config`` as the JSON text vLLM takes (method, num_speculative_tokens,
    #: model); see :mod:`kvpilot.core.fit.speculative`
    speculative_config: str | None = None
    #: ``--runner`` ("generate", "pooling"; None: vLLM's choice from the architecture)
    runner: str | None = None
    #: ``--pipeline-parallel-size``: pipeline stages (see :mod:`kvpilot.core.fit.parallel`)
    pipeline_parallel_size: int = 1
    #: ``--language-model-only``: vLLM loads no vision / audio tower and profiles no encoder
    #: (every modality limited to 0)
    language_model_only: bool = False
    #: ``--cpu-offload-gb``: GiB of weights per GPU vLLM keeps in pinned host memory (None: 0)
    cpu_offload_gb: float | None = None
    #: ``--mamba-cache-mode`` ("all", "align", "none"; None: vLLM's choice for the model)
    mamba_cache_mode: str | None = None
    #: ``--mamba-ssm-cache-dtype`` ("float32", "float16", "bfloat16"; None or "auto": the
    #: checkpoint's ``mamba_ssm_dtype``, else the conv state's dtype)
    mamba_ssm_cache_dtype: str | None = None

    @property
    def mm_limit(self) -> int | None:
        """Images per prompt as vLLM applies them: 0 with ``--language-model-only``."""
        return 0 if self.language_model_only else self.limit_mm_per_prompt

    @property
    def settings(self) -> ServingSettings:
        """These settings alone (drops whatever a subclass adds: model, GPU, process)."""
        return ServingSettings(**{name: getattr(self, name) for name in serving_field_names()})

    def with_settings(self: _S, settings: ServingSettings) -> _S:
        """A copy of this object with every serving setting taken from ``settings``."""
        return replace(self, **settings_dict(settings))

    def settings_changes(self, other: ServingSettings) -> dict[str, Any]:
        """``{setting: other's value}`` for each serving setting that differs in ``other``."""
        return {
            name: getattr(other, name)
            for name in serving_field_names()
            if getattr(self, name) != getattr(other, name)
        }


_S = TypeVar("_S", bound=ServingSettings)


def serving_field_names() -> tuple[str, ...]:
    """The names of the :class:`ServingSettings` fields, in declaration order."""
    return _SERVING_FIELDS


def settings_dict(settings: ServingSettings) -> dict[str, Any]:
    """``{field: value}`` of the serving settings of ``settings`` (JSON-ready values)."""
    return {name: getattr(settings, name) for name in _SERVING_FIELDS}


def settings_from_dict(data: Mapping[str, Any]) -> ServingSettings:
    """:class:`ServingSettings` from a mapping; unknown keys are ignored.

    Raises:
        TypeError: a value has the wrong type for its field.
    """
    values = {k: v for k, v in data.items() if k in _SERVING_FIELDS}
    for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens",
                 "kv_cache_memory_bytes", "block_size", "limit_mm_per_prompt",
                 "max_cudagraph_capture_size", "max_loras", "max_lora_rank", "max_cpu_loras"):
        v = values.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"{name} must be a whole number or null, got {v!r}")
    util = values.get("gpu_memory_utilization")
    if util is not None and (isinstance(util, bool) or not isinstance(util, (int, float))):
        raise TypeError(f"gpu_memory_utilization must be a number or null, got {util!r}")
    for name in ("tensor_parallel_size", "pipeline_parallel_size"):
        n = values.get(name, 1)
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"{name} must be a whole number, got {n!r}")
    offload = values.get("cpu_offload_gb")
    if offload is not None and (isinstance(offload, bool)
                                or not isinstance(offload, (int, float))):
        raise TypeError(f"cpu_offload_gb must be a number or null, got {offload!r}")
    for name in ("enforce_eager", "enable_lora", "fully_sharded_loras", "language_model_only"):
        if name in values and not isinstance(values[name], bool):
            raise TypeError(f"{name} must be true or false, got {values[name]!r}")
    for name in ("kv_cache_dtype", "quantization", "dtype", "cudagraph_mode", "lora_dtype",
                 "speculative_config", "runner", "mamba_cache_mode", "mamba_ssm_cache_dtype"):
        v = values.get(name)
        if v is not None and not isinstance(v, str):
            raise TypeError(f"{name} must be text or null, got {v!r}")
    if values.get("kv_cache_dtype") is None:
        values.pop("kv_cache_dtype", None)
    return ServingSettings(**values)


@dataclass(frozen=True, kw_only=True)
class PlanInputs(ServingSettings):
    """The serving settings of a plan, plus the model and the GPU they run on.

    Memory sizes are bytes per GPU; ``gpu_name`` ``"cpu"`` with the RAM as ``gpu_total_bytes``
    plans for vLLM's CPU backend. ``vllm_version`` is the release whose rules apply.
    """

    model: ModelSpec
    gpu_total_bytes: int
    gpu_free_bytes: int | None = None
    gpu_name: str = ""
    compute_capability: tuple[int, int] | None = None
    #: other processes holding GPU memory when ``gpu_free_bytes`` was read: (name, bytes),
    #: largest first; named in the start-up failure so that the user knows what to close
    gpu_memory_holders: tuple[tuple[str, int], ...] = ()
    vllm_version: str = NEWEST_KNOWN
    #: the draft model ``speculative_config`` names ("model"), when it could be read (None: no
    #: draft model, or one kvpilot could not read: the plan says so)
    draft_model: ModelSpec | None = None
    #: several GPUs (see :mod:`kvpilot.core.fit.parallel`): how the tensor-parallel ranks
    #: all-reduce (``nvlink``, ``p2p``, ``host``; None: not known)
    gpu_allreduce: str | None = None
    #: ``VLLM_USE_V2_MODEL_RUNNER`` in the start-up's environment (None: unset, the release's
    #: own choice; :mod:`kvpilot.core.fit.runner`)
    use_v2_model_runner: bool | None = None
    #: the GPU is reached through WSL2, sharing it with the Windows desktop through WDDM
    #: (:mod:`kvpilot.core.fit.wsl2_residency`)
    gpu_under_wsl2: bool = False

    @property
    def on_cpu_backend(self) -> bool:
        """True for vLLM's CPU backend (``gpu_name`` :data:`CPU_DEVICE_NAME`, in any case)."""
        return self.gpu_name.lower() == CPU_DEVICE_NAME

    @classmethod
    def on_gpu(
        cls, model: ModelSpec, gpu: GpuMemoryView, **values: Any  # noqa: ANN401 - fields, typed below
    ) -> PlanInputs:
        """The inputs for ``model`` on ``gpu`` (its size, free memory now, what holds it,
        compute capability); ``values`` are the other fields (settings, vLLM version)."""
        return cls(
            model=model,
            gpu_total_bytes=gpu.total_bytes,
            gpu_free_bytes=gpu.free_bytes,
            gpu_name=gpu.name,
            compute_capability=gpu.compute_capability,
            gpu_memory_holders=gpu.memory_holders,
            gpu_under_wsl2=gpu.under_wsl2,
            **values,
        )


class GpuMemoryView(Protocol):
    """What :meth:`PlanInputs.on_gpu` reads of a GPU (a :class:`GpuTarget`, the CLI's device)."""

    @property
    def name(self) -> str: ...
    @property
    def total_bytes(self) -> int: ...
    @property
    def free_bytes(self) -> int | None: ...
    @property
    def compute_capability(self) -> tuple[int, int] | None: ...
    @property
    def memory_holders(self) -> tuple[tuple[str, int], ...]: ...
    @property
    def under_wsl2(self) -> bool: ...



#: ``PlanInputs.gpu_name`` of vLLM's CPU backend (RAM as its memory)
CPU_DEVICE_NAME = "cpu"

_SERVING_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ServingSettings))


@dataclass(frozen=True)
class GpuTarget:
    """A GPU to plan for: bytes, bytes/s, TFLOPS (None: unknown).

    One card of this machine or of the spec table, or what each rank of several can count on
    (:func:`kvpilot.core.fit.parallel.per_gpu`). ``memory_holders`` are (process name, bytes)
    holding memory when ``free_bytes`` was read, largest first; ``index``/``uuid`` name this
    machine's GPU for NVML and ``CUDA_VISIBLE_DEVICES``; ``under_wsl2`` is True when it is
    reached through WSL2 (shared with the Windows desktop).
    """

    name: str
    total_bytes: int
    free_bytes: int | None = None
    compute_capability: tuple[int, int] | None = None
    bandwidth_bytes_per_s: float | None = None
    bf16_dense_tflops: float | None = None
    _: KW_ONLY
    memory_holders: tuple[tuple[str, int], ...] = ()
    drives_display: bool = False
    under_wsl2: bool = False
    index: int | None = None
    uuid: str | None = None

    @property
    def short_name(self) -> str:
        """``RTX 4090`` for ``NVIDIA GeForce RTX 4090``."""
        return self.name.replace("NVIDIA ", "").replace("GeForce ", "")


@dataclass(frozen=True)
class BudgetTerm:
    """One line of the memory budget: ``bytes`` (per GPU) and where the figure came from."""

    name: str
    bytes: int
    source: str
    note: str = ""


@dataclass(frozen=True)
class Capacity:
    """The predicted memory budget and KV capacity of a plan (all memory in bytes per GPU).

    ``kv_cache_tokens`` and ``max_concurrency`` are what vLLM logs as "KV cache size: N tokens,
    Maximum concurrency for L tokens per request: Cx"; ``failure`` says why vLLM would refuse
    to start at the central prediction.

    ``available_kv_band_bytes`` is (low, high) around ``available_kv_bytes``: the validation
    error of the version row plus the uncertainty of where the weights came from. ``verdict``
    is "fits" when even the low edge starts, "does_not_fit" when even the high edge fails (or a
    deterministic check fails), else "borderline"; ``fits`` is True only for "fits".
    """

    requested_bytes: int
    weights_bytes: int
    non_torch_bytes: int
    activation_peak_bytes: int
    cudagraph_bytes: int
    available_kv_bytes: int
    kv_bytes_per_token: int
    page_bytes_per_block: int
    block_size: int
    num_blocks: int
    kv_cache_tokens: int
    max_concurrency: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    fits: bool
    failure: Failure | None
    terms: tuple[BudgetTerm, ...]
    inputs: dict[str, Any] = field(default_factory=dict)
    headroom_bytes: int | None = None
    available_kv_band_bytes: tuple[int, int] = (0, 0)
    verdict: Verdict = Verdict.FITS

    @property
    def available_kv_low_bytes(self) -> int:
        """The band's lower edge (what the recommender and fallbacks rank by)."""
        return self.available_kv_band_bytes[0]

    @property
    def max_concurrency_low(self) -> float:
        """Maximum concurrency at the band's lower edge (blocks scale with KV memory)."""
        if self.available_kv_bytes <= 0:
            return 0.0
        return self.max_concurrency * max(self.available_kv_low_bytes, 0) / self.available_kv_bytes

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the ``kvpilot plan --json`` object)."""
        data = asdict(self)
        data["terms"] = [asdict(t) for t in self.terms]
        data["available_kv_band_bytes"] = list(self.available_kv_band_bytes)
        return data
