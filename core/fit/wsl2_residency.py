"""Windows' own GPU memory under WSL2, which vLLM's memory profile may count as its own.

Under WSL2 the card is shared with the Windows desktop through Windows' WDDM driver, which
makes Windows' allocations (the compositor, WSLg's display server, browsers) resident on the
card as they are used, and reports no per-process memory. vLLM before 0.34 measures its
non-torch memory across the whole device: ``total - free`` from ``cudaMemGetInfo`` less
torch's reserved memory, from the snapshot taken once its CUDA context exists to the end of the
profile run, a window that spans loading the weights (``vllm/utils/mem_utils.py``
``memory_profiling``, ``v1/worker/gpu_worker.py`` ``determine_available_memory``, read in the
0.15.1 wheel). Memory Windows makes resident in that window is charged to vLLM and taken off
the KV cache; the free-memory check at start-up has already passed by then.

What public WSL2 reports say of it:

- a WSL2 RTX 4090 with vLLM 0.15.1 at utilization 0.92 passed that check, then had 0.14 GiB of
  KV cache where kvpilot's plan of that budget has about 2.5 GiB; the display server held
  2,275 MiB of the card (set-up notes "vLLM on WSL2 -- Successful Setup", 2026-02-09, in
  ``benchmarks/data/calibration_cases_released.json``);
- the memory a WSL2 card can make resident is below what ``nvidia-smi`` shows free
  (microsoft/WSL#41176: ``dxgkio_make_resident`` fails with about 2 GB shown free);
- WSL2's overhead is about 0.3 GiB in ``nvidia-smi`` at rest and up to about 1.3 GiB once the
  card is used (noonghunna/club-3090#102, two machines); a 3090's usable memory is about
  0.5 GiB below the same card's on Linux (syv-ai/qwen38-27b-rtx3090 pull request 83).

None says how much moves in a given start-up, so the plan keeps its estimate and widens the
band's lower edge by the room kvpilot already leaves a desktop to grow into on 0.34
(:func:`kvpilot.core.fit.extensible_kv.desktop_room_bytes`: as much again as other programs
hold at the reading, at least 1 GiB). Two logged WSL2 start-ups at 0.27.1 that saw no growth
stay within 2 % of the estimate; a plan whose request fits only above the widened edge is
borderline, and ``kvpilot plan --measure`` settles it on the machine itself.
"""

from __future__ import annotations

from kvpilot.core.base.plan import PlanInputs
from kvpilot.core.fit.extensible_kv import desktop_room_bytes


def room_bytes(inputs: PlanInputs) -> int:
    """How far (bytes per GPU) the available-KV band's lower edge drops for ``inputs``.

    0 unless the GPU is reached through WSL2 (``gpu_under_wsl2``), vLLM sizes the KV cache
    from its utilization budget (not ``kv_cache_memory_bytes``: vLLM then uses that size as it
    is), and the plan is not for the CPU backend. Releases from 0.34 size the cache from the
    memory free after warm-up instead; their launch cap leaves the same room outside it
    (:func:`kvpilot.core.fit.extensible_kv.launch_cap`), so the caller passes them over.
    """
    if not inputs.gpu_under_wsl2 or inputs.kv_cache_memory_bytes is not None \
            or inputs.on_cpu_backend:
        return 0
    others = 0
    if inputs.gpu_free_bytes is not None:
        others = max(0, inputs.gpu_total_bytes - inputs.gpu_free_bytes)
    return desktop_room_bytes(others)
