"""Each version row's arithmetic against shapes computed by hand, and the band / verdict."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from fitkit import rtx4090

from kvpilot.core.base.plan import FROM_FITTED, FROM_MODEL
from kvpilot.core.base.units import GiB, MiB
from kvpilot.core.commands.plan import render
from kvpilot.core.fit import activation, budget, fallback
from kvpilot.core.fit.activation import FittedConstants
from kvpilot.core.fit.budget import compute_capacity, default_batching

#: constants with no remainder, so that the computed terms are checked alone
BARE = FittedConstants(
    non_torch_single_gpu_bytes=0, non_torch_tensor_parallel_bytes=0,
    cudagraph_bytes_per_layer_hidden_token=10.0,
)


def test_every_row_names_its_source_and_sampler_pieces_sum():
    for row in activation.PROFILES:
        assert row.source and any(v in row.source for v in ("0.", "py"))
        for piece in row.sampler:
            assert piece.source and piece.units > 0
    units = {r.key: r.sampler_logit_copies for r in activation.PROFILES}
    assert units == {"0.28": 3.5, "0.20": 3.5, "0.19": 3.5, "0.13": 9.5, "0.10.2": 9.5,
                     "0.8": 3.5, "0": 9.5}


def test_every_row_key_in_the_constants_file_names_a_row():
    # the file is keyed by each row's since-string; a key that names no row would be ignored
    from importlib import resources

    data = json.loads(
        (resources.files("kvpilot.resources") / activation.CONSTANTS_FILE).read_text("utf-8")
    )
    keys = {r.key for r in activation.PROFILES}
    used = set(data["constants"]["activation_residual_units"])
    used |= set(data["constants"]["row_remainder_bytes"])
    used |= set(data["constants"].get("activation_residual_bytes", {}))
    used |= {k.removesuffix("/tp") for k in data["validation"]["half_width_fraction"]} - {"*"}
    assert used and used <= keys
    assert activation.FITTED.activation_residual_units == {
        k: float(v) for k, v in data["constants"]["activation_residual_units"].items()
    }


def test_sort_path_sampler_by_hand(qwen7b):
    # Qwen2.5-7B: vocab 152,064 (already a multiple of 64); 256 rows
    row = activation.profile_for("0.13.0")
    unit = 256 * 152_064 * 4
    assert activation.logit_unit_bytes(qwen7b, 256) == unit
    assert activation.sampler_peak_bytes(qwen7b, 256, row, constants=BARE) == int(9.5 * unit)


def test_triton_sampler_needs_eight_rows(qwen7b):
    row = activation.profile_for("0.19.1")
    unit = 8 * 152_064 * 4
    assert activation.sampler_peak_bytes(qwen7b, 8, row, constants=BARE) == int(3.5 * unit)
    # below 8 rows vLLM keeps the PyTorch sort
    assert activation.sampler_peak_bytes(qwen7b, 4, row, constants=BARE) == int(
        9.5 * 4 * 152_064 * 4)


def test_dense_forward_by_hand(qwen7b):
    # hidden 3584, intermediate 18944: 3 x 18944 + 3 x 3584 elements per token, bf16
    per_token = 3 * 18944 + 3 * 3584
    assert activation.forward_elements_per_token(qwen7b) == per_token
    assert activation.forward_peak_bytes(qwen7b, 8192) == 8192 * per_token * 2
    # tensor parallelism splits the intermediate, not the hidden buffers
    assert activation.forward_elements_per_token(qwen7b, 2) == 3 * 18944 / 2 + 3 * 3584


def test_moe_forward_by_hand(gptoss):
    # gpt-oss-20b: 4 experts per token, expert intermediate 2880 (intermediate_size), hidden 2880
    assert gptoss.moe is not None and gptoss.moe.num_experts_per_tok == 4
    k, n, h = 4, 2880, 2880
    assert activation.forward_elements_per_token(gptoss) == k * (3 * n + h) + 3 * h
    assert activation.forward_elements_per_token(gptoss, 2) == k * (3 * n / 2 + h) + 3 * h


def test_v0_peak_is_the_larger_of_forward_and_sampler(qwen7b):
    # vLLM 0.6.6 on a 24 GB card, 8k context, 16 sequences: the 8,192-token forward wins
    row = activation.profile_for("0.6.6")
    act = activation.activation_peak_bytes(
        qwen7b, max_num_batched_tokens=8192, max_num_seqs=16, profile=row, constants=BARE)
    assert act == 8192 * (3 * 18944 + 3 * 3584) * 2
    # 1.03 GiB; vLLM 0.6.6 logged 1.09 GiB for this case (rtx3090-qwen25-7b-8k-v066)
    assert act / GiB == pytest.approx(1.03, abs=0.01)


def test_v2_runner_adds_forward_and_sampler_for_dense_models_only(qwen7b, gptoss):
    row = activation.profile_for("0.28.0")
    assert activation.uses_v2_runner(qwen7b, row)
    assert not activation.uses_v2_runner(gptoss, row)  # MoE stays on the V1 runner
    act = activation.activation_peak_bytes(
        qwen7b, max_num_batched_tokens=2048, max_num_seqs=256, profile=row, constants=BARE)
    forward = 2048 * (3 * 18944 + 3 * 3584) * 2
    hidden = 2048 * 3584 * 2
    sampler = int(0.5 * 256 * 152_064 * 4)  # the bf16 logits only
    assert act == forward + hidden + sampler


def test_cudagraph_estimate_by_hand(qwen7b):
    # capture size min(2 x 256, 512) = 512; 28 layers x 3584 hidden x 10 B
    assert activation.cudagraph_bytes(
        qwen7b, max_num_seqs=256, max_num_batched_tokens=2048, constants=BARE
    ) == 10 * 512 * 28 * 3584
    assert activation.cudagraph_bytes(
        qwen7b, max_num_seqs=256, max_num_batched_tokens=2048, enforce_eager=True) == 0
    # 0.28+ on data-center Blackwell captures up to 1024
    assert activation.largest_default_capture("0.28.0", (10, 0)) == 1024
    assert activation.largest_default_capture("0.26.0", (10, 0)) == 512
    assert activation.max_cudagraph_capture_size(1024, 8192, 1024) == 1024


def test_defaults_per_release():
    a100 = 80 * GiB
    # 0.8.x: the large row includes A100 80GB; from 0.9 it does not
    assert default_batching(a100, "NVIDIA A100-SXM4-80GB", 16384, "0.8.5") == (8192, 1024)
    assert default_batching(a100, "NVIDIA A100-SXM4-80GB", 16384, "0.9.2") == (2048, 256)
    # >= 160 GiB only from 0.28
    assert default_batching(180 * GiB, "NVIDIA B200", 16384, "0.26.0") == (8192, 1024)
    assert default_batching(180 * GiB, "NVIDIA B200", 16384, "0.28.0") == (16384, 1024)
    # 0.33 keeps a 119 GiB GB10 (DGX Spark) on the small tier
    assert default_batching(119 * GiB, "NVIDIA GB10", 16384, "0.33.0", (12, 1)) == (2048, 256)
    assert default_batching(119 * GiB, "NVIDIA GB10", 16384, "0.32.0", (12, 1)) == (8192, 1024)
    # V0 with chunked prefill (context > 32k) profiles 2048 tokens; T4 on 0.8 falls back to V0
    assert default_batching(24 * GiB, "RTX 3090", 65536, "0.6.6") == (2048, 256)
    assert default_batching(15 * GiB, "Tesla T4", 8192, "0.8.2", (7, 5)) == (8192, 256)


def test_fitted_terms_say_so(qwen7b):
    cap = compute_capacity(rtx4090(qwen7b, max_model_len=8192))
    terms = {t.name: t for t in cap.terms}
    # the single-GPU non-torch constant is a prior since its fit did not beat the held-out
    # splits: the term says so instead of "fitted"
    assert terms["non_torch"].source == FROM_MODEL
    assert "a prior (no public start-up to fit it on)" in terms["non_torch"].note
    assert terms["cudagraph"].source == FROM_FITTED  # inside the budget on 0.33
    assert cap.inputs["vllm_rules_source"].startswith("0.28.0")


def test_band_comes_from_the_rows_validation_and_the_weights_source(qwen7b):
    cap = compute_capacity(rtx4090(qwen7b, max_model_len=8192))
    half = activation.VALIDATION.half_width_for(activation.profile_for("0.33.0"),
                                                cap.requested_bytes)
    low, high = cap.available_kv_band_bytes
    assert (low, high) == (cap.available_kv_bytes - half, cap.available_kv_bytes + half)
    catalog = compute_capacity(rtx4090(replace(qwen7b, weights_source="catalog"),
                                       max_model_len=8192))
    c_low, c_high = catalog.available_kv_band_bytes
    assert c_high - c_low == 2 * (half + int(cap.weights_bytes * 0.01))
    fixed = compute_capacity(rtx4090(qwen7b, max_model_len=8192, kv_cache_memory_bytes=4 * GiB))
    assert fixed.available_kv_band_bytes == (4 * GiB, 4 * GiB)


def test_verdicts_fits_borderline_does_not_fit(llama8b):
    fits = compute_capacity(rtx4090(llama8b, max_model_len=8192))
    assert fits.verdict == "fits" and fits.fits
    # scan the context up to where the high edge fails: the verdict passes through borderline
    verdicts = []
    for length in range(20000, 80000, 256):
        cap = compute_capacity(rtx4090(llama8b, max_model_len=length))
        verdicts.append(cap.verdict)
        assert cap.fits == (cap.verdict == "fits")
    assert verdicts[0] == "fits" and verdicts[-1] == "does_not_fit"
    assert "borderline" in verdicts
    first = verdicts.index("borderline")
    last = len(verdicts) - 1 - verdicts[::-1].index("borderline")
    assert all(v == "borderline" for v in verdicts[first:last + 1])
    # the borderline range is as wide as the band: a few thousand tokens, not a blanket margin
    assert (last - first + 1) * 256 < 12000


def test_borderline_plan_offers_the_measured_dry_run(llama8b):
    for length in range(20000, 80000, 256):
        inputs = rtx4090(llama8b, max_model_len=length)
        cap = compute_capacity(inputs)
        if cap.verdict == "borderline":
            break
    text = render(inputs, cap)
    assert "verdict         borderline" in text and "kvpilot plan --measure" in text
    assert "minutes" in text  # the documented estimate without a measured start-up
    assert "took" in render(inputs, cap, startup_s=74.0) and "74 s" in render(
        inputs, cap, startup_s=74.0)
    data = json.loads(json.dumps(cap.to_json(), default=str))
    assert data["verdict"] == "borderline" and data["fits"] is False
    assert data["available_kv_band_bytes"] == list(cap.available_kv_band_bytes)


def test_free_memory_failure_is_does_not_fit_whatever_the_band(qwen7b):
    cap = compute_capacity(rtx4090(qwen7b, gpu_free_bytes=10 * GiB, max_model_len=8192))
    assert cap.verdict == "does_not_fit"


def test_shorter_context_fallback_fits_at_the_lower_edge(llama8b):
    inputs = rtx4090(llama8b, max_model_len=131072, max_num_seqs=4)
    cap = compute_capacity(inputs)
    assert cap.failure is not None
    options = fallback.propose(cap.failure, inputs)
    shorter = next(o for o in options if o.kind == fallback.SHORTER_CONTEXT)
    assert shorter.capacity.verdict == "fits"
    assert shorter.inputs.max_model_len <= (cap.failure.estimated_max_model_len or 0)
    assert budget.one_request_fits  # public for calibrate's verdict


def test_recommender_ranks_by_the_lower_edge(qwen7b, llama8b):
    from kvpilot.core.base.plan import GpuTarget
    from kvpilot.core.fit.recommend import Goal, recommend

    gpu = GpuTarget("NVIDIA GeForce RTX 4090", 24564 * MiB, 22_900 * MiB, (8, 9), 1.008e12, 165.2)
    result = recommend(gpu, Goal(context_tokens=16384, users=4), [qwen7b, llama8b])
    assert result.candidates
    for c in result.candidates:
        cap = c.capacity
        needed = -(-cap.max_model_len // cap.block_size) * 4 * cap.page_bytes_per_block
        assert c.kv_headroom_bytes == cap.available_kv_low_bytes - needed
        assert cap.max_concurrency_low >= 4  # the goal holds at the low edge too
        low, _ = cap.available_kv_band_bytes
        assert cap.max_concurrency_low == pytest.approx(
            cap.max_concurrency * low / cap.available_kv_bytes)


def test_a_measurement_settles_a_borderline_plan(llama8b):
    from kvpilot.core.fit.calibrate import calibrated_capacity, key_for
    from kvpilot.core.fit.measurements import Measured, MeasurementRecord

    for length in range(20000, 80000, 256):
        inputs = rtx4090(llama8b, max_model_len=length)
        cap = compute_capacity(inputs)
        if cap.verdict == "borderline":
            break
    assert cap.verdict == "borderline" and not cap.fits
    for kv_bytes, verdict in ((cap.available_kv_band_bytes[1], "fits"),
                              (cap.available_kv_band_bytes[0] - GiB, "does_not_fit")):
        measured = Measured(measured_at="2026-11-30T09:00:00+00:00", source="dry_run",
                            available_kv_bytes=kv_bytes, kv_cache_tokens=None)
        settled = calibrated_capacity(inputs, [MeasurementRecord(key_for(inputs), measured)])
        assert settled.available_kv_band_bytes == (kv_bytes, kv_bytes)  # vLLM's own figure
        assert settled.verdict == verdict and settled.fits == (verdict == "fits")


def test_fitted_residual_is_for_compiled_v1_runs(qwen7b):
    """--enforce-eager runs no torch.compile (config/vllm.py sets -cc.mode=none): the V1 rows'
    residual, fitted on compiled start-ups, is not added; V0 rows keep theirs."""
    row = activation.profile_for("0.21.0")
    assert row.engine == "V1"
    fitted = replace(BARE, activation_residual_units={row.key: 3.5})
    unit = 256 * 152_064 * 4
    compiled = activation.sampler_peak_bytes(qwen7b, 256, row, constants=fitted)
    eager = activation.sampler_peak_bytes(qwen7b, 256, row, constants=fitted, compiled=False)
    assert abs(compiled - eager - 3.5 * unit) <= 1
    assert eager == activation.sampler_peak_bytes(qwen7b, 256, row, constants=BARE)
    assert not activation.residual_applies(row, compiled=False)
    v0 = activation.profile_for("0.6.4")
    assert v0.engine == "V0" and activation.residual_applies(v0, compiled=False)
    peak_eager = activation.activation_peak_bytes(
        qwen7b, max_num_batched_tokens=2048, max_num_seqs=256, profile=row, constants=fitted,
        compiled=False)
    peak_bare = activation.activation_peak_bytes(
        qwen7b, max_num_batched_tokens=2048, max_num_seqs=256, profile=row, constants=BARE)
    assert peak_eager == peak_bare
