"""The memory budget of one plan, computed the way vLLM computes it (reference §4).

::

    requested    = ceil(total x gpu_memory_utilization)      (start-up fails if free < requested)
    available_kv = requested - weights - non_torch - activation_peak [- cudagraph, vLLM >= 0.20]
    num_blocks   = available_kv // bytes_per_block
    kv_tokens    = int(max_concurrency x max_model_len);  max_concurrency = blocks / blocks_per_req

From vLLM 0.34 the extensible KV cache (on by default on CUDA) replaces the budget: the final
cache is ``min(requested - resident, free at launch - resident - margin) - activation_peak``
with ``resident = weights + non_torch + the captured graph pool``, the utilization (unset:
1.0) is only a cap and no free-memory start-up check exists (:mod:`.extensible_kv`); the
default block is 64 tokens (``versions.default_block_size``).

Every term is returned separately with its source so that the GUI can explain it, and a
measurement taken on this GPU (see :mod:`kvpilot.core.fit.measurements`) replaces the modelled
terms when one matches.
"""

from __future__ import annotations

import math
from typing import Any

from kvpilot.core.base import failures, model_spec
from kvpilot.core.base.errors import FitError
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.plan import (
    CPU_DEVICE_NAME,
    FROM_CATALOG,
    FROM_DEFAULT,
    FROM_FILE,
    FROM_FITTED,
    FROM_MEASURED,
    FROM_MODEL,
    FROM_USER,
    VERDICT_BORDERLINE,
    VERDICT_DOES_NOT_FIT,
    VERDICT_FITS,
    BudgetTerm,
    Capacity,
    PlanInputs,
    Verdict,
)
from kvpilot.core.base.units import GiB
from kvpilot.core.base.versions import Release, default_block_size, default_utilization, supports
from kvpilot.core.fit import (
    activation,
    adapters,
    budget_now,
    compile_charge,
    extensible_kv,
    kv,
    linear_state,
    multimodal,
    mxfp4_padding,
    nccl_capture,
    offload,
    parallel,
    profiling_kv,
    runner,
    v2_sampler_states,
    wsl2_residency,
)

#: GPUs with at least this much memory get vLLM's large batch defaults (H100/H200 class)
_LARGE_GPU_BYTES = 70 * GiB
_HUGE_GPU_BYTES = 160 * GiB


#: what vLLM's own process holds before its free-memory check (bytes); the same allowance the
#: GPU panel and `kvpilot gpu` use
CUDA_CONTEXT_BYTES = budget_now.CUDA_CONTEXT_BYTES


def default_batching(
    gpu_total_bytes: int,
    gpu_name: str,
    max_model_len: int,
    version: str | None,
    compute_capability: tuple[int, int] | None = None,
    *,
    v0_only: bool = False,
) -> tuple[int, int]:
    """vLLM's ``(max_num_batched_tokens, max_num_seqs)`` defaults for ``vllm serve``.

    Per release (``engine/arg_utils.py``, OPENAI_API_SERVER usage context):

    * V0 (0.6-0.7, and the V0 fallback of 0.8-0.10.1 below SM 8.0): 256 sequences; chunked
      prefill is off unless max_model_len > 32k, so ``SchedulerConfig.__post_init__`` profiles
      ``max(max_model_len, 2048)`` tokens (2048 with chunked prefill).
    * V1 0.8.x ``_set_default_args_v1``: >= 70 GiB -> 8192 tokens / 1024 sequences (A100 80GB
      included), else 2048 / 256.
    * V1 0.9 to 0.26 ``_set_default_args``: the same, A100 excluded from the large row.
    * 0.28+ ``get_batch_defaults``: >= 160 GiB -> 16384 / 1024 first; 0.33 also keeps GB10
      (SM 12.1) off the large row.

    ``gpu_name`` ``cpu`` is vLLM's CPU backend (2048 tokens, 128 sequences per worker).
    ``v0_only``: the model runs on the V0 engine whatever the release's default (Mllama).
    """
    profile = activation.profile_for(version, compute_capability)
    if v0_only:
        profile = activation.V0_PROFILE
    v = Release.parse(version)
    name = gpu_name.lower()
    if name == CPU_DEVICE_NAME:
        return 2048, 128  # the CPU platform's defaults for the API server (world size 1)
    if profile.engine == "V0":
        seqs = 256
        batched = max(max_model_len, 2048) if max_model_len <= 32768 else 2048
        return batched, seqs
    if gpu_total_bytes >= _HUGE_GPU_BYTES and supports("batch_defaults_huge_gpu", v):
        return 16384, 1024
    a100_excluded = supports("batch_defaults_a100_small", v)
    # 0.33 keeps GB10 (DGX Spark, SM 12.1: the memory, not the compute) on the small tier
    gb10 = compute_capability == (12, 1) and supports("batch_defaults_gb10_small", v)
    if (gpu_total_bytes >= _LARGE_GPU_BYTES and not (a100_excluded and "a100" in name)
            and not gb10):
        return 8192, 1024
    return 2048, 256


def _weights_source(model: model_spec.ModelSpec) -> str:
    if model.weights_source in (model_spec.SOURCE_FILE, model_spec.SOURCE_INDEX):
        return FROM_FILE
    if model.weights_source in (model_spec.SOURCE_CATALOG, model_spec.SOURCE_HUB):
        return FROM_CATALOG
    return FROM_MODEL


def estimate_weights_bytes(model: model_spec.ModelSpec) -> int:
    """Weight bytes from the architecture when no file size is known (16-bit dense estimate).

    Raises:
        FitError: when the architecture lacks the widths needed.
    """
    h, layers, vocab = model.hidden_size, model.num_hidden_layers, model.vocab_size
    if h <= 0 or layers <= 0:
        raise FitError(f"{model.model_id}: cannot estimate weights without hidden size and layers")
    q = model.num_attention_heads * model.head_dim
    kvd = model.num_key_value_heads * model.head_dim
    attn = h * (q + 2 * kvd) + q * h
    if model.moe is not None:
        moe_i = model.moe.moe_intermediate_size or model.intermediate_size or 4 * h
        mlp = model.moe.num_experts * 3 * h * moe_i + h * model.moe.num_experts
    else:
        mlp = 3 * h * (model.intermediate_size or 4 * h)
    embed = vocab * h * (1 if model.tie_word_embeddings else 2)
    params = layers * (attn + mlp + 2 * h) + embed + h
    bits = model.quantization.bits if model.quantization and model.quantization.bits else 16
    body = layers * (attn + mlp) * bits / 8
    return int(body + (params - layers * (attn + mlp)) * 2)


def compute_capacity(
    inputs: PlanInputs, constants: activation.FittedConstants | None = None
) -> Capacity:
    """Predict vLLM's memory budget and KV capacity for ``inputs``.

    ``constants`` replaces the fitted constants (validation refits them without a case).

    Raises:
        FitError: for inputs that make no sense (utilization outside (0, 1], negative sizes).
    """
    model = parallel.stage_model(inputs.model, inputs.pipeline_parallel_size)
    profile = activation.profile_for(inputs.vllm_version, inputs.compute_capability)
    v0_only = multimodal.runs_on_v0_only(model, inputs.vllm_version)
    if v0_only:
        profile = activation.V0_PROFILE  # vLLM falls back to V0 for this architecture
    # the model runner this release picks for the model (V2 from 0.22: its sampler path)
    profile = runner.runner_profile(profile, model, inputs)
    # no estimate before 0.20; the V2 runner's profile_cudagraph_memory returns 0 before 0.29
    graphs_outside = runner.graphs_outside_budget(profile, model, inputs)
    graphs_counted = profile.cudagraph_in_budget and not graphs_outside
    fitted = constants or activation.FITTED
    tp = inputs.tensor_parallel_size
    if tp < 1:
        raise FitError("tensor_parallel_size must be at least 1")
    if inputs.gpu_total_bytes <= 0:
        raise FitError("the GPU's total memory must be positive (give --gpu-total-mib)")
    # 0.34+: the extensible KV cache sizes the final cache from the memory free at launch
    extension_off = extensible_kv.extension_off_reason(
        inputs.vllm_version, is_cpu=inputs.on_cpu_backend,
        kv_cache_memory_bytes=inputs.kv_cache_memory_bytes)
    extensible = extension_off is None
    util_source = FROM_USER
    util = inputs.gpu_memory_utilization
    if util is None:
        util, util_source = profile.default_utilization, FROM_DEFAULT
        if extensible:
            util = default_utilization(inputs.vllm_version, extensible=True)
    if not 0 < util <= 1:
        raise FitError(f"gpu_memory_utilization must be in (0, 1], got {util}")

    derived_len = model.derived_max_model_len
    max_len = inputs.max_model_len if inputs.max_model_len else derived_len
    if max_len <= 0:
        raise FitError(f"max_model_len must be positive, got {max_len}")

    default_batched, default_seqs = default_batching(
        inputs.gpu_total_bytes, inputs.gpu_name, max_len, inputs.vllm_version,
        inputs.compute_capability, v0_only=v0_only,
    )
    seqs = inputs.max_num_seqs or default_seqs
    batched = inputs.max_num_batched_tokens or default_batched
    if not inputs.max_num_batched_tokens:
        batched = min(seqs * max_len, batched)
    seqs = min(seqs, batched)
    draft_weights = None
    if inputs.draft_model is not None:
        draft_weights = (inputs.draft_model.weights_bytes
                         if inputs.draft_model.weights_bytes is not None
                         else estimate_weights_bytes(inputs.draft_model))
    adapt = adapters.adapter_terms(inputs, model, max_num_batched_tokens=batched,
                                   draft_weights_bytes=draft_weights)

    # ---- the terms ---------------------------------------------------------------------
    requested = math.ceil(inputs.gpu_total_bytes * util)
    if model.weights_bytes is not None:
        weights_total, weights_src = model.weights_bytes, _weights_source(model)
    else:
        weights_total, weights_src = estimate_weights_bytes(model), FROM_MODEL
    weights = math.ceil(weights_total / tp)
    mxfp4_pad = mxfp4_padding.padding_bytes(model, tp, inputs.compute_capability)
    weights += mxfp4_pad
    # the RoPE tables: buffers each rank builds whole, in "Model loading took" but no file
    rope = model.rope_cache_bytes
    weights += rope
    tables = v2_sampler_states.budget_bytes(model, inputs, max_num_seqs=seqs)
    non_torch = parallel.non_torch_bytes(
        tp, inputs.pipeline_parallel_size, inputs.gpu_allreduce, constants=fitted
    ) + tables
    batch = multimodal.ProfileBatch(
        vllm_version=inputs.vllm_version,
        max_model_len=max_len,
        max_num_batched_tokens=batched,
        max_num_seqs=seqs,
        limit_mm_per_prompt=inputs.mm_limit,
        engine=profile.engine,
    )
    sampler_seqs = 0 if adapt.pooling else multimodal.profile_num_seqs(model, batch)
    act = activation.activation_peak_bytes(
        model,
        max_num_batched_tokens=batched,
        max_num_seqs=sampler_seqs,
        profile=profile,
        tensor_parallel_size=tp,
        serve_dtype=inputs.dtype,
        constants=fitted,
        compiled=not inputs.enforce_eager,
    )
    act += adapter_activation_bytes(adapt, model, sampler_seqs, profile, tp, fitted)
    compile_note = compile_charge.note(act, model, inputs)
    act = compile_charge.peak_bytes(act, model, inputs)
    capture_seqs = seqs
    if supports("spec_decode_capture_scaled", inputs.vllm_version):
        capture_seqs = seqs * adapt.capture_seqs_factor
    graphs = activation.plan_cudagraph_bytes(
        inputs, model, max_num_seqs=capture_seqs, max_num_batched_tokens=batched,
        constants=fitted,
    )
    graphs_band = adapt.cudagraph_band_bytes(graphs) if graphs_counted else 0
    graphs = int(graphs * adapt.cudagraph_factor(model.num_hidden_layers))
    graphs_in_budget = graphs if graphs_counted else 0
    encoder = multimodal.encoder_profile(
        model,
        batch,
        language_peak_bytes=act,
        tensor_parallel_size=tp,
        elem_bytes=activation.activation_bytes_per_element(inputs.dtype),
    )
    encoder_bytes = encoder.bytes if encoder is not None else 0
    if encoder is not None and encoder.tower_weights_bytes:
        weights = max(0, weights - encoder.tower_weights_bytes)
    weights += adapt.extra_weights_bytes  # vLLM's "Model loading took" holds them too
    # towers sized from their config sections (Gemma 4's audio tower; its vision tower is the
    # encoder profile's): vLLM's _mark_tower_model skips them
    # when every modality's limit is 0 (gemma4_mm.py, 0.21.0 wheel)
    skipped_towers = 0
    if inputs.mm_limit == 0 and model.tower_weights_bytes:
        skipped_towers = math.ceil(model.tower_weights_bytes / tp)
        weights = max(0, weights - skipped_towers)
    # --cpu-offload-gb: the decoder layers' parameters move to pinned host memory, one whole
    # parameter at a time, until the budget is reached (model_executor/offloader/uva.py)
    offloaded = offload.offloaded_bytes(model, inputs.cpu_offload_gb, weights, tp)
    weights = max(0, weights - offloaded)

    ext: extensible_kv.ExtensibleKvBudget | None = None
    if inputs.kv_cache_memory_bytes is not None:
        available = inputs.kv_cache_memory_bytes
        kv_src, kv_note = FROM_USER, "--kv-cache-memory-bytes replaces the utilization budget"
    elif extensible:
        graphs_in_budget = 0  # no estimate: the captured pool is simply no longer free
        ext = extensible_kv.final_kv_budget(
            total_bytes=inputs.gpu_total_bytes, free_now_bytes=inputs.gpu_free_bytes,
            utilization=util, non_kv_bytes=weights + non_torch + graphs,
            transient_peak_bytes=act + encoder_bytes,
        )
        available = ext.available_kv_bytes
        kv_src = FROM_MODEL
        kv_note = (
            "min(requested - resident, free at launch - resident - margin) - peak, resident = "
            "weights + non-torch + graph pool; " + extensible_kv.SOURCE_FORMULA + ", then "
            + extensible_kv.SOURCE_FINAL
            + ("; the utilization cap binds, withholding "
               f"{ext.withheld_bytes / GiB:.2f} GiB" if ext.bound == "utilization" else "")
        )
    else:
        available = requested - weights - non_torch - act - encoder_bytes - graphs_in_budget
        kv_src, kv_note = FROM_MODEL, "requested - weights - non-torch - activation - graphs"
        if encoder is not None:
            kv_note = "requested - weights - non-torch - activation - encoder - graphs"

    layout = adapters.plan_layout(inputs, model, block_size_of(inputs), adapt)
    in_flight = batched * activation.in_flight_batches(inputs.vllm_version)
    cap = kv.kv_capacity(
        layout, available, max_len, in_flight,
        tokens_from_concurrency=profile.tokens_from_concurrency
        and supports("kv_tokens_from_concurrency", inputs.vllm_version),
    )

    # ---- failures, in the order vLLM meets them -----------------------------------------
    failure: Failure | None = None
    if inputs.max_model_len and inputs.max_model_len > derived_len:
        failure = Failure(
            failures.MAX_MODEL_LEN_ABOVE_MODEL,
            f"max_model_len {inputs.max_model_len:,} is above the model's limit of "
            f"{derived_len:,} tokens.",
        )
    elif adapt.failure is not None:
        failure = adapt.failure
    elif ext is not None and ext.exceeds_free:
        failure = Failure(
            failures.NO_KV_MEMORY,
            f"weights and overheads ({ext.non_kv_bytes / GiB:.2f} GiB), the activation peak "
            f"({ext.transient_peak_bytes / GiB:.2f} GiB) and vLLM 0.34's margin "
            f"({ext.margin_bytes / GiB:.2f} GiB) leave no room for the KV cache in the "
            f"{ext.init_free_bytes / GiB:.2f} GiB free at launch; free GPU memory, or pick a "
            "smaller model or shorter context.",
        )
    elif (
        ext is None
        and inputs.gpu_free_bytes is not None
        and inputs.gpu_free_bytes - CUDA_CONTEXT_BYTES < requested
    ):
        best = max_passing_utilization(inputs.gpu_total_bytes, inputs.gpu_free_bytes)
        close = ""
        if inputs.gpu_memory_holders:
            shortfall = requested - (inputs.gpu_free_bytes - CUDA_CONTEXT_BYTES)
            holders = budget_now.holders_phrase(inputs.gpu_memory_holders)
            close = (
                f" Other programs hold GPU memory: {holders}; closing {shortfall / GiB:.2f} GiB "
                "of them lets this utilization start."
            )
        failure = Failure(
            failures.FREE_MEMORY_BELOW_UTILIZATION,
            f"{inputs.gpu_free_bytes / GiB:.2f} of {inputs.gpu_total_bytes / GiB:.2f} GiB are "
            f"free (about {CUDA_CONTEXT_BYTES / GiB:.2f} GiB less once vLLM's CUDA context "
            f"exists) but utilization {util:g} requests {requested / GiB:.2f} GiB; at most "
            f"--gpu-memory-utilization {best:.2f} would start." + close,
        )
    elif available <= 0 or cap.num_blocks == 0:
        failure = Failure(
            failures.NO_KV_MEMORY,
            f"no memory is left for the KV cache: weights, activations and overheads take "
            f"{(requested - available) / GiB:.2f} of the {requested / GiB:.2f} GiB requested.",
        )
    else:
        usable = cap.num_blocks - (1 if profile.null_block_reserved else 0)
        if cap.blocks_per_request > usable:
            estimate = kv.estimate_max_model_len(
                layout, cap.num_blocks, max_len, in_flight,
                reserve_null_block=profile.null_block_reserved,
            )
            needed = layout.kv_bytes_per_request(max_len, in_flight)
            failure = Failure(
                failures.KV_CACHE_TOO_SMALL,
                f"a {max_len:,}-token context needs {needed / GiB:.2f} GiB of KV cache but "
                f"{available / GiB:.2f} GiB is available; the estimated maximum model length "
                f"is {estimate:,}.",
                estimated_max_model_len=estimate,
            )
        else:
            failure = linear_state.mamba_blocks_failure(inputs, layout, cap.num_blocks, seqs)

    if failure is None or failure.kind in (failures.NO_KV_MEMORY, failures.KV_CACHE_TOO_SMALL):
        failure = profiling_kv.startup_failure(  # met before the KV cache is sized
            inputs, estimates=not graphs_outside,
            bytes_per_block=layout.bytes_per_block, max_num_seqs=seqs,
            max_num_batched_tokens=batched, resident_bytes=weights + non_torch) or failure
    sampler = activation.sampler_buffers(model, sampler_seqs, profile)
    residual, residual_bytes = activation.sampler_residual(
        profile, sampler_seqs, fitted, compiled=not inputs.enforce_eager)
    act_note = (
        f"profile run: {batched:,} tokens, sampler {sampler_seqs} x {model.vocab_size:,} "
        "logits x "
        f"{sum(b.units for b in sampler):g} fp32-sized copies (vLLM {profile.since}+: "
        f"{profile.source.split(';')[0]})"
    )
    act_source = FROM_MODEL
    if residual:
        act_source = FROM_FITTED
        act_note += (f"; plus {residual:+.2f} logit units "
                     + fitted.source(f"activation_residual_units[{profile.key}]"))
    if residual_bytes:
        act_source = FROM_FITTED
        act_note += (f"; plus {residual_bytes / GiB:+.2f} GiB sampler remainder "
                     + fitted.source(f"activation_residual_bytes[{profile.key}]"))
    remainder = fitted.row_remainder_bytes.get(profile.key, 0)
    if remainder:
        act_source = FROM_FITTED
        act_note += (f"; plus {remainder / GiB:+.2f} GiB row remainder "
                     + fitted.source(f"row_remainder_bytes[{profile.key}]"))
    act_note += compile_note
    if ext is not None:
        act_note += ("; 0.34 keeps this transient peak free after warm-up (the larger of it and "
                     "the warm-up steps' peak: " + extensible_kv.SOURCE_PEAK + ")")

    # ---- the uncertainty band and the verdict --------------------------------------------
    if inputs.kv_cache_memory_bytes is not None:
        half = 0  # vLLM uses the given size as it is
    else:
        half = activation.VALIDATION.half_width_for(profile, requested, tp)
        half += int(weights * _WEIGHTS_UNCERTAINTY.get(weights_src, 0.0)) + graphs_band
    # under WSL2, memory Windows makes resident while vLLM loads is charged to it
    wsl2_room = wsl2_residency.room_bytes(inputs) if ext is None else 0
    band = (available - half - wsl2_room, available + half)
    verdict = band_verdict(inputs, band, failure)
    if ext is not None and ext.exceeds_free:
        verdict = VERDICT_DOES_NOT_FIT  # finalize_extensible_kv_cache finds no block
    if adapt.unknown_draft and verdict == VERDICT_FITS:
        verdict = VERDICT_BORDERLINE  # the draft's weights and KV are not in the figures

    fits_before_capture = verdict == VERDICT_FITS  # the capture rules below may move it
    headroom = None
    if ext is not None:
        headroom = ext.left_free_bytes if inputs.gpu_free_bytes is not None else None
    elif inputs.gpu_free_bytes is not None:
        headroom = nccl_capture.spare_bytes(inputs, requested)
        # graphs captured after the KV cache from memory outside the budget: with less free
        # than the capture takes, vLLM runs out of memory capturing (a Gemma 4 E4B start-up on
        # an L4 shared with another process, vLLM 0.28.0)
        if graphs_outside and graphs > headroom and verdict == VERDICT_FITS:
            verdict = VERDICT_BORDERLINE
    capture = nccl_capture.GraphCapture(graphs_outside, graphs, requested)
    verdict = nccl_capture.capture_verdict(verdict, inputs, capture) if ext is None else verdict

    weights_note = "checkpoint bytes" + (f" / {tp} ranks" if tp > 1 else "")
    if mxfp4_pad:
        weights_note += (f", plus {mxfp4_pad / GiB:.2f} GiB the MXFP4 MoE kernel's padding of "
                         "the expert tensors adds")
    if rope >= 2**20:  # tables under 1 MiB are not worth a word
        weights_note += f", plus {rope / 2**20:,.0f} MiB of RoPE cos/sin tables"
    weights_note += adapter_weights_note(adapt)
    if skipped_towers:
        weights_note += (f", less the {skipped_towers / GiB:.2f} GiB vision / audio towers vLLM "
                         "skips with every modality's limit 0")
    if offloaded:
        weights_note += (f", less {offloaded / GiB:.2f} GiB of decoder-layer weights kept in "
                         "host memory (--cpu-offload-gb)")
    if encoder is not None and encoder.tower_weights_bytes:
        weights_note += (
            f", less the {encoder.tower_weights_bytes / GiB:.2f} GiB vision tower vLLM skips "
            "with images disabled"
        )
    requested_note = f"ceil(total x {util:g}) of {inputs.gpu_total_bytes / GiB:.2f} GiB"
    if ext is not None:
        requested_note += (", only a cap with the extensible KV cache ("
                           + extensible_kv.SOURCE_UTILIZATION + "; no start-up check, "
                           "v1/worker/utils.py request_memory)")
    non_torch_name = "non_torch_tensor_parallel_bytes" if tp > 1 else "non_torch_single_gpu_bytes"
    terms: tuple[BudgetTerm, ...] = (
        BudgetTerm("requested", requested, util_source, requested_note),
        BudgetTerm("weights", weights, weights_src, weights_note),
        BudgetTerm("non_torch", non_torch,
                   FROM_FITTED if fitted.fitted_on.get(non_torch_name) else FROM_MODEL,
                   "cuBLAS/attention workspaces" + v2_sampler_states.note(tables)
                   + parallel.non_torch_note(tp, inputs.pipeline_parallel_size,
                                             inputs.gpu_allreduce, constants=fitted) + "; "
                   + fitted.source(non_torch_name)),
        BudgetTerm("activation_peak", act, act_source, act_note),
        *((BudgetTerm(ENCODER_PROFILE_TERM, encoder_bytes, FROM_MODEL, encoder.note),)
          if encoder is not None else ()),
        BudgetTerm("cudagraph", graphs if ext is not None else graphs_in_budget,
                   FROM_FITTED if graphs_in_budget or ext is not None else FROM_MODEL,
                   ("eager mode: no graphs" if inputs.enforce_eager else
                    f"captured pool {graphs / GiB:.2f} GiB, resident after capture ("
                    + extensible_kv.SOURCE_NO_GRAPH_ESTIMATE + ")" if ext is not None else
                    f"estimate {graphs / GiB:.2f} GiB"
                    + adapter_graphs_note(adapt, inputs.vllm_version) +
                    ("" if graphs_counted else ", outside the budget before 0.20 (before "
                     "0.29 on the V2 runner)")
                    + nccl_capture.note(inputs, capture)
                    + ("; " + fitted.source("cudagraph_bytes_per_layer_hidden_token")
                       if graphs_in_budget else ""))),
        *(extensible_terms(ext) if ext is not None else ()),
        BudgetTerm("kv_cache", available, kv_src, kv_note),
    )
    used_inputs: dict[str, Any] = {
        "gpu_total_bytes": inputs.gpu_total_bytes,
        "gpu_free_bytes": inputs.gpu_free_bytes,
        "gpu_name": inputs.gpu_name,
        "gpu_memory_utilization": util,
        "max_model_len": max_len,
        "max_num_seqs": seqs,
        "max_num_batched_tokens": batched,
        "kv_cache_dtype": inputs.kv_cache_dtype,
        "kv_cache_memory_bytes": inputs.kv_cache_memory_bytes,
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": inputs.pipeline_parallel_size,
        "enforce_eager": inputs.enforce_eager,
        "block_size": layout.block_size,
        "extensible_kv_cache": extensible,
        "extensible_kv_off_reason": extension_off if supports(
            "extensible_kv_cache", inputs.vllm_version) else None,
        "launch_free_bytes": ext.init_free_bytes if ext is not None else None,
        "kv_margin_bytes": ext.margin_bytes if ext is not None else None,
        "vllm_version": inputs.vllm_version,
        "model_runner": "V2" if runner.uses_v2_runner(model, inputs) else profile.engine,
        "vllm_rules_since": str(profile.since),
        "vllm_rules_source": profile.source,
        "model": model.model_id,
        "weights_source": weights_src,
        "architecture_known": model.architecture_known,
        "limit_mm_per_prompt": inputs.limit_mm_per_prompt,
        "language_model_only": inputs.language_model_only,
        "cpu_offload_gb": inputs.cpu_offload_gb,
        "cpu_offloaded_bytes": offloaded,
        "mamba_cache_mode": inputs.mamba_cache_mode,
        "mamba_ssm_cache_dtype": inputs.mamba_ssm_cache_dtype,
    }
    used_inputs["graph_capture_borderline"] = fits_before_capture and verdict != VERDICT_FITS
    if wsl2_room:
        used_inputs["wsl2_residency_bytes"] = wsl2_room
    used_inputs.update(adapter_inputs(adapt))
    if encoder is not None:
        used_inputs["encoder_profile_bytes"] = encoder_bytes
        used_inputs["encoder_profile_items"] = encoder.items
        used_inputs["encoder_profile_modality"] = encoder.modality
    if not model.architecture_known:
        terms = mark_estimated(terms, weights_estimated=weights_src == FROM_MODEL)
    return Capacity(
        requested_bytes=requested,
        weights_bytes=weights,
        non_torch_bytes=non_torch,
        activation_peak_bytes=act,
        cudagraph_bytes=graphs if ext is not None else graphs_in_budget,
        available_kv_bytes=available,
        kv_bytes_per_token=layout.kv_bytes_per_token,
        page_bytes_per_block=layout.bytes_per_block,
        block_size=layout.block_size,
        num_blocks=cap.num_blocks,
        kv_cache_tokens=cap.kv_cache_tokens,
        max_concurrency=cap.max_concurrency,
        max_model_len=max_len,
        max_num_seqs=seqs,
        max_num_batched_tokens=batched,
        gpu_memory_utilization=util,
        kv_cache_dtype=inputs.kv_cache_dtype,
        fits=verdict == VERDICT_FITS,
        failure=failure,
        terms=terms,
        inputs=used_inputs,
        headroom_bytes=headroom,
        available_kv_band_bytes=band,
        verdict=verdict,
    )


def band_verdict(
    inputs: PlanInputs, band: tuple[int, int], failure: Failure | None
) -> Verdict:
    """The :class:`~kvpilot.core.base.plan.Verdict` for an available-KV band (low, high) in bytes.

    The free-memory and model-length checks do not depend on the band: they fail outright.
    Otherwise the low edge passing means "fits", the high edge failing "does_not_fit".
    """
    if failure is not None and failure.kind in (
        failures.MAX_MODEL_LEN_ABOVE_MODEL, failures.FREE_MEMORY_BELOW_UTILIZATION,
        failures.BAD_FLAG_VALUE, failures.UNSUPPORTED_MODEL,
    ):
        return VERDICT_DOES_NOT_FIT
    model = parallel.stage_model(inputs.model, inputs.pipeline_parallel_size)
    profile = activation.profile_for(inputs.vllm_version, inputs.compute_capability)
    v0_only = multimodal.runs_on_v0_only(model, inputs.vllm_version)
    if v0_only:
        profile = activation.V0_PROFILE
    max_len = inputs.max_model_len or model.derived_max_model_len
    batched, seqs = default_batching(
        inputs.gpu_total_bytes, inputs.gpu_name, max_len, inputs.vllm_version,
        inputs.compute_capability, v0_only=v0_only,
    )
    seqs = inputs.max_num_seqs or seqs
    if not inputs.max_num_batched_tokens:
        batched = min(seqs * max_len, batched)
    else:
        batched = inputs.max_num_batched_tokens
    layout = adapters.plan_layout(inputs, model, block_size_of(inputs))
    in_flight = batched * activation.in_flight_batches(inputs.vllm_version)
    state = linear_state.mamba_blocks_verdict(inputs, layout, band, seqs)
    if state == VERDICT_DOES_NOT_FIT:
        return VERDICT_DOES_NOT_FIT
    if one_request_fits(layout, band[0], max_len, in_flight, profile):
        return VERDICT_FITS if failure is None and state is None else VERDICT_BORDERLINE
    if one_request_fits(layout, band[1], max_len, in_flight, profile):
        return VERDICT_BORDERLINE
    return VERDICT_DOES_NOT_FIT


#: relative uncertainty of the weights by where their size came from: the checkpoint files
#: are exact; a catalog / Hub size can differ from what vLLM loads (tied or skipped tensors,
#: a different revision); the byte model ignores norms, biases and quantization scales
_WEIGHTS_UNCERTAINTY = {FROM_FILE: 0.0, FROM_CATALOG: 0.01, FROM_MODEL: 0.05}


def one_request_fits(
    layout: kv.KvLayout,
    available_kv_bytes: int,
    max_model_len: int,
    in_flight_tokens: int,
    profile: activation.VersionProfile,
) -> bool:
    """Whether vLLM's start-up check (one request of ``max_model_len``) passes with this much
    KV memory (bytes)."""
    if available_kv_bytes <= 0:
        return False
    cap = kv.kv_capacity(
        layout, available_kv_bytes, max_model_len, in_flight_tokens,
        tokens_from_concurrency=profile.tokens_from_concurrency,
    )
    usable = cap.num_blocks - (1 if profile.null_block_reserved else 0)
    return cap.num_blocks > 0 and cap.blocks_per_request <= usable


#: the budget term of a vision-language model's encoder profile (see :mod:`.multimodal`)
ENCODER_PROFILE_TERM = "encoder_profile"

#: terms whose figure rests on kvpilot's rules for the architecture
_ARCHITECTURE_TERMS = frozenset(
    {"activation_peak", ENCODER_PROFILE_TERM, "cudagraph", "kv_cache"}
)


#: the terms vLLM's profile run and its overheads take besides weights and KV cache
OVERHEAD_TERMS = ("non_torch", "activation_peak", ENCODER_PROFILE_TERM, "cudagraph")


def overhead_bytes(capacity: Capacity) -> int:
    """Non-torch + activation peak + encoder profile + CUDA graphs of a plan (bytes per GPU):
    what a memory bar shows between the weights and the KV cache."""
    return sum(t.bytes for t in capacity.terms if t.name in OVERHEAD_TERMS)


def mark_estimated(
    terms: tuple[BudgetTerm, ...], *, weights_estimated: bool
) -> tuple[BudgetTerm, ...]:
    """``terms`` with "estimated (unknown architecture)" added to the note of each term that
    depends on the architecture's rules (the weights too when they were not read from files)."""
    affected = set(_ARCHITECTURE_TERMS)
    if weights_estimated:
        affected.add("weights")
    mark = model_spec.UNKNOWN_ARCHITECTURE_NOTE
    return tuple(
        BudgetTerm(t.name, t.bytes, t.source, f"{t.note}; {mark}" if t.note else mark)
        if t.name in affected else t
        for t in terms
    )


#: vLLM's CPU backend's KV block when none is given (vLLM 0.32.0 platforms/cpu.py,
#: ``check_and_update_config``: 128 tokens, except MLA models (16) and DeepSeek-V4 (256))
CPU_BLOCK_SIZE = 128
_CPU_BLOCK_BY_TYPE = {"deepseek_v4": 256}
_CPU_MLA_BLOCK_SIZE = 16


def block_size_of(inputs: PlanInputs) -> int:
    """The KV block size in tokens vLLM uses for ``inputs`` before any hybrid alignment: the one
    given, the CPU backend's own default there, else the GPU backends' default of the release."""
    if inputs.block_size:
        return inputs.block_size
    if not inputs.on_cpu_backend:
        return default_block_size(inputs.vllm_version)
    model = inputs.model
    if model.model_type in _CPU_BLOCK_BY_TYPE:
        return _CPU_BLOCK_BY_TYPE[model.model_type]
    return _CPU_MLA_BLOCK_SIZE if model.mla is not None else CPU_BLOCK_SIZE


def max_passing_utilization(gpu_total_bytes: int, gpu_free_bytes: int) -> float:
    """The largest utilization (rounded down to 0.01) that passes vLLM's free-memory check.

    ``gpu_free_bytes`` is free memory as NVML reports it before launch; vLLM's own context and a
    safety allowance are kept aside, exactly as the GPU panel and `kvpilot gpu` compute it.
    """
    return budget_now.max_startup_utilization(gpu_total_bytes, gpu_free_bytes)


def extensible_terms(ext: extensible_kv.ExtensibleKvBudget) -> tuple[BudgetTerm, ...]:
    """The terms only a 0.34 extensible-cache plan has: the memory free at launch it is sized
    from, and the margin it keeps free (the 0.5 GiB non-torch reserve lies inside it)."""
    return (
        BudgetTerm("launch_free", ext.init_free_bytes,
                   FROM_MODEL if ext.free_source == extensible_kv.PLANNER_FREE_ASSUMPTION
                   else FROM_MEASURED,
                   f"{ext.free_source}; " + extensible_kv.SOURCE_INIT_FREE),
        BudgetTerm("kv_margin", ext.margin_bytes, FROM_MODEL,
                   f"max(1 GiB, 0.75 x peak {ext.transient_peak_bytes / GiB:.2f} GiB), kept free "
                   f"with the peak itself ({extensible_kv.SOURCE_MARGIN}); it holds the "
                   f"{extensible_kv.NON_TORCH_RESERVE_BYTES / GiB:.1f} GiB non-torch reserve ("
                   + extensible_kv.SOURCE_RESERVE + ")"),
    )


def adapter_activation_bytes(
    adapt: adapters.AdapterTerms,
    model: model_spec.ModelSpec,
    sampler_seqs: int,
    profile: activation.VersionProfile,
    tensor_parallel_size: int,
    constants: activation.FittedConstants,
) -> int:
    """What LoRA and speculative decoding add to the profile run's peak (bytes per rank): the
    LoRA shrink buffer and index rows, and the rejection sampler's ``2 x max_num_seqs`` logit
    rows beyond the plain sampler's (``_dummy_sampler_run``)."""
    extra = adapt.lora.activation_bytes if adapt.lora is not None else 0
    if adapt.speculative is not None and sampler_seqs:
        extra += max(0, activation.sampler_peak_bytes(
            model, 2 * sampler_seqs, profile, tensor_parallel_size, constants=constants)
            - activation.sampler_peak_bytes(
                model, sampler_seqs, profile, tensor_parallel_size, constants=constants))
    return extra


def adapter_weights_note(adapt: adapters.AdapterTerms) -> str:
    """The weights term's note for LoRA stacks and draft weights ("" without them)."""
    note = ""
    if adapt.lora is not None:
        note += f"; plus LoRA stacks {adapt.lora.slot_bytes / GiB:.2f} GiB ({adapt.lora.note})"
    if adapt.speculative is not None:
        note += (f"; plus draft weights {adapt.speculative.draft_weights_bytes / GiB:.2f} GiB "
                 f"({adapt.speculative.note})")
    return note


def adapter_inputs(adapt: adapters.AdapterTerms) -> dict[str, Any]:
    """The ``Capacity.inputs`` keys of LoRA, speculative decoding and the runner."""
    data: dict[str, Any] = {"runner": "pooling" if adapt.pooling else None}
    if adapt.lora is not None:
        data.update({
            "enable_lora": True,
            "max_loras": adapt.lora.max_loras,
            "max_lora_rank": adapt.lora.max_lora_rank,
            "max_cpu_loras": adapt.lora.max_cpu_loras,
            "lora_slot_bytes": adapt.lora.slot_bytes,
            "lora_bytes_per_slot": adapt.lora.per_slot_bytes,
        })
    if adapt.speculative is not None:
        data.update({
            "speculative_method": adapt.speculative.settings.method,
            "num_speculative_tokens": adapt.speculative.num_speculative_tokens,
            "draft_weights_bytes": adapt.speculative.draft_weights_bytes,
            "draft_kv_bytes_per_token": adapt.speculative.draft_kv_bytes_per_token,
            "draft_known": adapt.speculative.draft_known,
        })
    return data


def adapter_graphs_note(adapt: adapters.AdapterTerms, vllm_version: str | None) -> str:
    """Why LoRA or a drafter changed the CUDA-graph estimate ("" when neither did)."""
    note = ""
    if adapt.lora is not None and adapt.lora.cudagraph_factor != 1:
        note += (f" (x{adapt.lora.cudagraph_factor:g}: every size captured without and with "
                 "LoRA; the band covers x1 to x2)")
    if adapt.speculative is not None and supports("spec_decode_capture_scaled", vllm_version):
        note += (f" (captures up to max_num_seqs x {adapt.capture_seqs_factor} x 2 tokens"
                 + (", and the drafter's own graphs" if adapt.speculative.draft_layers else "")
                 + ")")
    return note
