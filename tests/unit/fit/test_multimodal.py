"""The encoder profile of vision-language models, text only, and plans for every architecture."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from fitkit import fixture_spec, rtx4090
from testpaths import DATA

from kvpilot.core.base import failures
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.model_spec import UNKNOWN_ARCHITECTURE_NOTE, ModelSpec
from kvpilot.core.base.plan import PlanInputs
from kvpilot.core.base.units import GiB
from kvpilot.core.cli import main
from kvpilot.core.fit import fallback, multimodal
from kvpilot.core.fit.budget import ENCODER_PROFILE_TERM, compute_capacity
from kvpilot.core.fit.calibrate import planned_capacity
from kvpilot.core.models import catalog
from kvpilot.core.models.vision import vision_weight_bytes

MODELS = DATA / "models"

#: Qwen2-VL-7B-Instruct: 8,291,375,616 bf16 parameters (text 7,615,616,512 + vision 675,759,104)
QWEN2VL_BYTES = 2 * 8_291_375_616
QWEN2VL_TOWER_BYTES = 2 * 675_759_104


@pytest.fixture
def qwen2vl() -> ModelSpec:
    return fixture_spec("qwen2-vl-7b-instruct", QWEN2VL_BYTES)


def _terms(cap):
    return {t.name: t for t in cap.terms}


def _batch(version: str, max_model_len: int, **kw: object) -> multimodal.ProfileBatch:
    args: dict[str, object] = {
        "vllm_version": version,
        "max_model_len": max_model_len,
        "max_num_batched_tokens": 2048,
        "max_num_seqs": 256,
        "limit_mm_per_prompt": None,
    }
    args.update(kw)
    return multimodal.ProfileBatch(**args)  # type: ignore[arg-type]


def _profile(
    model: ModelSpec, version: str, max_model_len: int, language_peak_bytes: int = 0,
    **kw: object,
):
    prof = multimodal.encoder_profile(model, _batch(version, max_model_len, **kw),
                                      language_peak_bytes=language_peak_bytes)
    assert prof is not None
    return prof


def test_v1_profiles_one_largest_item_when_it_exceeds_the_batch(qwen2vl):
    # 0.10.2: budget = max(2048, 16,384); 16,384 // 16,384 = 1 item of 65,536 patches
    prof = _profile(qwen2vl, "0.10.2", 8192)
    assert (prof.items, prof.tokens_per_item, prof.encoder_budget_tokens) == (1, 16384, 16384)
    # per patch 3 x 5120 + 3 x 1280 = 19,200 bf16 elements
    assert prof.encoder_peak_bytes == 65536 * 19200 * 2 == 2_516_582_400
    # outputs: 16,384 tokens x 3,584 (text hidden) x 2 bytes, held during the text batch
    assert prof.encoder_outputs_bytes == 16384 * 3584 * 2
    assert prof.bytes == prof.encoder_outputs_bytes + prof.encoder_peak_bytes


def test_a_longer_context_makes_vllm_profile_a_video(qwen2vl):
    # 32,768 tokens hold 4 frames = 2 temporal patches of 16,384 tokens: video beats image
    prof = _profile(qwen2vl, "0.32.0", 32768)
    assert (prof.modality, prof.items, prof.tokens_per_item) == ("video", 1, 32768)
    assert multimodal.max_tokens_per_item(qwen2vl.vision, 131072)["video"] == 8 * 16384


def test_small_items_fill_the_encoder_budget():
    gemma = fixture_spec("gemma-3-12b-it", 24_000_000_000)
    prof = _profile(gemma, "0.32.0", 8192, max_num_batched_tokens=8192)
    # 256 tokens per image: 8,192 // 256 = 32 images of 4,096 SigLIP positions
    assert (prof.modality, prof.items, prof.tokens_per_item) == ("image", 32, 256)
    assert prof.encoder_peak_bytes == 32 * 4096 * (3 * 4304 + 3 * 1152) * 2


def test_the_language_peak_absorbs_a_smaller_encoder_peak(qwen2vl):
    prof = _profile(qwen2vl, "0.10.2", 8192, language_peak_bytes=10 * GiB)
    assert prof.bytes == prof.encoder_outputs_bytes


def test_v0_gives_each_dummy_sequence_its_image(qwen2vl):
    small = replace(qwen2vl, vision=replace(qwen2vl.vision, max_image_tokens=2700,
                                            max_image_patches=10800))
    # V0 (0.6.6): 8,192 // (2,700 image + 2,700 video) = 1 sequence with 1 image
    prof = _profile(small, "0.6.6", 8192, max_num_batched_tokens=8192)
    assert (prof.items, prof.tokens_per_item) == (1, 2700)
    assert multimodal.profile_num_seqs(
        small, _batch("0.6.6", 8192, max_num_batched_tokens=8192)) == 1
    # V1 samples every sequence
    assert multimodal.profile_num_seqs(
        small, _batch("0.32.0", 8192, max_num_batched_tokens=8192)) == 256


@pytest.mark.parametrize(("version", "tower"), [("0.10.0", 0), ("0.10.2", QWEN2VL_TOWER_BYTES),
                                                 ("0.32.0", QWEN2VL_TOWER_BYTES)])
def test_text_only_skips_the_profile_and_from_0_10_1_the_tower(qwen2vl, version, tower):
    prof = _profile(qwen2vl, version, 8192, limit_mm_per_prompt=0)
    assert prof.skipped and prof.bytes == 0 and prof.items == 0
    assert prof.tower_weights_bytes == tower


def test_gemma3_tower_is_optional_from_0_16():
    gemma = fixture_spec("gemma-3-12b-it", 24_000_000_000)
    assert _profile(gemma, "0.13.0", 8192, limit_mm_per_prompt=0).tower_weights_bytes == 0
    assert _profile(gemma, "0.16.0", 8192, limit_mm_per_prompt=0).tower_weights_bytes == (
        2 * 421_290_864
    )


def test_text_models_have_no_encoder_term(qwen7b):
    assert multimodal.encoder_profile(
        qwen7b, _batch("0.32.0", 8192), language_peak_bytes=0) is None
    assert ENCODER_PROFILE_TERM not in _terms(compute_capacity(rtx4090(qwen7b)))


def test_the_encoder_term_comes_out_of_the_kv_budget(qwen2vl):
    cap = compute_capacity(rtx4090(qwen2vl, max_model_len=8192, vllm_version="0.32.0"))
    t = _terms(cap)
    enc = t[ENCODER_PROFILE_TERM]
    assert enc.bytes > 1 * GiB and enc.source == "model" and "16,384 tokens" in enc.note
    assert cap.available_kv_bytes == (
        t["requested"].bytes - t["weights"].bytes - t["non_torch"].bytes
        - t["activation_peak"].bytes - enc.bytes - t["cudagraph"].bytes
    )
    assert cap.inputs["encoder_profile_bytes"] == enc.bytes
    text_only = compute_capacity(rtx4090(qwen2vl, max_model_len=8192, vllm_version="0.32.0",
                                         limit_mm_per_prompt=0))
    # the profile and the tower both come back; text-only mode feeds token ids, so a first
    # compile benchmarks the embedding gather and its copy of the table sets the peak
    charge = text_only.activation_peak_bytes - cap.activation_peak_bytes
    assert charge > 0 and "embedding gather" in _terms(text_only)["activation_peak"].note
    assert text_only.available_kv_bytes - cap.available_kv_bytes == (
        enc.bytes + QWEN2VL_TOWER_BYTES - charge
    )
    assert text_only.weights_bytes == (QWEN2VL_BYTES - QWEN2VL_TOWER_BYTES
                                       + qwen2vl.rope_cache_bytes)
    assert "vision tower" in _terms(text_only)["weights"].note


def test_on_a_24gb_card_the_encoder_costs_more_than_the_kv_cache(qwen2vl):
    cap = compute_capacity(rtx4090(qwen2vl, max_model_len=32768, vllm_version="0.32.0"))
    assert cap.failure is not None and cap.failure.kind == failures.KV_CACHE_TOO_SMALL
    assert _terms(cap)[ENCODER_PROFILE_TERM].bytes > cap.available_kv_bytes
    options = fallback.propose(cap.failure, rtx4090(qwen2vl, max_model_len=32768,
                                                    vllm_version="0.32.0"))
    text_only = next(o for o in options if o.kind == fallback.TEXT_ONLY)
    assert text_only.inputs.limit_mm_per_prompt == 0 and text_only.predicted_fits
    gained = text_only.capacity.available_kv_bytes - cap.available_kv_bytes
    assert gained > 4 * GiB
    assert text_only.label.startswith("text only (images disabled) — +")
    assert f"{gained / GiB:+.2f} GiB KV" in text_only.label


def test_text_only_is_not_offered_for_text_models_or_twice(qwen7b, qwen2vl):
    inputs = rtx4090(qwen7b, max_model_len=131072, vllm_version="0.32.0")
    cap = compute_capacity(inputs)
    assert cap.failure is not None
    assert all(o.kind != fallback.TEXT_ONLY for o in fallback.propose(cap.failure, inputs))
    inputs = rtx4090(qwen2vl, max_model_len=32768, vllm_version="0.32.0",
                     limit_mm_per_prompt=0)
    failure = replace(cap.failure, kind=failures.KV_CACHE_TOO_SMALL)
    assert all(o.kind != fallback.TEXT_ONLY for o in fallback.propose(failure, inputs))


def test_mllama_plans_on_0_10_2_and_is_refused_later():
    mllama = fixture_spec("llama-3.2-11b-vision-instruct", 21_340_441_670)
    ok = planned_capacity(rtx4090(mllama, max_model_len=8192, vllm_version="0.10.2"))
    # V0 cache: all 40 layers (cross-attention included) x 2 x 8 KV heads x 128 x 2 bytes
    assert ok.kv_bytes_per_token == 40 * 2 * 8 * 128 * 2
    assert ok.failure is None or ok.failure.kind != failures.UNSUPPORTED_MODEL
    assert _terms(ok)[ENCODER_PROFILE_TERM].bytes > 0
    later = planned_capacity(rtx4090(mllama, max_model_len=8192, vllm_version="0.11.0"))
    assert later.failure is not None and later.failure.kind == failures.UNSUPPORTED_MODEL
    assert "0.10.2" in later.failure.message
    # refused before any memory is sized, even where the KV cache would also be short
    short = planned_capacity(rtx4090(mllama, max_model_len=131072, vllm_version="0.32.0"))
    assert short.failure is not None and short.failure.kind == failures.UNSUPPORTED_MODEL


def _unknown_arch_dir(tmp_path: Path) -> Path:
    d = tmp_path / "fancy"
    shutil.copytree(MODELS / "llama-3.1-8b-instruct", d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["architectures"] = ["FancyNewForCausalLM"]
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 16_060_522_496}, "weight_map": {}})
    )
    return d


def test_unknown_architecture_plans_with_the_generic_decoder_model(tmp_path, llama8b):
    from kvpilot.core.models.local import load_local_model

    spec = load_local_model(_unknown_arch_dir(tmp_path))
    cap = compute_capacity(rtx4090(spec, max_model_len=8192))
    ref = compute_capacity(rtx4090(llama8b, max_model_len=8192))
    assert cap.inputs["architecture_known"] is False
    assert ref.inputs["architecture_known"] is True
    assert cap.available_kv_bytes == ref.available_kv_bytes  # the same generic rules
    t = _terms(cap)
    for name in ("activation_peak", "cudagraph", "kv_cache"):
        assert t[name].note.endswith(UNKNOWN_ARCHITECTURE_NOTE), name
    assert UNKNOWN_ARCHITECTURE_NOTE not in t["weights"].note  # read from the index
    assert all(UNKNOWN_ARCHITECTURE_NOTE not in x.note for x in ref.terms)


def test_plan_cli_shows_the_unknown_architecture_mark(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    d = _unknown_arch_dir(tmp_path)
    assert main(["plan", "--model", str(d), "--gpu", "RTX 4090", "--max-model-len", "8192",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["inputs"]["architecture_known"] is False
    assert any(UNKNOWN_ARCHITECTURE_NOTE in t["note"] for t in out["terms"])
    main(["plan", "--model", str(d), "--gpu", "RTX 4090", "--max-model-len", "8192"])
    text = capsys.readouterr().out
    assert f"FancyNewForCausalLM; {UNKNOWN_ARCHITECTURE_NOTE}" in text


def test_plan_cli_limit_mm_per_prompt(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    d = tmp_path / "vl"
    shutil.copytree(MODELS / "qwen2-vl-7b-instruct", d)
    base = ["plan", "--model", str(d), "--gpu", "RTX 4090", "--max-model-len", "8192",
            "--vllm-version", "0.32.0", "--json"]
    main(base)
    images = json.loads(capsys.readouterr().out)
    main([*base, "--limit-mm-per-prompt", '{"image": 0}'])
    text_only = json.loads(capsys.readouterr().out)
    assert text_only["inputs"]["limit_mm_per_prompt"] == 0
    enc = next(t for t in images["terms"] if t["name"] == ENCODER_PROFILE_TERM)
    charge = text_only["activation_peak_bytes"] - images["activation_peak_bytes"]
    assert text_only["available_kv_bytes"] - images["available_kv_bytes"] == (
        enc["bytes"] + QWEN2VL_TOWER_BYTES - charge
    )


def test_every_catalog_checkpoint_plans_with_finite_positive_terms():
    specs = catalog.all_checkpoint_specs()
    assert len(specs) >= 70
    vision = 0
    for spec in specs:
        assert spec.architecture_known, spec.model_id
        inputs = PlanInputs(
            model=spec, gpu_total_bytes=96 * GiB, gpu_name="NVIDIA RTX PRO 6000",
            max_model_len=min(8192, spec.derived_max_model_len), vllm_version="0.32.0",
        )
        cap = compute_capacity(inputs)
        for term in cap.terms:
            assert isinstance(term.bytes, int) and term.bytes > 0, (spec.model_id, term)
            assert math.isfinite(term.bytes)
        assert cap.kv_bytes_per_token > 0 and cap.num_blocks > 0, spec.model_id
        assert math.isfinite(cap.max_concurrency) and cap.max_concurrency > 0
        if spec.vision is not None:
            vision += 1
            assert ENCODER_PROFILE_TERM in _terms(cap)
    assert vision >= 3  # Gemma 3 4B / 12B / 27B and their quantized checkpoints


def test_a_measured_launch_folds_the_encoder_into_the_reported_peak(qwen2vl):
    from kvpilot.core.fit.calibrate import calibrated_capacity, key_for
    from kvpilot.core.fit.measurements import Measured, MeasurementRecord

    inputs = rtx4090(qwen2vl, max_model_len=8192, vllm_version="0.32.0")
    predicted = compute_capacity(inputs)
    measured = Measured(measured_at="2026-11-29T09:00:00+00:00", source="launch",
                        weights_bytes=QWEN2VL_BYTES, available_kv_bytes=3 * GiB,
                        kv_cache_tokens=56_000, cudagraph_bytes=GiB // 2)
    cap = calibrated_capacity(inputs, [MeasurementRecord(key_for(inputs), measured)])
    t = _terms(cap)
    assert t[ENCODER_PROFILE_TERM].bytes == 0
    assert t[ENCODER_PROFILE_TERM].source == "measured"
    assert t["activation_peak"].source == "measured"
    # one measured peak for the profile run: the terms add up to the request again
    assert t["requested"].bytes == sum(x.bytes for n, x in t.items() if n != "requested")
    assert t["activation_peak"].bytes > _terms(predicted)["activation_peak"].bytes


def test_images_per_prompt_bound_the_v1_dummy_batch():
    gemma = fixture_spec("gemma-3-12b-it", 24_000_000_000)
    # 0.32: per prompt min(2, 8192 // 256) = 2 images; 4 sequences -> 8 of the 32 the budget allows
    prof = _profile(gemma, "0.32.0", 8192, max_num_batched_tokens=8192, max_num_seqs=4,
                    limit_mm_per_prompt=2)
    assert prof.items == 8


def test_text_only_is_not_offered_where_it_gains_nothing(qwen2vl):
    # V0 (0.6.6) profiles a vision model with one dummy sequence; without images it samples
    # all 256, so the text-only plan has less KV memory, and is not proposed
    small = replace(qwen2vl, vision=replace(qwen2vl.vision, max_image_tokens=2700,
                                            max_image_patches=10800))
    inputs = rtx4090(small, max_model_len=8192, vllm_version="0.6.6")
    images = compute_capacity(inputs)
    text = compute_capacity(replace(inputs, limit_mm_per_prompt=0))
    assert text.available_kv_bytes < images.available_kv_bytes
    failure = Failure(failures.NO_KV_MEMORY, "no memory left for the KV cache")
    assert all(o.kind != fallback.TEXT_ONLY for o in fallback.propose(failure, inputs))


def test_mllama_encoder_decoder_profile_gives_every_sequence_an_image():
    mllama = fixture_spec("llama-3.2-11b-vision-instruct", 21_340_441_670)
    # V0 encoder-decoder runner: max_num_seqs is not cut down; 16 sequences x 1 image of 4
    # tiles x 1,601 positions (1,608 padded in the encoder)
    prof = _profile(mllama, "0.10.2", 4096, max_num_batched_tokens=4096, max_num_seqs=16)
    assert (prof.items, prof.tokens_per_item) == (16, 6404)
    assert prof.encoder_peak_bytes == 16 * 6432 * (3 * 5120 + 3 * 1280) * 2
    assert multimodal.profile_num_seqs(
        mllama, _batch("0.10.2", 4096, max_num_batched_tokens=4096, max_num_seqs=16)) == 16
    # the default 256 sequences cost far more than a 24 GB card: why Llama 3.2 Vision is
    # started with a small --max-num-seqs
    default = compute_capacity(rtx4090(mllama, max_model_len=4096, vllm_version="0.10.2"))
    fewer = compute_capacity(rtx4090(mllama, max_model_len=4096, max_num_seqs=4,
                                     vllm_version="0.10.2"))
    assert _terms(default)[ENCODER_PROFILE_TERM].bytes > 16 * _terms(fewer)[
        ENCODER_PROFILE_TERM].bytes


def test_mllama_is_planned_with_the_v0_engine_rules():
    mllama = fixture_spec("llama-3.2-11b-vision-instruct", 21_340_441_670)
    cap = compute_capacity(rtx4090(mllama, max_model_len=8192, max_num_seqs=4,
                                   vllm_version="0.10.2"))
    # V0 without chunked prefill profiles a whole 8,192-token prompt (V1 0.10.2: 2,048)
    assert cap.max_num_batched_tokens == 8192
    assert cap.inputs["vllm_rules_since"] == "0"


def test_before_0_10_the_item_count_rounds_up():
    gemma = fixture_spec("gemma-3-12b-it", 24_000_000_000)
    # 3,000-token budget, 256-token images: 0.8.5 cdiv -> 12 items, 0.10.2 floor -> 11
    old = _profile(gemma, "0.8.5", 8192, max_num_batched_tokens=3000)
    new = _profile(gemma, "0.10.2", 8192, max_num_batched_tokens=3000)
    assert (old.items, new.items) == (12, 11)
    assert old.encoder_budget_tokens == new.encoder_budget_tokens == 3000


def test_the_v0_fallback_below_sm80_profiles_like_v0(qwen2vl):
    small = replace(qwen2vl, vision=replace(qwen2vl.vision, max_image_tokens=2700,
                                            max_image_patches=10800))
    # 0.8.5 on a T4 (SM 7.5) runs V0: one dummy sequence for the image; on an L4 it runs V1
    t4 = compute_capacity(rtx4090(small, max_model_len=8192, vllm_version="0.8.5",
                                  compute_capability=(7, 5)))
    l4 = compute_capacity(rtx4090(small, max_model_len=8192, vllm_version="0.8.5",
                                  compute_capability=(8, 9)))
    assert "sampler 1 x" in _terms(t4)["activation_peak"].note
    assert "V0: 1 dummy sequence" in _terms(t4)[ENCODER_PROFILE_TERM].note
    assert "V1 encoder budget" in _terms(l4)[ENCODER_PROFILE_TERM].note


def test_gemma4_towers_come_off_with_every_modality_disabled():
    """Gemma 4 E2B's vision tower (a VisionSpec) and audio tower (sized from audio_config) are
    not built by vLLM with every modality's limit 0 (--language-model-only: gemma4_mm.py
    _mark_tower_model); the weights term loses exactly their 16-bit bytes."""
    spec = fixture_spec("gemma-4-e2b-it", 10 * GiB)
    assert spec.vision is not None and spec.vision.family == "gemma4"
    vision = vision_weight_bytes(spec.vision)
    assert 0.25 * GiB < vision < 0.4 * GiB and 0.4 * GiB < spec.tower_weights_bytes < 0.6 * GiB
    full = compute_capacity(rtx4090(spec, max_model_len=8192, vllm_version="0.21.0"))
    text = compute_capacity(rtx4090(spec, max_model_len=8192, vllm_version="0.21.0",
                                    limit_mm_per_prompt=0))
    assert full.weights_bytes - text.weights_bytes == spec.tower_weights_bytes + vision
    weights = next(t for t in text.terms if t.name == "weights")
    assert "vision / audio towers" in weights.note and "vision tower" in weights.note


def test_gemma4_profiles_its_dummy_video():
    """Gemma 4's largest dummy item is a 32-frame video (2,496 tokens, frames at 70 soft tokens
    of 3 x 3 patches: 20,160 encoder positions), not a 280-token image (gemma4_mm.py)."""
    spec = fixture_spec("gemma-4-e4b-it", 15 * GiB)
    assert spec.vision is not None
    assert multimodal.max_tokens_per_item(spec.vision, 32_768) == {"image": 280, "video": 2496}
    cap = compute_capacity(rtx4090(spec, max_model_len=32_768, vllm_version="0.28.0",
                                   max_num_batched_tokens=8192))
    enc = next(t for t in cap.terms if t.name == ENCODER_PROFILE_TERM)
    # 8,192 // 2,496 = 3 videos in the encoder budget
    assert "3 video items x 2,496 tokens (60,480 encoder positions" in enc.note
    assert enc.bytes > 3 * 2496 * 2560 * 2  # the held outputs and the tower's excess peak


    # a model whose towers kvpilot does not size this way keeps its weights
    qwen = fixture_spec("qwen3-8b", 16 * GiB)
    assert qwen.tower_weights_bytes == 0
