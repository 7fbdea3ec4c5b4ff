"""Which model runner a vLLM release uses for a model, and what that changes in the budget.

vLLM has a second GPU model runner (``v1/worker/gpu/model_runner.py``, logged as "Using V2 Model
Runner"; in the wheels from 0.12.0, chosen with ``VLLM_USE_V2_MODEL_RUNNER=1`` alone before
0.22), and from 0.22 each release picks it by its own rule unless that variable is set
(``VllmConfig.use_v2_model_runner`` / ``_is_default_v2_model_runner_model``, read in each wheel):

* 0.12 to 0.21: no default architecture; the V1 runner.
* 0.22: ``Qwen3ForCausalLM``, not MoE, not quantized; 0.23 adds ``LlamaForCausalLM`` and
  ``MistralForCausalLM``.
* 0.24: any of Qwen3, Llama, Mistral, DeepseekV2, Qwen2Moe and GraniteMoe (quantized too).
* 0.25 to 0.27: every generative model that is neither hybrid nor attention-free, unless it is a
  MoE outside the default set (DeepseekV2, Qwen2Moe, GraniteMoe, and from 0.26 Inkling and
  LongcatFlashNgram); 0.28 lets a hybrid of the default set through.
* 0.29: every model (MoE, hybrid and pooling ones included).

Features the runner lacks send the model back to V1 (``_get_v2_model_runner_unsupported_features``):
n-gram and other drafters than EAGLE / EAGLE3 / MTP (and DFlash from 0.27, DSpark and
extract_hidden_states from 0.29).

Under the V2 runner the profile run keeps the forward's buffers while the dummy sampler runs,
and that sampler keeps the logits only (:data:`activation.SAMPLER_V2`): :func:`runner_profile`.

The V2 runner's ``profile_cudagraph_memory`` returns 0 up to 0.28.0 (``v1/worker/gpu/
model_runner.py`` 0.26.0 l. 705-707, 0.27.x l. 749-751, 0.28.0 l. 843-845; 0.29.0 estimates), so
no CUDA-graph estimate enters a V2 run's budget before 0.29: the graphs are captured after the
KV cache from memory outside it (:func:`graphs_outside_budget`). The logs agree: vLLM's "peak
activation" figure is the profile run's transient peak (0.26.0, the applied estimate taken off
beside it) or that peak plus the applied estimate (0.28.0), by each wheel's
``determine_available_memory``, and the V2 start-ups that print the breakdown close their budget
without the captured pool (Qwen2.5-7B-AWQ with 0.26.0 on an RTX 4080 and with 0.28.0 on an L4:
1.04 GiB peak, 0.48 / 0.53 GiB of graphs apart; Gemma 4 E4B with 0.28.0 on an L4: 0.27 GiB
peak, 0.78 GiB apart).

The profile run itself, read in the 0.26.0 and 0.28.0 wheels: the dummy batch has
``min(max_num_batched_tokens, max_num_seqs)`` requests and one logit row each
(``v1/worker/gpu/input_batch.py`` ``make_dummy``, ``logits_indices = query_start_loc[1:] - 1``,
0.26.0 l. 146); the dummy slots keep temperature 0, top-k = vocabulary and top-p 1
(``sample/states.py`` ``SamplingStates.__init__``), so the sampler skips top-k/top-p and keeps
only [rows, vocab / 1024] partial maxima (``sample/gumbel.py`` ``gumbel_sample``, 0.26.0
l. 232-236); 0.28.0 copies the logits to fp32 only for slots that need processing
(``sample/sampler.py`` ``apply_sampling_params`` l. 192-196, none in the dummy batch); the
attention of the profile run is skipped (``profile_run`` -> ``_dummy_run(skip_attn=True)``) and
``unified_kv_cache_update`` returns an empty tensor (``model_executor/layers/attention/
attention.py`` 0.28.0 l. 701-724). Beyond these, the dense V2 start-ups log a peak of about
their embedding table (1.04 GiB for Qwen2.5-7B-AWQ against 0.34 modelled): a first compile's
benchmark of the embedding gather, inside the same profile window
(:mod:`kvpilot.core.fit.compile_charge`; a multimodal model, fed embeddings, has none, which is
why Gemma 4 E4B's 0.27 GiB matches the forward and sampler alone).

The budgets also differ in what they count beside the peak: 0.26.0 takes weights (measured
around loading), memory outside torch and the profile window's torch peak
(``v1/worker/gpu_worker.py`` l. 509-516), so tensors the runner keeps from after loading until
the profile (the sampler's penalty tables, ``sample/penalties.py`` l. 32-42: int32
[max_num_seqs, vocab] and [max_num_seqs, vocab / 32]) are in no term and take memory outside the
budget; from 0.27 the budget takes the fall of free memory since start-up
(``utils/mem_utils.py`` ``memory_profiling`` l. 317-326, ``total_consumed``), which holds them
(:mod:`kvpilot.core.fit.v2_sampler_states`).
"""

from __future__ import annotations

from dataclasses import replace

from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.plan import PlanInputs
from kvpilot.core.base.speculative_config import speculative_settings
from kvpilot.core.base.versions import Release
from kvpilot.core.fit import activation
from kvpilot.core.fit.activation import VersionProfile

_DENSE_SET_022 = frozenset({"Qwen3ForCausalLM"})
_DENSE_SET_023 = _DENSE_SET_022 | {"LlamaForCausalLM", "MistralForCausalLM"}
_SET_024 = _DENSE_SET_023 | {"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM",
                             "GraniteMoeForCausalLM"}
_MOE_SET_025 = frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM",
                          "GraniteMoeForCausalLM"})
_MOE_SET_026 = _MOE_SET_025 | {"InklingForCausalLM", "InklingForConditionalGeneration",
                               "LongcatFlashNgramForCausalLM"}
#: drafters the V2 runner runs (others send the model to V1); DFlash from 0.27
_V2_DRAFTERS = ("eagle", "eagle3", "mtp")


def uses_v2_runner(model: ModelSpec, inputs: PlanInputs) -> bool:
    """Whether ``inputs.vllm_version`` runs ``model`` on the V2 model runner (rules above).

    ``VLLM_USE_V2_MODEL_RUNNER`` (:attr:`PlanInputs.use_v2_model_runner`) decides first where
    the runner exists (``v1/worker/gpu/model_runner.py`` from the 0.12.0 wheel, none in
    0.11.0), as ``VllmConfig.use_v2_model_runner`` reads it before any rule (pooling waits for
    0.29 all the same)."""
    v = Release.parse(inputs.vllm_version)
    pooling_on_v1 = inputs.runner == "pooling" and not v.at_least("0.29")
    if inputs.use_v2_model_runner is not None and v.at_least("0.12"):
        return inputs.use_v2_model_runner and not pooling_on_v1
    if not v.at_least("0.22") or pooling_on_v1:
        return False
    arch = model.architecture
    moe = model.moe is not None
    hybrid = model.linear_state is not None
    if v.at_least("0.29"):
        chosen = True
    elif v.at_least("0.25"):
        default_moe = _MOE_SET_026 if v.at_least("0.26") else _MOE_SET_025
        if hybrid and not (v.at_least("0.28") and arch in default_moe):
            return False
        chosen = arch in default_moe or not moe
    elif v.at_least("0.24"):
        chosen = arch in _SET_024
    else:
        dense = _DENSE_SET_023 if v.at_least("0.23") else _DENSE_SET_022
        chosen = arch in dense and not moe and model.quantization is None and not hybrid
    if not chosen:
        return False
    settings = speculative_settings(inputs.speculative_config)
    method = settings.method if settings is not None else None
    drafters: tuple[str, ...] = _V2_DRAFTERS
    if v.at_least("0.27"):
        drafters = (*drafters, "dflash")
    if v.at_least("0.29"):
        drafters = (*drafters, "dspark", "extract_hidden_states")
    return method is None or method in drafters


def runner_profile(profile: VersionProfile, model: ModelSpec, inputs: PlanInputs
                   ) -> VersionProfile:
    """``profile`` as the runner of this release and model applies it: the V2 sampler and the
    forward held through it where the V2 runner runs (0.22+), none where V1 runs (a MoE or a
    hybrid on a 0.28 row). The row's key is kept (its fitted constants)."""
    if profile.engine != "V1":
        return profile
    if uses_v2_runner(model, inputs):
        return replace(profile, v2_sampler=activation.SAMPLER_V2, sampler_adds_to_forward=True)
    if profile.v2_sampler is not None:
        return replace(profile, v2_sampler=None, sampler_adds_to_forward=False)
    return profile


def graphs_outside_budget(profile: VersionProfile, model: ModelSpec, inputs: PlanInputs) -> bool:
    """Whether, by the release's code, the CUDA graphs are captured from memory the KV budget
    does not hold: before 0.20 (no estimate), and under the V2 runner before 0.29 (its
    ``profile_cudagraph_memory`` returns 0). The capture then needs that much memory free
    beyond the requested budget."""
    if profile.engine != "V1" or inputs.enforce_eager:
        return False
    if not profile.cudagraph_in_budget:
        return True
    return uses_v2_runner(model, inputs) and not Release.parse(
        inputs.vllm_version).at_least("0.29")
