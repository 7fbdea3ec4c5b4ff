"""The budget hooks of LoRA slots, speculative decoding and the pooling runner.

:func:`adapter_terms` turns the ``--enable-lora`` / ``--speculative-config`` / ``--runner``
settings of a plan into the numbers :func:`kvpilot.core.fit.budget.compute_capacity` adds:
extra weights (LoRA stacks, draft weights), extra activation (the rejection sampler's rows),
how the CUDA-graph estimate scales, the drafter's KV per token, and a refusal vLLM makes before
it profiles. The arithmetic of each lives in :mod:`.lora` and :mod:`.speculative`.

``--runner pooling`` (embedding and reranking models): the profile run ends in
``_dummy_pooler_run`` instead of ``_dummy_sampler_run`` (``v1/worker/gpu_model_runner.py``
``profile_run``), so there is no sampler term; the KV cache of a decoder-based pooling model is
sized as for generation (an encoder-only model, e.g. BERT, has no KV cache at all and is not
planned by kvpilot).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvpilot.core.base.errors import FitError
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.plan import PlanInputs
from kvpilot.core.base.speculative_config import parse_speculative_config
from kvpilot.core.base.versions import supports
from kvpilot.core.fit import kv
from kvpilot.core.fit.lora import LoraBudget, lora_budget
from kvpilot.core.fit.speculative import SpeculativeBudget, speculative_budget

RUNNER_POOLING = "pooling"
RUNNERS = ("auto", "generate", "pooling", "draft")


@dataclass(frozen=True)
class AdapterTerms:
    """What adapters, a drafter and the runner change in one plan (bytes per GPU rank)."""

    lora: LoraBudget | None
    speculative: SpeculativeBudget | None
    pooling: bool

    @property
    def failure(self) -> Failure | None:
        """The first refusal vLLM makes while reading the configuration."""
        for part in (self.lora, self.speculative):
            if part is not None and part.failure is not None:
                return part.failure
        return None

    @property
    def extra_weights_bytes(self) -> int:
        """LoRA stacks plus draft weights: ``load_model`` of the V1 and V2 runners builds both
        inside the memory profiler of "Model loading took N GiB" (0.20.2, 0.27.1, 0.29.0 and
        0.32.0 wheels), so that figure holds them beside the checkpoint's bytes."""
        lora = self.lora.slot_bytes if self.lora else 0
        draft = self.speculative.draft_weights_bytes if self.speculative else 0
        return lora + draft

    @property
    def capture_seqs_factor(self) -> int:
        """What multiplies ``max_num_seqs`` in vLLM's largest default capture size."""
        if self.speculative is None:
            return 1
        return 1 + self.speculative.num_speculative_tokens

    def cudagraph_factor(self, target_layers: int) -> float:
        """How the CUDA-graph estimate scales: x1.5 with LoRA's specialised graphs, and the
        drafter's own graphs in proportion to its layers."""
        factor = self.lora.cudagraph_factor if self.lora else 1.0
        if self.speculative is not None and self.speculative.draft_layers and target_layers:
            factor *= (target_layers + self.speculative.draft_layers) / target_layers
        return factor

    def cudagraph_band_bytes(self, graphs_without_bytes: int) -> int:
        """Half-width the band gains from the graph estimate's uncertainty with LoRA (bytes),
        given the estimate without adapters."""
        if self.lora is None:
            return 0
        return int(graphs_without_bytes * self.lora.cudagraph_band_share)

    def layout(self, base: kv.KvLayout) -> kv.KvLayout:
        """``base`` with the drafter's attention layers in each block, and the state blocks a
        draft token adds to each request of a hybrid (:func:`kv.with_speculative_state`)."""
        if self.speculative is None:
            return base
        layout = kv.with_draft_layers(base, self.speculative.draft_kv_bytes_per_token)
        return kv.with_speculative_state(layout, self.speculative.num_speculative_tokens)

    @property
    def unknown_draft(self) -> bool:
        """True when a named draft checkpoint could not be read (its bytes are missing)."""
        return self.speculative is not None and not self.speculative.draft_known


def adapter_terms(
    inputs: PlanInputs,
    model: ModelSpec,
    *,
    max_num_batched_tokens: int,
    draft_weights_bytes: int | None = None,
) -> AdapterTerms:
    """The adapter, drafter and runner terms of ``inputs`` for the (stage) ``model``.

    ``draft_weights_bytes`` is the weight size of ``inputs.draft_model`` (the caller reads it
    from the spec or estimates it).

    Raises:
        FitError: a malformed ``--speculative-config``, an unknown ``--runner`` or LoRA dtype.
    """
    runner = (inputs.runner or "auto").lower()
    if runner not in RUNNERS:
        raise FitError(f"--runner must be one of {', '.join(RUNNERS)}, got {inputs.runner!r}")
    pooling = runner == RUNNER_POOLING
    lora = None
    if inputs.enable_lora:
        graphs_on = not inputs.enforce_eager and (inputs.cudagraph_mode or "").upper() != "NONE"
        lora = lora_budget(
            model,
            max_loras=inputs.max_loras,
            max_lora_rank=inputs.max_lora_rank,
            max_cpu_loras=inputs.max_cpu_loras,
            lora_dtype=inputs.lora_dtype,
            max_num_batched_tokens=max_num_batched_tokens,
            tensor_parallel_size=inputs.tensor_parallel_size,
            vllm_version=inputs.vllm_version,
            cudagraphs_on=graphs_on and supports("lora_cudagraph_specialize",
                                                 inputs.vllm_version),
            serve_dtype=inputs.dtype,
            fully_sharded=inputs.fully_sharded_loras,
        )
    spec = None
    if inputs.speculative_config and inputs.speculative_config.strip():
        settings = parse_speculative_config(inputs.speculative_config)
        spec = speculative_budget(
            model, settings,
            draft=inputs.draft_model,
            draft_weights_bytes=draft_weights_bytes,
            kv_cache_dtype=kv_dtype_of(inputs),
            tensor_parallel_size=inputs.tensor_parallel_size,
        )
    return AdapterTerms(lora=lora, speculative=spec, pooling=pooling)


def kv_dtype_of(inputs: PlanInputs) -> str:
    """The KV dtype of ``inputs``: ``--kv-cache-dtype`` when set, else an explicit ``--dtype``
    (``auto`` KV follows the dtype the model runs in: float32 on the CPU engine with
    ``--dtype float32``), else "auto" (the checkpoint's, as vLLM serves it)."""
    kv_dtype = (inputs.kv_cache_dtype or "auto").lower()
    if kv_dtype == "auto" and inputs.dtype and inputs.dtype.lower() not in ("auto", ""):
        return inputs.dtype
    return kv_dtype


def plan_layout(inputs: PlanInputs, model: ModelSpec, block_size: int | None,
                terms: AdapterTerms | None = None) -> kv.KvLayout:
    """The KV layout vLLM would use for ``inputs``: the model's, with a drafter's layers.

    ``terms`` are :func:`adapter_terms` of ``inputs`` when already computed.

    Raises:
        FitError: as :func:`kvpilot.core.fit.kv.kv_layout` and :func:`adapter_terms`.
    """
    base = kv.kv_layout(model, kv_dtype_of(inputs), inputs.tensor_parallel_size, block_size,
                        prefix_caching=bool(inputs.enable_prefix_caching),
                        vllm_version=inputs.vllm_version,
                        mamba_cache_mode=inputs.mamba_cache_mode,
                        mamba_ssm_cache_dtype=inputs.mamba_ssm_cache_dtype)
    if terms is None:
        if not inputs.speculative_config:
            return base
        terms = adapter_terms(inputs, model, max_num_batched_tokens=1)
    return terms.layout(base)
