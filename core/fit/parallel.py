"""Several GPUs: tensor and pipeline parallel layouts and what they cost each GPU.

vLLM splits a model over ``tensor_parallel_size x pipeline_parallel_size`` GPUs and sizes one KV
pool per GPU: every rank gets the same budget (``gpu_memory_utilization`` of *its* card, the
smallest card bounding the rest), ``1/TP`` of the weights and of the KV heads (KV heads are
replicated when there are fewer than ranks), and with pipeline parallelism ``1/PP`` of the layers.
Beyond one GPU each rank also holds communication memory:

* NCCL's buffers and communicators (part of the "non-torch" memory vLLM logs; 0.21-0.55 GiB per
  GPU in public logs, the fitted ``non_torch_tensor_parallel_bytes`` of
  :mod:`~kvpilot.core.fit.activation`);
* vLLM's custom all-reduce (``vllm/distributed/device_communicators/custom_all_reduce.py``):
  a metadata block plus a ``max_size`` (8 MiB) scratch, a registered IPC buffer of
  ``max_size`` and 8 MiB of ``rank_data``, about 24 MiB per rank. It exists only for 2, 4, 6 or 8
  (16 from 0.2x) GPUs that can reach each other peer to peer (NVLink, or P2P over PCIe for two
  GPUs); otherwise vLLM warns "Custom allreduce is disabled" and every all-reduce goes through
  NCCL, over PCIe and host memory on consumer cards: slower decode, and the plan says so;
* with the custom all-reduce off, the CUDA graphs hold NCCL's all-reduces, whose captured
  collectives take device memory beside the graph pool that the fitted graph estimate lacks
  (the two start-ups of the shared cases that capture through NCCL log 2.8 and 1.4 times it:
  gpt-oss-120b over four A100 on two nodes, Qwen3-235B over eight L40S). Its size is published
  only as a range (vLLM issue 5517: 1.1 to 3.8 GiB per A10G or L4, by CUDA driver), so where
  the graphs are captured outside the budget (before 0.20) :mod:`.nccl_capture` keeps the plan
  from "fits" while the memory beyond the budget is inside it: Qwen3-30B-A3B over four A10 with
  0.8.5 (vLLM issue 17469), which sized its KV cache and ran out of memory capturing, has 1.7
  GiB beyond the default budget against a 0.64 GiB estimate and is borderline.

vLLM requires the attention heads to divide by the tensor-parallel size; where they do not, the
layout falls back to pipeline parallelism (the layers split over the GPUs instead).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from kvpilot.core.base.errors import FitError
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.plan import GpuTarget
from kvpilot.core.base.units import MiB
from kvpilot.core.fit import activation

#: custom all-reduce buffers per rank (meta + max_size scratch, IPC buffer, rank_data), bytes
CUSTOM_ALLREDUCE_MAX_BYTES = 8 * MiB
CUSTOM_ALLREDUCE_BYTES = 3 * CUSTOM_ALLREDUCE_MAX_BYTES
#: world sizes vLLM's custom all-reduce supports
CUSTOM_ALLREDUCE_WORLD_SIZES = (2, 4, 6, 8, 16)
#: decode efficiency of the all-reduce path relative to one GPU's bandwidth (first-order)
ALLREDUCE_EFFICIENCY = {"nvlink": 0.90, "p2p": 0.80, "host": 0.60}


@dataclass(frozen=True)
class GpuSet:
    """The GPUs a machine has (or a planner-mode pick), and how they reach each other.

    ``p2p`` is True when every pair has peer-to-peer access, False when NVML (or, in planner
    mode, the card family) says there is none, None when unknown; ``nvlink`` likewise.
    """

    cards: tuple[GpuTarget, ...]
    p2p: bool | None = None
    nvlink: bool | None = None

    @property
    def label(self) -> str:
        """``2x RTX 4090`` or ``RTX 4090 + RTX 3090``."""
        return label_of(self.cards)

    def allreduce_path(self, world: int) -> str:
        """``nvlink``, ``p2p`` or ``host``: how ``world`` ranks all-reduce on this set."""
        if world < 2:
            return "none"
        if self.nvlink:
            return "nvlink"
        if self.p2p and world == 2:
            return "p2p"
        return "host"


def label_of(cards: Sequence[GpuTarget]) -> str:
    """``2x RTX 4090`` for identical cards, ``RTX 4090 + RTX 3090`` otherwise."""
    names = [c.short_name for c in cards]
    if len(set(names)) == 1:
        return names[0] if len(names) == 1 else f"{len(names)}x {names[0]}"
    return " + ".join(names)


@dataclass(frozen=True)
class Layout:
    """How a model spreads over some cards of a set: positions in ``GpuSet.cards``, sizes and
    the all-reduce path (``none`` on one GPU, ``nvlink``, ``p2p``, ``host``)."""

    cards: tuple[int, ...]
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    allreduce: str = "none"
    note: str = ""

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size


def per_gpu(cards: Sequence[GpuTarget]) -> GpuTarget:
    """What each rank can count on: the smallest memory, free memory, capability, bandwidth
    and compute of ``cards`` (the smaller card bounds per-GPU memory)."""
    if not cards:
        raise FitError("no GPU to plan for")
    if len(cards) == 1:
        return cards[0]  # one card as it is: its full name keys its measurements
    frees = [c.free_bytes for c in cards]
    caps = [c.compute_capability for c in cards if c.compute_capability]
    bws = [c.bandwidth_bytes_per_s for c in cards]
    tfs = [c.bf16_dense_tflops for c in cards]
    return GpuTarget(
        name=label_of(cards),
        total_bytes=min(c.total_bytes for c in cards),
        free_bytes=None if any(f is None for f in frees) else min(int(f or 0) for f in frees),
        compute_capability=min(caps) if caps else None,
        bandwidth_bytes_per_s=None if any(b is None for b in bws) else min(b or 0 for b in bws),
        bf16_dense_tflops=None if any(t is None for t in tfs) else min(t or 0 for t in tfs),
        drives_display=any(c.drives_display for c in cards),
        under_wsl2=any(c.under_wsl2 for c in cards),
    )


def tensor_parallel_ok(model: ModelSpec, tp: int) -> bool:
    """vLLM's rule: the attention heads divide by TP (KV heads divide it or are replicated)."""
    if tp <= 1:
        return True
    heads, kv_heads = model.num_attention_heads, model.num_key_value_heads
    if heads % tp:
        return False
    return kv_heads % tp == 0 or tp % kv_heads == 0


def single_card_order(gpus: GpuSet) -> list[int]:
    """Positions of the cards to try alone: those not driving the display first, then the most
    free memory (when measured), then the fastest memory, then the largest."""
    def key(i: int) -> tuple[bool, int, float, int]:
        c = gpus.cards[i]
        return (c.drives_display, -(c.free_bytes or 0), -(c.bandwidth_bytes_per_s or 0.0),
                -c.total_bytes)

    return sorted(range(len(gpus.cards)), key=key)


def layouts(model: ModelSpec, gpus: GpuSet) -> list[Layout]:
    """Layouts to rank for ``model``: each card alone (best first), then all cards together
    with tensor parallelism, or pipeline parallelism where the heads do not divide."""
    out = [Layout(cards=(i,), note=_single_note(gpus, i)) for i in single_card_order(gpus)]
    n = len(gpus.cards)
    if n < 2:
        return out
    every = tuple(range(n))
    if tensor_parallel_ok(model, n):
        path = gpus.allreduce_path(n)
        out.append(Layout(every, tensor_parallel_size=n, allreduce=path,
                          note=_parallel_note(gpus, n, 1, path)))
    elif model.num_hidden_layers >= n:
        out.append(Layout(every, pipeline_parallel_size=n, allreduce="none",
                          note=_parallel_note(gpus, 1, n, "none", heads=model.num_attention_heads)))
    return out


def _single_note(gpus: GpuSet, i: int) -> str:
    if len(gpus.cards) < 2:
        return ""
    c = gpus.cards[i]
    where = f"GPU {c.index} ({c.short_name})" if c.index is not None else f"one {c.short_name}"
    if c.drives_display:
        return f"on {where}, the card that drives the display"
    if any(o.drives_display for o in gpus.cards):
        return f"on {where}, not the display card"
    return f"on {where}"


def _parallel_note(
    gpus: GpuSet, tp: int, pp: int, path: str, *, heads: int | None = None
) -> str:
    label = gpus.label
    if pp > 1:
        return (f"pipeline parallel {pp} over {label} ({heads} heads do not split {pp} ways)")
    text = f"tensor parallel {tp} over {label}"
    if path == "nvlink":
        return text + ", custom all-reduce over NVLink"
    if path == "p2p":
        return text + ", custom all-reduce over PCIe P2P"
    why = "no P2P" if gpus.p2p is False else (
        "P2P unknown" if gpus.p2p is None else "over 2 GPUs on PCIe")
    return text + f", {why}: all-reduce through host memory (slower)"


def explain(layout: Layout) -> str:
    """A sentence on what the all-reduce path means for the user (empty on one GPU)."""
    if layout.pipeline_parallel_size > 1:
        return ("vLLM runs one stage of layers per GPU; one stream's tokens pass every stage "
                "in turn, so decode is no faster than on one card, but the memory adds up.")
    if layout.allreduce == "host":
        return ("Without NVLink or PCIe peer-to-peer, vLLM disables its custom all-reduce "
                "(\"Custom allreduce is disabled\" in its log) and NCCL copies every all-reduce "
                "through host memory: expect slower decode than the cards' bandwidth suggests.")
    if layout.allreduce in ("nvlink", "p2p"):
        return ("vLLM's custom all-reduce (about 24 MiB of buffers per GPU) exchanges each "
                "layer's results directly between the cards.")
    return ""


def non_torch_bytes(tensor_parallel_size: int, pipeline_parallel_size: int = 1,
                    allreduce: str | None = None,
                    constants: activation.FittedConstants | None = None) -> int:
    """Non-torch memory per rank: the logged single-GPU figure, or with several GPUs the
    logged tensor-parallel one, less the custom all-reduce buffers when vLLM cannot create them
    (no P2P/NVLink, an unsupported world size, or no tensor parallelism at all)."""
    world = tensor_parallel_size * pipeline_parallel_size
    if world <= 1:
        return activation.non_torch_bytes(1, constants=constants)
    base = activation.non_torch_bytes(2, constants=constants)
    custom = (
        tensor_parallel_size in CUSTOM_ALLREDUCE_WORLD_SIZES
        and allreduce in (None, "nvlink", "p2p")
    )
    return base if custom else base - CUSTOM_ALLREDUCE_BYTES


def non_torch_note(
    tensor_parallel_size: int, pipeline_parallel_size: int = 1, allreduce: str | None = None,
    constants: activation.FittedConstants | None = None,
) -> str:
    """The tail of the non-torch budget line: what the communication memory is."""
    if tensor_parallel_size * pipeline_parallel_size <= 1:
        return ""
    if non_torch_bytes(tensor_parallel_size, pipeline_parallel_size, allreduce, constants) == (
        activation.non_torch_bytes(2, constants=constants)
    ):
        return f", NCCL buffers and custom all-reduce ({CUSTOM_ALLREDUCE_BYTES >> 20} MiB)"
    return ", NCCL buffers (no custom all-reduce)"


def stage_model(model: ModelSpec, pipeline_parallel_size: int) -> ModelSpec:
    """The part of ``model`` one pipeline stage holds: ``ceil(layers / PP)`` layers (vLLM gives
    the first stages the extra layers) and that share of the checkpoint's weights."""
    pp = pipeline_parallel_size
    if pp <= 1:
        return model
    if pp > model.num_hidden_layers:
        raise FitError(
            f"pipeline_parallel_size {pp} is more than the model's {model.num_hidden_layers} layers"
        )
    layers = math.ceil(model.num_hidden_layers / pp)
    kinds = model.layer_types[:layers] if model.layer_types else ()
    weights = None if model.weights_bytes is None else math.ceil(
        model.weights_bytes * layers / model.num_hidden_layers
    )
    return replace(model, num_hidden_layers=layers, layer_types=kinds, weights_bytes=weights)


def speedup(layout: Layout) -> float:
    """First-order decode speed-up of a layout over one GPU (bandwidth adds up, less the
    all-reduce path's efficiency); pipeline stages run one after another (no gain for one
    stream)."""
    if layout.tensor_parallel_size <= 1:
        return 1.0
    return layout.tensor_parallel_size * ALLREDUCE_EFFICIENCY.get(layout.allreduce, 0.6)


_COUNT = re.compile(r"^\s*(\d+)\s*[x×*]\s*(.+?)\s*$", re.IGNORECASE)


def parse_gpu_names(text: str) -> list[str]:
    """``"2x RTX 4090"`` -> two names; ``"RTX 4090 + RTX 3090"`` -> two; ``"RTX 4090"`` -> one.

    Raises:
        FitError: an empty part or a count outside 1-16.
    """
    names: list[str] = []
    for part in str(text).split("+"):
        part = part.strip()
        if not part:
            raise FitError(f"cannot read the GPU list {text!r}; write e.g. '2x RTX 4090' or "
                           "'RTX 4090 + RTX 3090'")
        m = _COUNT.match(part)
        if m:
            count = int(m.group(1))
            if not 1 <= count <= 16:
                raise FitError(f"{count} GPUs of one kind: give 1 to 16")
            names += [m.group(2)] * count
        else:
            names.append(part)
    return names


def is_consumer(name: str) -> bool:
    """GeForce / RTX desktop cards: NVIDIA offers no PCIe peer-to-peer on them."""
    n = name.lower()
    return "geforce" in n or bool(re.search(r"\brtx\s*[2-5]0\d0", n))
