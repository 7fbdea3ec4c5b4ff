"""A vLLM 0.34 start-up read by the log scanner: the final KV size, not the reserved range.

No GPU run of 0.34 is recorded (the CPU build stops at 0.32, so the end-to-end tests stay on
it). The lines below are composed from the 0.34.0 wheel's own message templates, quoted here
as the wheel has them (%-format strings, ``vllm/`` paths inside the wheel), with invented
figures that agree with each other:

* v1/worker/gpu_worker.py determine_available_memory: "Available KV cache memory: %s GiB"
* v1/core/kv_cache_planning.py _auto_fit_max_model_len: "Auto-fit max_model_len: reduced from
  %d to %d to fit in available KV cache memory (%s)%s" with the tentative note "; the final
  length is set after CUDA graph capture and warmup", and after warm-up "--max-model-len auto
  reduced max_model_len from %d to %d (%s)." / "Auto-fit max_model_len: using
  max_model_len=%d, which fits in the KV cache memory left after CUDA graph capture and warmup
  (%s)."
* v1/worker/gpu_worker.py _compile_or_warm_up_model, the memory summary (an f-string):
  "Free memory on device ({}/{} GiB) on startup. Desired GPU memory utilization is ({}, {} GiB).
  Actual usage is {} GiB for consumed memory (weights + non-torch), {} GiB for peak activation,
  and {} GiB for CUDAGraph memory. Replace gpu_memory_utilization config with
  `--kv-cache-memory={}` ({} GiB) to fit into requested memory, or `--kv-cache-memory={}` ({}
  GiB) to fully utilize gpu memory. Current kv cache memory in use is {} GiB."
* v1/worker/extensible_kv_cache.py measure_kv_cache_blocks: "Memory after warmup: %s GiB free,
  %s GiB committed to the KV cache, %s GiB kept for transient activations (%s GiB allocated at
  peak, %s GiB of torch reservation growth); %d KV cache blocks (%s GiB) fit within the
  requested %s GiB. Torch may reserve up to %s GiB." and the WARNING
  "gpu_memory_utilization=%s caps this instance at %s GiB, keeping %s GiB of free device memory
  out of the KV cache. ..."
* v1/worker/extensible_kv_cache.py extend_kv_cache: "Extended KV cache to %d blocks (%.2f GiB)."
* v1/core/kv_cache_utils.py update_kv_cache_capacity: "%s KV cache size: %s tokens, Maximum
  concurrency for %s tokens per request: %.2fx"
* v1/core/kv_cache_planning.py _more_kv_cache_memory_hint: "The extensible KV cache already
  takes all device memory left after %s; decrease `max_model_len` or `max_num_seqs`, or the
  model needs a device with more memory."
"""

from __future__ import annotations

from kvpilot.core.base import failures
from kvpilot.core.base.units import GiB
from kvpilot.core.fit.measurements import ReportedCapacity, measured_from_reported
from kvpilot.core.vllm.logevents import CapacityEvent
from kvpilot.core.vllm.logparse import LogScanner
from kvpilot.core.vllm.metrics import parse_metrics

P = "(EngineCore pid=4188) INFO 12-06 10:40:{:02d} [{}] "


def _line(n: int, where: str, text: str) -> str:
    return P.format(n, where) + text


def _fmt(template: str, *values: object) -> str:
    return template % values


#: the wheel's templates (see the module docstring), filled as vLLM fills them
AVAILABLE = "Available KV cache memory: %s GiB"
TENTATIVE = ("Auto-fit max_model_len: reduced from %d to %d to fit in available KV cache memory "
             "(%s)%s")
TENTATIVE_NOTE = "; the final length is set after CUDA graph capture and warmup"
AFTER_WARMUP = ("Memory after warmup: %s GiB free, %s GiB committed to the KV cache, %s GiB "
                "kept for transient activations (%s GiB allocated at peak, %s GiB of torch "
                "reservation growth); %d KV cache blocks (%s GiB) fit within the requested %s "
                "GiB. Torch may reserve up to %s GiB.")
FINAL_REDUCED = "--max-model-len auto reduced max_model_len from %d to %d (%s)."
FINAL_LEFT = "%s left for the KV cache after CUDA graph capture and warmup"
EXTENDED = "Extended KV cache to %d blocks (%.2f GiB)."
KV_SIZE = "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx"
CAPS = ("gpu_memory_utilization=%s caps this instance at %s GiB, keeping %s GiB of free device "
        "memory out of the KV cache. The extensible KV cache is sized from the memory measured "
        "after warmup and CUDA graph capture, so vLLM's own use needs no headroom below 1.0.")
SUMMARY = ("Free memory on device ({}/{} GiB) on startup. Desired GPU memory utilization is "
           "({}, {} GiB). Actual usage is {} GiB for consumed memory (weights + non-torch), {} "
           "GiB for peak activation, and {} GiB for CUDAGraph memory. Replace "
           "gpu_memory_utilization config with `--kv-cache-memory={}` ({} GiB) to fit into "
           "requested memory, or `--kv-cache-memory={}` ({} GiB) to fully utilize gpu memory. "
           "Current kv cache memory in use is {} GiB.")
NO_KV = ("ValueError: No available memory for the cache blocks. The extensible KV cache already "
         "takes all device memory left after %s; decrease `max_model_len` or `max_num_seqs`, or "
         "the model needs a device with more memory. See "
         "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")


def startup_034(*, capped: bool = False) -> list[str]:
    """A 0.34 start-up with --max-model-len auto: reservation 8.21 GiB, final 4320 blocks."""
    lines = [
        _line(30, "gpu_worker.py:796", _fmt(AVAILABLE, "8.21")),
        _line(31, "kv_cache_planning.py:1479",
              _fmt(TENTATIVE, 131072, 32768, "8.21 GiB GPU", TENTATIVE_NOTE)),
        _line(37, "gpu_worker.py:1174",
              SUMMARY.format("21.65", "23.65", 1.0, "23.65", "14.27", "0.69", "0.5",
                             8_100_000_000, "7.54", 6_900_000_000, "6.43", "8.21")),
        _line(38, "extensible_kv_cache.py:694",
              _fmt(AFTER_WARMUP, "6.55", "0.52", "0.69", "0.69", "0.12", 4320, "4.91",
                   "23.65", "15.61")),
    ]
    if capped:
        lines.append(P.format(38, "extensible_kv_cache.py:663").replace("INFO", "WARNING")
                     + _fmt(CAPS, 0.85, "20.1", "1.5"))
    lines += [
        _line(39, "kv_cache_planning.py:1495",
              _fmt(FINAL_REDUCED, 131072, 30000, _fmt(FINAL_LEFT, "4.91 GiB GPU"))),
        _line(39, "kv_cache_utils.py:1169", _fmt(KV_SIZE, "GPU", "92,140", "30,000", 3.07)),
        _line(40, "extensible_kv_cache.py:537", _fmt(EXTENDED, 4320, 4.91)),
    ]
    return lines


def _scan(lines: list[str]) -> LogScanner:
    scanner = LogScanner(version="0.34.0")
    for line in lines:
        scanner.feed(line)
    return scanner


def test_the_final_size_and_length_win_over_the_reservation_and_the_tentative_fit():
    cap = _scan(startup_034()).capacity
    assert cap.available_kv_bytes == round(4.91 * GiB)  # "Extended KV cache to ... (4.91 GiB)"
    assert cap.reserved_kv_bytes == round(8.21 * GiB)  # "Available KV cache memory"
    assert cap.kv_sized_after_warmup is True
    assert cap.num_gpu_blocks == 4320
    assert cap.max_model_len == 30000 and cap.max_model_len_tentative == 32768
    assert cap.kv_cache_tokens == 92_140
    assert cap.requested_bytes == round(23.65 * GiB)


def test_the_reservation_alone_is_kept_apart_until_the_final_size_comes():
    scanner = _scan(startup_034()[:2])
    assert scanner.capacity.available_kv_bytes == round(8.21 * GiB)
    assert scanner.capacity.max_model_len is None  # a tentative fit is not the length
    assert scanner.capacity.max_model_len_tentative == 32768


def test_the_after_warmup_using_form_is_the_final_length():
    line = _line(39, "kv_cache_planning.py:1459",
                 "Auto-fit max_model_len: using max_model_len=32768, which fits in the KV cache "
                 "memory left after CUDA graph capture and warmup (4.91 GiB GPU).")
    assert _scan([*startup_034()[:2], line]).capacity.max_model_len == 32768


def test_the_withheld_warning_is_read():
    cap = _scan(startup_034(capped=True)).capacity
    assert cap.kv_withheld_bytes == round(1.5 * GiB)
    assert cap.gpu_memory_utilization == 0.85


def test_measurements_keep_the_final_size():
    scanner = _scan(startup_034())
    reported = ReportedCapacity().merged(
        "log", **ReportedCapacity.values_from_log(scanner.capacity.figures()))
    measured = measured_from_reported(reported, "launch")
    assert measured.available_kv_bytes == round(4.91 * GiB)
    assert measured.num_blocks == 4320 and measured.kv_cache_tokens == 92_140
    # the free memory the cache was sized from, for a later plan at another free figure
    assert measured.free_at_startup_bytes == round(21.65 * GiB)


def test_each_event_of_a_final_line_carries_the_final_figures():
    scanner = LogScanner(version="0.34.0")
    lines = startup_034()
    final = next(i for i, line in enumerate(lines) if "Memory after warmup" in line)
    for line in lines[:final]:
        scanner.feed(line)
    events = [e for e in scanner.feed(lines[final]) if isinstance(e, CapacityEvent)]
    assert events and events[0].available_kv_bytes == round(4.91 * GiB)
    assert events[0].reserved_kv_bytes == round(8.21 * GiB)


def test_all_memory_hint_gives_no_raise_the_utilization_advice():
    scanner = _scan(startup_034()[:1])
    found = [e for e in scanner.feed(
        P.format(41, "core.py:1510").replace("INFO", "ERROR")
        + _fmt(NO_KV, "the model and its activations")) if isinstance(e, failures.Failure)]
    assert found and found[0].kind == failures.NO_KV_MEMORY
    assert "raise" not in found[0].message and "all free GPU memory" in found[0].message


def test_an_033_no_memory_failure_still_advises_the_fraction():
    scanner = LogScanner(version="0.33.0")
    found = [e for e in scanner.feed(
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.")
        if isinstance(e, failures.Failure)]
    assert found and "raise the memory fraction" in found[0].message


def test_cache_config_info_without_a_utilization():
    # config/cache.py CacheConfig.metrics_info is str() of each field: "None" when unset
    sample = parse_metrics(
        'vllm:num_requests_running{model_name="m"} 0.0\n'
        'vllm:num_requests_waiting{model_name="m"} 0.0\n'
        'vllm:kv_cache_usage_perc{model_name="m"} 0.0\n'
        'vllm:generation_tokens_total{model_name="m"} 0.0\n'
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="64",gpu_memory_utilization="None",'
        'enable_extensible_kv_cache="True",kv_cache_memory_bytes="None",'
        'num_gpu_blocks="4320",kv_cache_size_tokens="92140"} 1.0\n', 1.0)
    assert sample.cache_config_utilization() is None
    assert sample.cache_config_flag("enable_extensible_kv_cache") is True
    assert sample.cache_config_capacity() == {
        "kv_cache_tokens": 92140, "num_blocks": 4320, "block_size": 64}


def test_the_final_cache_is_a_kv_cache_phase_after_graph_capture():
    from kvpilot.core.vllm.logparse import CAPTURING_CUDA_GRAPHS, KV_CACHE_ALLOCATED, PhaseEvent

    scanner = LogScanner(version="0.34.0")
    phases = []
    lines = startup_034()
    capture = _line(35, "model_runner.py:1216", "Graph capturing finished in 3 secs, took 0.50 GiB")
    for line in [*lines[:2], capture, *lines[2:]]:
        phases += [e.phase for e in scanner.feed(line) if isinstance(e, PhaseEvent)]
    assert phases == [KV_CACHE_ALLOCATED, CAPTURING_CUDA_GRAPHS, KV_CACHE_ALLOCATED]
    assert scanner.capacity.cudagraph_bytes == round(0.5 * GiB)
