"""What a GPU's compute capability allows (reference §6): FP8 KV cache and quantization methods.

vLLM refuses these at start-up; kvpilot refuses them before launch, in the same terms.
"""

from __future__ import annotations

from kvpilot.core.base import failures, versions
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.plan import PlanInputs
from kvpilot.core.fit.kv import FP8_KV_DTYPES

#: head sizes FlashInfer's FP8 KV kernels accept (vLLM >= 0.12 picks FlashInfer for FP8 on SM8x)
FLASHINFER_HEAD_SIZES = frozenset({64, 128, 256, 512})

#: minimum compute capability per quantization method (vLLM 0.33; 0.11 in comments where higher)
QUANT_MIN_CAPABILITY: dict[str, tuple[int, int]] = {
    "awq": (7, 5),
    "awq_marlin": (7, 5),
    "auto_awq": (7, 5),
    "gptq": (6, 0),
    "gptq_marlin": (7, 5),
    "auto_gptq": (6, 0),
    "fp8": (7, 5),  # 8.0 in 0.11; weight-only Marlin below 8.9
    "compressed-tensors": (7, 0),
    "mxfp4": (8, 0),
    "gpt_oss_mxfp4": (8, 0),
    "experts_int8": (8, 0),
    "modelopt": (8, 0),
    "modelopt_fp4": (7, 5),
    "bitsandbytes": (7, 0),
    "moe_wna16": (7, 0),
}

#: methods that left vLLM's tree (the feature row with the release, plugin to install instead)
REMOVED_QUANTIZATION = {
    "bitsandbytes": ("bitsandbytes_quantization", "vllm-bnb-plugin"),
    "gguf": ("gguf_quantization", "vllm-gguf-plugin"),
}


def fp8_kv_supported(
    compute_capability: tuple[int, int] | None, head_dim: int, vllm_version: str
) -> bool:
    """True when vLLM can store the KV cache in FP8 on this GPU.

    SM 8.9+ always works (Triton or FlashInfer); SM 8.0-8.8 only through FlashInfer (vLLM 0.12
    and newer, head sizes 64/128/256/512); older GPUs never.
    """
    if compute_capability is None:
        return True  # unknown GPU: do not refuse, vLLM will say
    if compute_capability >= (8, 9):
        return True
    return (
        compute_capability >= (8, 0)
        and versions.supports("fp8_kv_flashinfer_sm80", vllm_version)
        and head_dim in FLASHINFER_HEAD_SIZES
    )


def check_support(inputs: PlanInputs) -> Failure | None:
    """A failure when the plan asks for something this GPU or vLLM version cannot do."""
    vision = inputs.model.vision
    if vision is not None and vision.last_vllm_release is not None and (
        versions.Release.parse(inputs.vllm_version).parts[: len(vision.last_vllm_release)]
        > vision.last_vllm_release
    ):
        last = ".".join(str(p) for p in vision.last_vllm_release)
        return Failure(
            failures.UNSUPPORTED_MODEL,
            f"vLLM {inputs.vllm_version} no longer serves {inputs.model.architecture} (the "
            f"last release that does is {last}); run vLLM {last} or pick another vision model.",
        )
    cc = inputs.compute_capability
    kv = (inputs.kv_cache_dtype or "auto").lower()
    if kv in FP8_KV_DTYPES and not fp8_kv_supported(
        cc, inputs.model.head_dim, inputs.vllm_version
    ):
        assert cc is not None
        return Failure(
            failures.UNSUPPORTED_KV_DTYPE,
            f"FP8 KV cache needs compute capability 8.9 (or FlashInfer with head size 64/128/256/"
            f"512 on 8.0+); this GPU is {cc[0]}.{cc[1]}. Use --kv-cache-dtype auto.",
        )
    method = (inputs.quantization or "").lower() or (
        inputs.model.quantization.method.lower() if inputs.model.quantization else ""
    )
    if not method:
        return None
    removed = REMOVED_QUANTIZATION.get(method)
    if removed and not versions.supports(removed[0], inputs.vllm_version):
        until = versions.FEATURES[removed[0]].until
        assert until is not None
        since = versions.short(until)
        return Failure(
            failures.UNSUPPORTED_QUANTIZATION,
            f"vLLM {inputs.vllm_version} no longer has {method} quantization (removed in "
            f"{since}); install {removed[1]} or pick another checkpoint.",
        )
    from kvpilot.core.models.checkpoint_rules import support_refusal

    fp4 = support_refusal(inputs.model.quantization, cc, inputs.vllm_version)
    if fp4 is not None:
        return Failure(failures.UNSUPPORTED_QUANTIZATION, fp4)
    need = QUANT_MIN_CAPABILITY.get(method)
    if cc is not None and need is not None and cc < need:
        return Failure(
            failures.UNSUPPORTED_QUANTIZATION,
            f"{method} quantization needs compute capability {need[0]}.{need[1]}; this GPU is "
            f"{cc[0]}.{cc[1]}. Pick a 16-bit or another quantized checkpoint.",
        )
    return None
