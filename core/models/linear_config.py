"""The recurrent state of linear-attention layers, read from config.json as vLLM reads it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvpilot.core.base.errors import ModelSpecError
from kvpilot.core.base.model_spec import GATED_DELTA_NET, LINEAR_ATTENTION, MAMBA2, LinearState


def linear_state_from_config(
    text: Mapping[str, Any], model_type: str, layer_types: tuple[str, ...], where: str
) -> LinearState | None:
    """The recurrent state of the linear-attention layers, read as vLLM's model files read it.

    Gated DeltaNet (``qwen3_next.py`` / ``qwen3_5.py``): conv over ``2 x key heads x key dim +
    value heads x value dim`` channels, state ``value heads x value dim x key dim``; Qwen3.5's
    ``mamba_ssm_dtype`` sets the state dtype. Mamba2 (``nemotron_h.py``,
    ``granitemoehybrid.py``): conv over ``heads x head dim + 2 x groups x state size``, state
    ``heads x head dim x state size``; vLLM keeps Nemotron-H's state in float32.

    Raises:
        ModelSpecError: linear-attention layers without the widths their state needs.
    """
    if LINEAR_ATTENTION not in layer_types:
        return None

    def need(*keys: str) -> int:
        for key in keys:
            value = text.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        raise ModelSpecError(
            "linear-attention layers but no state width in config.json",
            path=where, field=keys[0],
        )

    if text.get("linear_num_value_heads") is not None:
        nk, nv = need("linear_num_key_heads"), need("linear_num_value_heads")
        hk, hv = need("linear_key_head_dim"), need("linear_value_head_dim")
        ssm = text.get("mamba_ssm_dtype")
        return LinearState(
            GATED_DELTA_NET, conv_dim=2 * nk * hk + nv * hv,
            conv_kernel=need("linear_conv_kernel_dim"), temporal_heads=nv,
            temporal_head_dim=hv, temporal_state_dim=hk,
            ssm_dtype=str(ssm) if isinstance(ssm, str) else None,
        )
    heads = need("mamba_num_heads", "mamba_n_heads")
    head_dim = need("mamba_head_dim", "mamba_d_head")
    state = need("ssm_state_size", "mamba_d_state")
    groups = need("n_groups", "mamba_n_groups")
    kernel = need("conv_kernel", "mamba_d_conv")
    ssm_dtype = "float32" if model_type == "nemotron_h" else None
    return LinearState(
        MAMBA2, conv_dim=heads * head_dim + 2 * groups * state, conv_kernel=kernel,
        temporal_heads=heads, temporal_head_dim=head_dim, temporal_state_dim=state,
        ssm_dtype=ssm_dtype, n_groups=groups, state_size=state,
        chunk_size=int(text.get("chunk_size") or text.get("mamba_chunk_size") or 0),
    )
