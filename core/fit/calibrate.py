"""Replace predictions by what vLLM reported on this GPU (self-calibration).

Every measured dry run and every launch that reached *ready* stores vLLM's reported capacity,
keyed by GPU, model, vLLM version and the settings that change memory
(:mod:`kvpilot.core.fit.measurements`). For a later plan:

* the same key -> the measured KV memory and token count are used as they are
  (``source: measured`` with the date);
* the same GPU, model and version with other settings -> the model's prediction is corrected by
  the offset the newest comparable measurement showed (the error in weights, non-torch and
  activation terms carries over; the utilization and context do not change it); the source
  is then ``calibrated``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from kvpilot.core.base import failures, versions
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.plan import (
    FROM_CALIBRATED,
    FROM_MEASURED,
    FROM_USER,
    VERDICT_DOES_NOT_FIT,
    VERDICT_FITS,
    BudgetTerm,
    Capacity,
    PlanInputs,
)
from kvpilot.core.base.units import GiB
from kvpilot.core.fit import adapters, kv
from kvpilot.core.fit.activation import FittedConstants, in_flight_batches, profile_for
from kvpilot.core.fit.budget import (
    CUDA_CONTEXT_BYTES,
    ENCODER_PROFILE_TERM,
    band_verdict,
    compute_capacity,
)
from kvpilot.core.fit.measurements import (
    Measured,
    MeasurementKey,
    MeasurementRecord,
    MeasurementStore,
    measurement_key,
)
from kvpilot.core.fit.support import check_support
from kvpilot.core.hub.identity import spec_identity


def key_for(inputs: PlanInputs) -> MeasurementKey:
    """The measurement key of a plan (its serving settings as given: None = vLLM's default)."""
    return measurement_key(
        gpu_name=inputs.gpu_name,
        gpu_total_bytes=inputs.gpu_total_bytes,
        model=spec_identity(inputs.model),
        vllm_version=inputs.vllm_version,
        settings=inputs,
        weights_bytes=inputs.model.weights_bytes,
    )


def planned_capacity(inputs: PlanInputs, store: MeasurementStore | None = None) -> Capacity:
    """The capacity every planner shows (CLI plan and recommend, GUI): the model's prediction,
    replaced or corrected by the measurements in ``store`` for this device, model and release,
    and refused where the GPU or vLLM cannot run the settings at all.

    Raises:
        FitError: inputs that make no sense (see :func:`compute_capacity`).
        SettingsError: ``store`` is not a measurement file.
    """
    records = store.for_model(key_for(inputs)) if store is not None else []
    capacity = calibrated_capacity(inputs, records)
    unsupported = check_support(inputs)
    if unsupported is not None and (
        capacity.failure is None or unsupported.kind == failures.UNSUPPORTED_MODEL
    ):
        # a release that cannot load the architecture stops before any memory is sized
        capacity = replace(capacity, fits=False, failure=unsupported,
                           verdict=VERDICT_DOES_NOT_FIT)
    return capacity


def calibrated_capacity(
    inputs: PlanInputs,
    records: Sequence[MeasurementRecord] = (),
    *,
    constants: FittedConstants | None = None,
) -> Capacity:
    """The plan's capacity, using matching measurements when there are any.

    ``records`` are the stored measurements for this GPU, model and version (any settings);
    ``constants`` replaces the model's fitted constants (validation runs refit them).
    """
    predicted = compute_capacity(inputs, constants)
    if not records:
        return predicted
    wanted = key_for(inputs)
    usable = [
        r for r in records
        if r.measured.available_kv_bytes is not None and r.key.same_model(wanted)
    ]
    exact = [r for r in usable if r.key.settings == wanted.settings]
    if exact:
        newest = max(exact, key=lambda r: r.measured.measured_at)
        measured_kv = newest.measured.available_kv_bytes
        assert measured_kv is not None
        note = f"reported by vLLM {newest.key.vllm_version} on {newest.measured.measured_at}"
        moved = _free_memory_shift(inputs, predicted, newest.measured, constants)
        if moved:  # 0.34: the cache follows the memory free at launch
            note += (f", {moved / GiB:+.2f} GiB for the free memory now (the extensible KV "
                     "cache is sized from it)")
            return _with_kv(inputs, predicted, measured_kv + moved, note, FROM_MEASURED, None)
        return _with_kv(inputs, predicted, measured_kv, note, FROM_MEASURED, newest.measured,
                        exact=True)
    # neighbouring settings: carry the newest offset over (only budgets vLLM computed itself)
    # the offset carries the error in weights, non-torch and activation terms per GPU; with
    # another tensor-parallel or pipeline size those terms are split (and NCCL buffers added)
    # differently, so only measurements of the same parallel layout calibrate
    comparable = [
        r for r in usable
        if r.key.settings.kv_cache_memory_bytes is None and inputs.kv_cache_memory_bytes is None
        and r.key.settings.tensor_parallel_size == inputs.tensor_parallel_size
        and r.key.settings.pipeline_parallel_size == inputs.pipeline_parallel_size
    ]
    if not comparable:
        return predicted
    newest = max(comparable, key=lambda r: r.measured.measured_at)
    measured_kv = newest.measured.available_kv_bytes
    assert measured_kv is not None
    then = compute_capacity(inputs.with_settings(newest.key.settings), constants)
    offset = measured_kv - then.available_kv_bytes
    note = (
        f"model corrected by {offset / GiB:+.2f} GiB measured on {newest.measured.measured_at} "
        f"(vLLM {newest.key.vllm_version}, other settings)"
    )
    return _with_kv(
        inputs, predicted, predicted.available_kv_bytes + offset, note, FROM_CALIBRATED, None
    )


def _free_memory_shift(
    inputs: PlanInputs, predicted: Capacity, measured: Measured,
    constants: FittedConstants | None,
) -> int:
    """How much the KV cache of an extensible-cache plan (vLLM 0.34+) moves from a launch that
    had ``measured.free_at_startup_bytes`` free to the free memory of ``inputs`` (bytes; 0 when
    the plan is not extensible or either figure is unknown): the model's own difference between
    the two free-memory readings, everything else as measured."""
    if not predicted.inputs.get("extensible_kv_cache") or inputs.gpu_free_bytes is None \
            or measured.free_at_startup_bytes is None:
        return 0
    # vLLM's snapshot is taken after its CUDA context exists: add kvpilot's allowance back
    then_free = measured.free_at_startup_bytes + CUDA_CONTEXT_BYTES
    then = compute_capacity(replace(inputs, gpu_free_bytes=then_free), constants)
    return predicted.available_kv_bytes - then.available_kv_bytes


def _with_kv(
    inputs: PlanInputs,
    predicted: Capacity,
    available_kv_bytes: int,
    note: str,
    source: str,
    measured: Measured | None,
    *,
    exact: bool = False,
    budget_words: str = "measured KV memory",
) -> Capacity:
    """Recompute blocks/tokens/fit from a measured (``measured`` given) or calibrated KV budget
    (``budget_words`` names it in a failure sentence).

    With a measurement, every term vLLM reported (weights, CUDA graphs, KV memory) replaces the
    model's, and the activation term becomes what the reported budget leaves for it.
    """
    reported_tokens = measured.kv_cache_tokens if measured is not None else None
    profile = profile_for(inputs.vllm_version, inputs.compute_capability)
    layout = adapters.plan_layout(inputs, inputs.model, predicted.block_size)
    in_flight = predicted.max_num_batched_tokens * in_flight_batches(inputs.vllm_version)
    cap = kv.kv_capacity(
        layout, available_kv_bytes, predicted.max_model_len, in_flight,
        tokens_from_concurrency=profile.tokens_from_concurrency
        and versions.supports("kv_tokens_from_concurrency", inputs.vllm_version),
    )
    tokens = reported_tokens if reported_tokens is not None else cap.kv_cache_tokens
    terms = _reported_terms(predicted, available_kv_bytes, note, source, measured)
    fits = predicted.failure is None  # a borderline prediction is settled by the figure
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
            f"{budget_words} ({available_kv_bytes / GiB:.2f} GiB) holds at most "
            f"{estimate:,} tokens per request, less than max_model_len "
            f"{predicted.max_model_len:,}.",
            estimated_max_model_len=estimate,
        )
    # the band moves with the measurement: none around vLLM's own figure for these settings,
    # the model's validation width around a neighbour's offset
    low, high = predicted.available_kv_band_bytes
    half = 0 if exact else (high - low) // 2
    band = (available_kv_bytes - half, available_kv_bytes + half)
    verdict = band_verdict(inputs, band, failure)
    return replace(
        predicted,
        available_kv_band_bytes=band,
        verdict=verdict,
        available_kv_bytes=available_kv_bytes,
        num_blocks=cap.num_blocks,
        kv_cache_tokens=tokens,
        max_concurrency=(
            tokens / predicted.max_model_len if reported_tokens else cap.max_concurrency
        ),
        terms=terms,
        fits=fits and verdict == VERDICT_FITS,
        failure=failure,
        inputs={**predicted.inputs, "kv_source": source, "kv_source_note": note},
    )


def _reported_terms(
    predicted: Capacity,
    available_kv_bytes: int,
    note: str,
    source: str,
    measured: Measured | None,
) -> tuple[BudgetTerm, ...]:
    """The budget terms with what vLLM reported in place of the model's figures."""
    by_name = {t.name: t for t in predicted.terms}
    budget_from_utilization = by_name["kv_cache"].source != FROM_USER
    by_name["kv_cache"] = replace(
        by_name["kv_cache"], bytes=available_kv_bytes, source=source, note=note
    )
    if measured is not None:
        reported = {"weights": measured.weights_bytes}
        if by_name["cudagraph"].bytes:
            reported["cudagraph"] = measured.cudagraph_bytes
        for name, value in reported.items():
            if value is not None and name in by_name:
                by_name[name] = replace(by_name[name], bytes=value, source=FROM_MEASURED,
                                        note=note)
        if budget_from_utilization:
            # vLLM reports one peak for the whole profile run, encoder profile included
            profile_terms = ("activation_peak", ENCODER_PROFILE_TERM)
            others = sum(
                t.bytes for n, t in by_name.items()
                if n not in ("requested", "kv_cache", *profile_terms)
            )
            rest = by_name["requested"].bytes - available_kv_bytes - others
            if rest >= 0:
                by_name["activation_peak"] = replace(
                    by_name["activation_peak"], bytes=rest, source=FROM_MEASURED,
                    note="what vLLM's reported budget leaves for the profile run's peak",
                )
                if ENCODER_PROFILE_TERM in by_name:
                    by_name[ENCODER_PROFILE_TERM] = replace(
                        by_name[ENCODER_PROFILE_TERM], bytes=0, source=FROM_MEASURED,
                        note="inside the measured profile-run peak (activation_peak)",
                    )
    return tuple(by_name[t.name] for t in predicted.terms)


def fixed_kv_capacity(
    inputs: PlanInputs, predicted: Capacity, available_kv_bytes: int, note: str
) -> Capacity:
    """``predicted`` with a KV cache of exactly ``available_kv_bytes``, fixed by the launch
    itself (an extra argument such as ``--num-gpu-blocks-override``): blocks, tokens and the
    fit recomputed, no uncertainty band around it."""
    return _with_kv(inputs, predicted, available_kv_bytes, note, FROM_USER, None, exact=True,
                    budget_words="the KV cache the launch fixes")


def corrected_capacity(
    inputs: PlanInputs, predicted: Capacity, available_kv_bytes: int, note: str
) -> Capacity:
    """``predicted`` with its KV budget replaced by ``available_kv_bytes`` (blocks, tokens and
    the fit recomputed), for a budget corrected by what vLLM reported."""
    return _with_kv(inputs, predicted, available_kv_bytes, note, FROM_CALIBRATED, None)
