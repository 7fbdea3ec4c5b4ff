"""The log scanner on real vLLM 0.32 CPU logs and GPU-format excerpts of 0.11 and 0.33."""

from __future__ import annotations

from pathlib import Path

import pytest
from testpaths import DATA as TESTS_DATA

from kvpilot.core.base import failures as fk
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.units import GiB
from kvpilot.core.vllm.logevents import (
    CapacityEvent,
    Event,
    PhaseEvent,
    ReadyHintEvent,
    ShutdownEvent,
    StatsEvent,
)
from kvpilot.core.vllm.logparse import (
    CAPTURING_CUDA_GRAPHS,
    COMPILING,
    KV_CACHE_ALLOCATED,
    LOADING_WEIGHTS,
    PHASES,
    PROFILING,
    RESOLVING,
    STARTING_API,
    LogScanner,
    classify_exit,
    gib_to_bytes,
    parse_line,
)

DATA = TESTS_DATA / "vllm_logs"
CPU = DATA / "cpu_0.32"
GPU = DATA / "gpu_excerpts"


def scan(path: Path, **kwargs: object) -> tuple[LogScanner, list[Event]]:
    scanner = LogScanner(**kwargs)  # type: ignore[arg-type]
    events: list[Event] = []
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            events += scanner.feed(line)
    return scanner, events


def of_type(events: list[Event], cls: type) -> list:
    return [e for e in events if isinstance(e, cls)]


# ------------------------------------------------------------------ classification table
CASES = [
    # file, kind (None = no failure), estimated_max_model_len, a phrase of the message
    (CPU / "startup.log", None, None, None),
    (CPU / "quiet_eager1.log", None, None, None),
    (CPU / "auto_dtype_kv64m.log", None, None, None),
    (CPU / "warm_sigterm.log", None, None, None),
    (CPU / "warm_SIGINT.log", None, None, None),
    (CPU / "warm_SIGKILL.log", None, None, None),
    (CPU / "orphan_sigkill.log", None, None, None),
    (CPU / "kv_fp8_serving.log", None, None, None),  # EngineDeadError only after shutdown
    (CPU / "kv_pressure.log", None, None, None),
    (CPU / "fail_g_head_dim_16.log", None, None, None),
    (CPU / "fail_a_maxlen_gt_maxpos.log", fk.MAX_MODEL_LEN_ABOVE_MODEL, None, "limit of 2,048"),
    (
        CPU / "fail_b1_kvbytes_tiny.log",
        fk.KV_CACHE_TOO_SMALL,
        128,
        "The 1,024-token context needs more KV cache than the 0.0 GiB available; "
        "vLLM estimates 128 tokens would fit.",
    ),
    (CPU / "fail_b2_kvspace_0.log", fk.NO_KV_MEMORY, None, "No memory is left"),
    (CPU / "fail_b3_kvspace_100.log", fk.FREE_MEMORY_BELOW_UTILIZATION, None, "100.0 GiB"),
    (CPU / "fail_b4_kv_auto.log", fk.FREE_MEMORY_BELOW_UTILIZATION, None, "21.09 of 23.54"),
    (CPU / "fail_b5_util_0.01.log", fk.NO_KV_MEMORY, None, "(-0.37 GiB left for it)"),
    (CPU / "fail_c_nonexistent_path.log", fk.MODEL_NOT_FOUND, None, "'/data/no_such_model'"),
    (CPU / "fail_c2_hub_id_offline.log", fk.MODEL_NOT_FOUND, None, "offline mode"),
    (CPU / "fail_c3_hub_id_online_nonet.log", fk.MODEL_NOT_FOUND, None, "could not be reached"),
    (
        CPU / "model_folder_removed_loading.log",
        fk.MODEL_NOT_FOUND,
        None,
        "The model folder '/models/tiny copy' was removed (or moved) while vLLM was loading it",
    ),
    (
        CPU / "model_folder_unreadable_loading.log",
        fk.MODEL_NOT_FOUND,
        None,
        "no readable weights in the model folder '/models/tiny copy' while loading it",
    ),
    (CPU / "fail_d_port_in_use.log", fk.PORT_IN_USE, None, "Port 8765"),
    (CPU / "fail_e_unknown_flag.log", fk.UNKNOWN_FLAG, None, "--no-such-flag"),
    (CPU / "hd16_request.log", fk.ENGINE_DIED, None, "head_dim=16"),
    (CPU / "worker_kill.log", fk.ENGINE_DIED, None, "exit code -9"),
    (GPU / "oom_loading_0.33.log", fk.CUDA_OOM_LOADING, None, "loading the model weights"),
    (GPU / "oom_graphs_0.33.log", fk.CUDA_OOM_GRAPHS, None, "CUDA graphs"),
    (GPU / "oom_serving_0.33.log", fk.CUDA_OOM_SERVING, None, "while serving"),
    (GPU / "free_memory_below_util_0.33.log", fk.FREE_MEMORY_BELOW_UTILIZATION, None, "20.12"),
    (GPU / "fp8_kv_sm86_0.33.log", fk.UNSUPPORTED_KV_DTYPE, None, "compute capability 8.6"),
    (GPU / "fp8_kv_sm86_0.11.log", fk.UNSUPPORTED_KV_DTYPE, None, "8.9 or newer"),
    (GPU / "quantization_capability_0.33.log", fk.UNSUPPORTED_QUANTIZATION, None, "8.0"),
    (GPU / "gated_repo_0.33.log", fk.GATED_REPO, None, "meta-llama/Llama-3.1-8B-Instruct"),
    (GPU / "kv_too_small_0.11.log", fk.KV_CACHE_TOO_SMALL, 28960, "28,960 tokens"),
    (GPU / "startup_0.11.log", None, None, None),
    (GPU / "summary_line_0.33.log", None, None, None),
]


def test_every_log_file_is_in_the_table() -> None:
    listed = {path for path, *_ in CASES}
    present = {p for p in DATA.rglob("*.log")}
    assert present == listed


def test_every_failure_kind_is_listed_once() -> None:
    """``ALL_KINDS`` names each kind constant of ``failures`` (a kind added but not listed is
    caught here) and nothing else."""
    constants = [v for k, v in vars(fk).items() if k.isupper() and isinstance(v, str)]
    assert sorted(constants) == sorted(fk.ALL_KINDS)
    assert len(set(fk.ALL_KINDS)) == len(fk.ALL_KINDS)


@pytest.mark.parametrize(
    ("path", "kind", "estimate", "phrase"), CASES, ids=[p.name for p, *_ in CASES]
)
def test_log_classification(
    path: Path, kind: str | None, estimate: int | None, phrase: str | None
) -> None:
    scanner, events = scan(path, version="0.32.0")
    failure = scanner.failure
    if kind is None:
        assert failure is None, failure
        assert not of_type(events, Failure)
        return
    assert failure is not None
    assert failure.kind == kind
    assert failure.kind in fk.ALL_KINDS
    assert failure.estimated_max_model_len == estimate
    assert phrase is not None and phrase in failure.message
    # one user-facing sentence, no traceback
    assert failure.message.endswith(".") and "\n" not in failure.message
    assert "Traceback" not in failure.message
    # the event stream ends with the failure the property reports
    assert of_type(events, Failure)[-1] == failure
    assert failure.line


def test_kv_too_small_details_from_real_log() -> None:
    scanner, _ = scan(CPU / "fail_b1_kvbytes_tiny.log")
    assert scanner.failure is not None
    assert dict(scanner.failure.details) == {
        "max_model_len": 1024,
        "needed_kv_bytes": 0,
        "available_kv_bytes": 0,
        "estimated_max_model_len": 128,
    }


def test_root_cause_wins_over_engine_core_initialization_failed() -> None:
    _, events = scan(CPU / "fail_b2_kvspace_0.log")
    failures = of_type(events, Failure)
    assert [f.kind for f in failures] == [fk.NO_KV_MEMORY]
    # the generic line alone is classified as unknown with the root error quoted
    alone = LogScanner()
    alone.feed("ValueError: Unsupported head size 72 for this backend")
    (event,) = alone.feed(
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}"
    )
    assert isinstance(event, Failure)
    assert event.kind == fk.UNKNOWN
    assert "Unsupported head size 72" in event.message


def test_free_memory_details() -> None:
    scanner, _ = scan(GPU / "free_memory_below_util_0.33.log")
    assert scanner.failure is not None
    d = scanner.failure.details
    assert d["free_bytes"] == gib_to_bytes("20.12")
    assert d["total_bytes"] == gib_to_bytes("23.53")
    assert d["gpu_memory_utilization"] == 0.92
    assert d["requested_bytes"] == gib_to_bytes("21.65")
    cpu, _ = scan(CPU / "fail_b3_kvspace_100.log")
    assert cpu.failure is not None
    assert cpu.failure.details["requested_for"] == "kv_cache"
    assert cpu.failure.details["requested_bytes"] == 100 * GiB


def test_max_model_len_above_model_numbers() -> None:
    scanner, _ = scan(CPU / "fail_a_maxlen_gt_maxpos.log")
    assert scanner.failure is not None
    assert dict(scanner.failure.details) == {"max_model_len": 4096, "model_max_model_len": 2048}
    assert scanner.failure.message == (
        "The requested 4,096-token context is longer than the model's limit of 2,048 tokens."
    )


def test_unknown_flag_names_removal_with_runtime_version() -> None:
    scanner = LogScanner(version="0.32.0")
    (event,) = scanner.feed("vllm: error: unrecognized arguments: --swap-space 4")
    assert isinstance(event, Failure)
    assert event.kind == fk.UNKNOWN_FLAG
    assert event.details["flags"] == ["--swap-space"]
    assert "removed in vLLM 0.18.0" in event.message


@pytest.mark.parametrize(
    ("line", "flag", "value"),
    [
        (
            "vllm serve: error: argument --max-model-len: invalid "
            "human_readable_int_or_auto value: '32x'",
            "--max-model-len",
            "32x",
        ),
        (
            "vllm serve: error: argument --gpu-memory-utilization/--device-memory-utilization: "
            "invalid float value: 'abc'",
            "--gpu-memory-utilization",
            "abc",
        ),
        (
            "vllm serve: error: argument --dtype: invalid choice: 'fp8' (choose from 'auto', "
            "'bfloat16', 'float', 'float16', 'float32', 'half')",
            "--dtype",
            "fp8",
        ),
    ],
)
def test_argparse_bad_values(line: str, flag: str, value: str) -> None:
    (event,) = LogScanner().feed(line)
    assert isinstance(event, Failure)
    assert (event.kind, event.details["flag"], event.details["value"]) == (
        fk.BAD_FLAG_VALUE,
        flag,
        value,
    )


def test_pydantic_range_error_names_the_field() -> None:
    scanner = LogScanner()
    lines = [
        "Traceback (most recent call last):",
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig",
        "gpu_memory_utilization",
        "  Input should be less than or equal to 1 [type=less_than_equal, input_value=1.5, "
        "input_type=float]",
    ]
    events = [e for line in lines for e in scanner.feed(line)]
    (event,) = events
    assert isinstance(event, Failure)
    assert event.kind == fk.BAD_FLAG_VALUE
    assert event.message == (
        "vLLM rejected gpu_memory_utilization=1.5: input should be less than or equal to 1."
    )
    assert event.details["flag"] == "--gpu-memory-utilization"


def test_oom_kind_depends_on_what_happened_so_far() -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB."
    loading = LogScanner()
    loading.feed("(EngineCore pid=1) INFO 11-29 10:00:00 [x.py:1] Starting to load model /m...")
    assert loading.feed(oom)[0].kind == fk.CUDA_OOM_LOADING  # type: ignore[union-attr]
    profiling = LogScanner()
    profiling.feed(
        "(EngineCore pid=1) INFO 11-29 10:00:00 [x.py:1] "
        "Model loading took 1.0 GiB memory and 2.0 seconds"
    )
    assert profiling.feed(oom)[0].kind == fk.CUDA_OOM_GRAPHS  # type: ignore[union-attr]
    serving = LogScanner()
    serving.mark_ready()
    assert serving.feed(oom)[0].kind == fk.CUDA_OOM_SERVING  # type: ignore[union-attr]
    assert serving.failure is not None
    assert serving.failure.details["tried_to_allocate_bytes"] == 20 * (1 << 20)


# ------------------------------------------------------------------ phases, capacity, stats
def test_phases_of_the_real_cpu_start() -> None:
    _, events = scan(CPU / "startup.log")
    phases = [e.phase for e in of_type(events, PhaseEvent)]
    assert phases == [RESOLVING, LOADING_WEIGHTS, KV_CACHE_ALLOCATED, STARTING_API]
    hints = of_type(events, ReadyHintEvent)
    assert [h.url for h in hints] == ["http://127.0.0.1:8765", None]
    assert "Application startup complete." in hints[1].line
    shutdowns = of_type(events, ShutdownEvent)
    assert len(shutdowns) == 1 and shutdowns[0].requested


def test_phases_of_a_gpu_start_in_0_11_format() -> None:
    _, events = scan(GPU / "startup_0.11.log")
    assert [e.phase for e in of_type(events, PhaseEvent)] == [
        RESOLVING,
        LOADING_WEIGHTS,
        PROFILING,
        COMPILING,
        KV_CACHE_ALLOCATED,
        CAPTURING_CUDA_GRAPHS,
        STARTING_API,
    ]
    assert set(PHASES) >= {e.phase for e in of_type(events, PhaseEvent)}


def test_capacity_exact_from_real_startup_log() -> None:
    scanner, events = scan(CPU / "startup.log")
    assert scanner.capacity.figures() == {
        "weights_load_s": 0.01,
        "available_kv_bytes": 1 * GiB,
        "total_bytes": gib_to_bytes("23.54"),
        "kv_cache_tokens": 1_048_576,
        "max_concurrency": 1024.0,
        "max_concurrency_at_len": 1024,
        "max_model_len": 1024,
    }
    kv_line = [e for e in of_type(events, CapacityEvent) if e.kv_cache_tokens is not None]
    assert len(kv_line) == 1
    assert kv_line[0].figures() == {
        "kv_cache_tokens": 1_048_576,
        "max_concurrency": 1024.0,
        "max_concurrency_at_len": 1024,
    }


def test_capacity_from_gpu_summary_line() -> None:
    scanner, _ = scan(GPU / "summary_line_0.33.log")
    c = scanner.capacity
    assert c.weights_bytes == gib_to_bytes("14.99")
    assert c.weights_load_s == 6.412345
    assert c.available_kv_bytes == gib_to_bytes("4.72")
    assert c.kv_cache_tokens == 38_656
    assert (c.max_concurrency, c.max_concurrency_at_len) == (4.72, 8192)
    assert c.cudagraph_bytes == gib_to_bytes("0.49")
    assert c.cudagraph_estimate_bytes == gib_to_bytes("0.51")
    assert c.free_at_startup_bytes == gib_to_bytes("23.1")
    assert c.total_bytes == gib_to_bytes("23.53")
    assert c.gpu_memory_utilization == 0.92
    assert c.requested_bytes == gib_to_bytes("21.65")
    assert c.consumed_bytes == gib_to_bytes("15.42")
    assert c.activation_peak_bytes == 1 * GiB
    assert c.non_torch_bytes == gib_to_bytes("15.42") - gib_to_bytes("14.99")
    assert c.kv_cache_memory_fit_bytes == 5_068_061_409
    assert c.kv_cache_memory_full_bytes == 6_001_454_284


def test_capacity_in_0_11_two_line_format() -> None:
    scanner, _ = scan(GPU / "startup_0.11.log")
    c = scanner.capacity
    assert c.weights_bytes == gib_to_bytes("14.2498")
    assert c.available_kv_bytes == gib_to_bytes("5.31")
    assert c.kv_cache_tokens == 99_456
    assert (c.max_concurrency, c.max_concurrency_at_len) == (3.04, 32768)
    assert c.cudagraph_bytes == gib_to_bytes("0.53")


def test_stats_lines() -> None:
    _, events = scan(CPU / "startup.log")
    stats = of_type(events, StatsEvent)
    assert len(stats) == 11
    first = stats[0]
    assert (first.prompt_tokens_per_s, first.generation_tokens_per_s) == (10.6, 51.3)
    assert (first.running, first.waiting, first.preemptions) == (4, 4, 0)
    assert first.kv_usage_frac == pytest.approx(0.001)
    assert first.prefix_hit_frac == 0.0
    _, gpu = scan(GPU / "oom_serving_0.33.log")
    (busy,) = of_type(gpu, StatsEvent)
    assert (busy.running, busy.waiting, busy.preemptions) == (64, 12, 3)
    assert busy.kv_usage_frac == pytest.approx(0.973)
    assert busy.prefix_hit_frac == pytest.approx(0.415)
    no_hit = LogScanner().feed(
        "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1.0 "
        "tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 2.0%"
    )
    assert isinstance(no_hit[0], StatsEvent) and no_hit[0].prefix_hit_frac is None


# ------------------------------------------------------------------ line formats
def test_parse_line_formats() -> None:
    new = parse_line(
        "(EngineCore pid=30836) INFO 11-29 08:10:34 [core.py:402] init engine took 0.72 s\n"
    )
    assert (new.process, new.pid, new.level, new.file) == ("EngineCore", 30836, "INFO", "core.py")
    assert new.message == "init engine took 0.72 s"
    old = parse_line(
        "\x1b[1;36m(EngineCore_DP0 pid=7080)\x1b[0;0m WARNING 10-02 12:00:31 [a.py:9] hi"
    )
    assert (old.process, old.pid, old.level, old.message) == (
        "EngineCore_DP0",
        7080,
        "WARNING",
        "hi",
    )
    coloured = parse_line("\x1b[32mINFO\x1b[0m 10-02 12:00:31 [a.py:9] plain 0.11 line")
    assert (coloured.process, coloured.level, coloured.message) == (None, "INFO", "plain 0.11 line")
    raw = parse_line("INFO:     Application startup complete.")
    assert (raw.process, raw.level, raw.message) == (
        None,
        None,
        "INFO:     Application startup complete.",
    )
    bar = parse_line("Loading: 10%\rLoading: 50%\rLoading: 100%\r")
    assert bar.message == "Loading: 100%"


def test_ansi_coloured_failure_line_is_classified() -> None:
    line = (
        "\x1b[1;36m(EngineCore_DP0 pid=7)\x1b[0;0m \x1b[31mERROR\x1b[0m 10-02 12:00:00 "
        "[core.py:1] ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine."
    )
    scanner = LogScanner()
    scanner.feed(line)
    assert scanner.failure is not None and scanner.failure.kind == fk.NO_KV_MEMORY


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "\n",
        "\x00\x01\x02",
        "(((((",
        "(APIServer pid=abc) INFO nonsense",
        "KV cache size: lots tokens",
        "Maximum concurrency for 1,0,2,4 tokens per request: 1.0.0x",
        "Engine 000: Avg prompt throughput: x tokens/s",
        "x" * 100_000,
        "To serve at least one request with the model's max seq len (abc)",
        "\ud800 broken surrogate",
        "\x1b[",
    ],
)
def test_garbage_lines_give_no_event_and_no_exception(garbage: str) -> None:
    assert LogScanner().feed(garbage) == []


def test_engine_dead_noise_after_requested_shutdown_is_ignored() -> None:
    scanner = LogScanner()
    scanner.mark_ready()
    (event,) = scanner.feed(
        "(APIServer pid=1) INFO 11-29 08:45:48 [launcher.py:254] [shutdown] API server: "
        "shutdown triggered"
    )
    assert isinstance(event, ShutdownEvent) and event.requested
    assert (
        scanner.feed(
            "(APIServer pid=1) ERROR 11-29 08:45:48 [async_llm.py:906] "
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."
        )
        == []
    )
    assert scanner.failure is None
    assert classify_exit(0, scanner, was_ready=True) is None


# ------------------------------------------------------------------ exit classification
def test_classify_exit() -> None:
    flag, _ = scan(CPU / "fail_e_unknown_flag.log", version="0.32.0")
    exit2 = classify_exit(2, flag, was_ready=False)
    assert exit2 is not None and exit2.kind == fk.UNKNOWN_FLAG
    assert exit2.details["flags"] == ["--no-such-flag"]

    died, _ = scan(CPU / "hd16_request.log")
    exit0 = classify_exit(0, died, was_ready=True)
    assert exit0 is not None and exit0.kind == fk.ENGINE_DIED

    clean, _ = scan(CPU / "warm_sigterm.log")
    assert classify_exit(0, clean, was_ready=True) is None

    mystery = LogScanner()
    mystery.feed("Traceback (most recent call last):")
    mystery.feed('  File "x.py", line 1, in <module>')
    mystery.feed("ImportError: libcudart.so.12: cannot open shared object file")
    exit1 = classify_exit(1, mystery, was_ready=False)
    assert exit1 is not None and exit1.kind == fk.UNKNOWN
    assert "libcudart.so.12" in exit1.message
    assert exit1.message.startswith("vLLM exited with status 1")

    killed = classify_exit(-9, LogScanner(), was_ready=True)
    assert killed is not None and killed.kind == fk.ENGINE_DIED and "SIGKILL" in killed.message

    # an OOM classified during start-up is a serving OOM when the server had been ready
    late = LogScanner()
    late.feed("(EngineCore pid=1) INFO 11-29 10:00:00 [x.py:1] Starting to load model /m...")
    late.feed("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    relabelled = classify_exit(1, late, was_ready=True)
    assert relabelled is not None and relabelled.kind == fk.CUDA_OOM_SERVING
    assert classify_exit(None, LogScanner(), was_ready=False) is None


def test_access_log_lines_are_never_events() -> None:
    scanner = LogScanner()
    line = 'INFO:     127.0.0.1:39546 - "GET /v1/CUDA out of memory HTTP/1.1" 404 Not Found'
    assert scanner.feed(line) == []
    assert scanner.failure is None


SINGLE_LINES = [
    (
        "ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve "
        "even a single token. Try increasing `gpu_memory_utilization`.",
        fk.NO_KV_MEMORY,
        "No memory is left",
    ),
    (
        "TimeoutError: Timed out waiting for engine core processes to start. This is often "
        "caused by slow weight loading for large models. Waited 600s (configured by "
        "VLLM_ENGINE_READY_TIMEOUT_S).",
        fk.STARTUP_TIMEOUT,
        "did not finish starting",
    ),
    (
        "vllm: error: ambiguous option: --max-num could match --max-num-seqs, "
        "--max-num-batched-tokens",
        fk.UNKNOWN_FLAG,
        "--max-num is ambiguous",
    ),
    (
        "Hint: --task is not a vllm serve option. For embedding, reranking, or reward models, "
        "use --runner pooling.",
        fk.UNKNOWN_FLAG,
        "--runner pooling",
    ),
    (
        "RuntimeError: Quantization scheme is not supported for the current GPU. Min "
        "capability: 89. Current capability: 86.",
        fk.UNSUPPORTED_QUANTIZATION,
        "compute capability 8.9 but this GPU has 8.6",
    ),
    (
        "  Value error, Invalid kv_cache_dtype: 'bogus'. Valid values are: ['auto', 'fp8']",
        fk.BAD_FLAG_VALUE,
        "--kv-cache-dtype bogus",
    ),
    (
        "  Value error, Unknown quantization method: bogus. Must be one of ['awq', 'fp8'].",
        fk.BAD_FLAG_VALUE,
        "--quantization bogus",
    ),
    (
        "ValueError: No valid attention backend found for cuda with head_size: 128, "
        "dtype: torch.bfloat16, kv_cache_dtype: fp8_e5m2. Reasons: {FLASH_ATTN: "
        "[kv_cache_dtype not supported]}.",
        fk.UNSUPPORTED_KV_DTYPE,
        "KV cache dtype",
    ),
    (
        "ValueError: bfloat16 KV cache is not supported on Tesla T4 (compute capability 7.5); "
        "bfloat16 requires SM80+. Re-run with --kv-cache-dtype float16.",
        fk.UNSUPPORTED_KV_DTYPE,
        "--kv-cache-dtype float16",
    ),
    (
        "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. Repository Not "
        "Found for url: https://huggingface.co/api/models/nobody/nothing.",
        fk.MODEL_NOT_FOUND,
        "does not exist on the Hugging Face hub",
    ),
    (
        "OSError: [Errno 98] Address already in use",
        fk.PORT_IN_USE,
        "Port 8123 is already in use",
    ),
]


@pytest.mark.parametrize(("line", "kind", "phrase"), SINGLE_LINES)
def test_single_failure_lines(line: str, kind: str, phrase: str) -> None:
    scanner = LogScanner(version="0.33.0", port=8123)
    events = scanner.feed(line)
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, Failure)
    assert event.kind == kind
    assert phrase in event.message
    assert event.message.endswith(".")


def test_0_11_ready_hint_url() -> None:
    _, events = scan(GPU / "startup_0.11.log")
    urls = [e.url for e in of_type(events, ReadyHintEvent)]
    assert urls == ["http://127.0.0.1:8011", None]


def test_later_failure_refines_generic_engine_death() -> None:
    # on a serving OOM the traceback's root cause follows "EngineCore encountered a fatal error"
    scanner, events = scan(GPU / "oom_serving_0.33.log")
    kinds = [e.kind for e in of_type(events, Failure)]
    assert kinds == [fk.ENGINE_DIED, fk.CUDA_OOM_SERVING]
    assert scanner.failure is not None and scanner.failure.kind == fk.CUDA_OOM_SERVING
