"""Replace predictions by what vLLM reported on this GPU (self-calibration).

Every measured dry run and every launch that reached *ready* stores vLLM's reported capacity,
keyed by GPU, model, vLLM version and the settings that change memory
(:mod:`kvpilot.core.measurements`). For a later plan:

* the same key -> the measured KV memory and token count are used as they are
  (``source: measured`` with the date);
* the same GPU, model and version with other settings -> the model's prediction is corrected by
  the offset the newest comparable measurement showed (the error in weights, non-torch and
  activation terms carries over; the utilization and context do not change it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from kvpilot.core import failures
from kvpilot.core.fit import kv
from kvpilot.core.fit.activation import profile_for
from kvpilot.core.fit.budget import compute_capacity
from kvpilot.core.fit.plan import FROM_MEASURED, Capacity, Failure, GiB, PlanInputs
from kvpilot.core.measurements import MeasurementKey, MeasurementRecord


def key_for(inputs: PlanInputs, gpu_name: str | None = None) -> MeasurementKey:
    """The measurement key of a plan (settings as given: None = vLLM's default)."""
    return MeasurementKey(
        gpu_name=gpu_name or inputs.gpu_name,
        gpu_total_bytes=inputs.gpu_total_bytes,
        model_id=inputs.model.model_id,
        vllm_version=inputs.vllm_version,
        weights_bytes=inputs.model.weights_bytes,
        max_model_len=inputs.max_model_len,
        max_num_seqs=inputs.max_num_seqs,
        max_num_batched_tokens=inputs.max_num_batched_tokens,
        kv_cache_dtype=inputs.kv_cache_dtype or "auto",
        gpu_memory_utilization=inputs.gpu_memory_utilization,
        kv_cache_memory_bytes=inputs.kv_cache_memory_bytes,
        enforce_eager=inputs.enforce_eager,
        quantization=inputs.quantization,
    )


def _inputs_for_key(inputs: PlanInputs, key: MeasurementKey) -> PlanInputs:
    return replace(
        inputs,
        max_model_len=key.max_model_len,
        max_num_seqs=key.max_num_seqs,
        max_num_batched_tokens=key.max_num_batched_tokens,
        kv_cache_dtype=key.kv_cache_dtype,
        gpu_memory_utilization=key.gpu_memory_utilization,
        kv_cache_memory_bytes=key.kv_cache_memory_bytes,
        enforce_eager=key.enforce_eager,
        quantization=key.quantization,
    )


def calibrated_capacity(
    inputs: PlanInputs, records: Sequence[MeasurementRecord] = ()
) -> Capacity:
    """The plan's capacity, using matching measurements when there are any.

    ``records`` are the stored measurements for this GPU, model and version (any settings).
    """
    predicted = compute_capacity(inputs)
    if not records:
        return predicted
    wanted = key_for(inputs)
    usable = [r for r in records if r.measured.available_kv_bytes is not None]
    exact = [r for r in usable if _same_settings(r.key, wanted)]
    if exact:
        newest = max(exact, key=lambda r: r.measured.measured_at)
        measured_kv = newest.measured.available_kv_bytes
        assert measured_kv is not None
        note = f"reported by vLLM {newest.key.vllm_version} on {newest.measured.measured_at}"
        return _with_kv(inputs, predicted, measured_kv, note, newest.measured.kv_cache_tokens)
    # neighbouring settings: carry the newest offset over (only budgets vLLM computed itself)
    comparable = [
        r for r in usable
        if r.key.kv_cache_memory_bytes is None and inputs.kv_cache_memory_bytes is None
    ]
    if not comparable:
        return predicted
    newest = max(comparable, key=lambda r: r.measured.measured_at)
    measured_kv = newest.measured.available_kv_bytes
    assert measured_kv is not None
    then = compute_capacity(_inputs_for_key(inputs, newest.key))
    offset = measured_kv - then.available_kv_bytes
    note = (
        f"model corrected by {offset / GiB:+.2f} GiB measured on {newest.measured.measured_at} "
        f"(vLLM {newest.key.vllm_version}, other settings)"
    )
    return _with_kv(inputs, predicted, predicted.available_kv_bytes + offset, note, None)


def _same_settings(a: MeasurementKey, b: MeasurementKey) -> bool:
    def strip(k: MeasurementKey) -> MeasurementKey:
        return replace(k, weights_bytes=None, gpu_name="")

    return strip(a) == strip(b)


def _with_kv(
    inputs: PlanInputs,
    predicted: Capacity,
    available_kv_bytes: int,
    note: str,
    reported_tokens: int | None,
) -> Capacity:
    """Recompute blocks/tokens/fit from a measured or corrected KV budget."""
    profile = profile_for(inputs.vllm_version)
    layout = kv.kv_layout(
        inputs.model, inputs.kv_cache_dtype, inputs.tensor_parallel_size,
        predicted.block_size,
    )
    in_flight = predicted.max_num_batched_tokens * profile.in_flight_batches
    cap = kv.kv_capacity(
        layout, available_kv_bytes, predicted.max_model_len, in_flight,
        tokens_from_concurrency=profile.tokens_from_concurrency,
    )
    tokens = reported_tokens if reported_tokens is not None else cap.kv_cache_tokens
    terms = tuple(
        replace(t, bytes=available_kv_bytes, source=FROM_MEASURED, note=note)
        if t.name == "kv_cache" else t
        for t in predicted.terms
    )
    fits = predicted.fits
    failure = predicted.failure
    usable = cap.num_blocks - (1 if profile.null_block_reserved else 0)
    if failure is None and cap.blocks_per_request > max(0, usable):
        fits = False
        estimate = kv.estimate_max_model_len(
            layout, cap.num_blocks, predicted.max_model_len, in_flight,
            reserve_null_block=profile.null_block_reserved,
        )
        failure = Failure(
            failures.KV_CACHE_TOO_SMALL,
            f"measured KV memory ({available_kv_bytes / GiB:.2f} GiB) holds at most "
            f"{estimate:,} tokens per request, less than max_model_len "
            f"{predicted.max_model_len:,}.",
            estimated_max_model_len=estimate,
        )
    return replace(
        predicted,
        available_kv_bytes=available_kv_bytes,
        num_blocks=cap.num_blocks,
        kv_cache_tokens=tokens,
        max_concurrency=(
            tokens / predicted.max_model_len if reported_tokens else cap.max_concurrency
        ),
        terms=terms,
        fits=fits,
        failure=failure,
        inputs={**predicted.inputs, "kv_source": FROM_MEASURED, "kv_source_note": note},
    )
