"""LaunchSpec -> argv + env: exact lists, secrets kept out of argv, validation, ports."""

from __future__ import annotations

import re
import shlex
import socket
from pathlib import Path

import pytest

from kvpilot.core.base.errors import CommandError
from kvpilot.core.base.model_spec import ModelSpec, Quantization
from kvpilot.core.base.plan import PlanInputs
from kvpilot.core.base.units import GiB, MiB
from kvpilot.core.runtimes.discovery import FlagSet, VllmRuntime, parse_help_flags
from kvpilot.core.vllm.command import (
    LaunchSpec,
    build_argv_tail,
    build_command,
    find_free_port,
    parse_extra_args,
    port_is_free,
)

BASE_ENV = {
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_LOGGING_LEVEL": "INFO",
    "VLLM_LOGGING_COLOR": "0",
    "NO_COLOR": "1",
    "PYTHONUNBUFFERED": "1",
}


def _spec_model(quant: Quantization | None = None) -> ModelSpec:
    return ModelSpec(
        model_id="Qwen/Qwen2.5-7B-Instruct",
        architecture="Qwen2ForCausalLM",
        model_type="qwen2",
        num_hidden_layers=28,
        hidden_size=3584,
        intermediate_size=18944,
        num_attention_heads=28,
        num_key_value_heads=4,
        head_dim=128,
        vocab_size=152064,
        max_position_embeddings=32768,
        quantization=quant,
    )


@pytest.fixture
def flags033(data_dir: Path) -> FlagSet:
    return FlagSet(
        "0.33.0", parse_help_flags((data_dir / "serve_help_0.33_excerpt.txt").read_text())
    )


def test_minimal_spec_exact_argv_and_env() -> None:
    cmd = build_command(LaunchSpec(model="/models/tiny"))
    assert cmd.argv == ("vllm", "serve", "/models/tiny", "--host", "127.0.0.1", "--port", "8000")
    assert cmd.env == BASE_ENV
    assert cmd.base_url == "http://127.0.0.1:8000"
    assert cmd.served_model_name == "/models/tiny"


def test_cpu_test_plan_exact_argv() -> None:
    spec = LaunchSpec(
        model="/data/tinymodel",
        served_model_name="tiny",
        port=8765,
        max_model_len=1024,
        max_num_seqs=4,
        kv_cache_memory_bytes=64 * MiB,
        dtype="float32",
        enforce_eager=True,
        hf_offline=True,
    )
    runtime = VllmRuntime(("/venv/bin/vllm",), "0.32.0+cpu", "env", "/venv/bin/vllm")
    cmd = build_command(spec, runtime, flags=_all_flags(spec))
    assert cmd.argv == (
        "/venv/bin/vllm",
        "serve",
        "/data/tinymodel",
        "--host",
        "127.0.0.1",
        "--port",
        "8765",
        "--served-model-name",
        "tiny",
        "--dtype",
        "float32",
        "--max-model-len",
        "1024",
        "--max-num-seqs",
        "4",
        "--kv-cache-memory-bytes",
        "67108864",
        "--enforce-eager",
    )
    assert cmd.env == {**BASE_ENV, "HF_HUB_OFFLINE": "1"}
    assert cmd.served_model_name == "tiny"


def _all_flags(spec: LaunchSpec) -> FlagSet:
    """A flag table that knows exactly the flags ``spec`` produces (checks pass)."""
    return FlagSet("test", frozenset(t for t in build_argv_tail(spec) if t.startswith("--")))


def test_4090_plan_from_plan_inputs_exact_argv(flags033: FlagSet) -> None:
    inputs = PlanInputs(
        model=_spec_model(),
        gpu_total_bytes=24 * GiB,
        max_model_len=16384,
        max_num_seqs=8,
        max_num_batched_tokens=4096,
        gpu_memory_utilization=0.88,
        kv_cache_dtype="fp8",
    )
    spec = LaunchSpec.from_plan(inputs, "Qwen/Qwen2.5-7B-Instruct", port=8001)
    cmd = build_command(spec, flags=flags033)
    assert cmd.argv == (
        "vllm",
        "serve",
        "Qwen/Qwen2.5-7B-Instruct",
        "--host",
        "127.0.0.1",
        "--port",
        "8001",
        "--max-model-len",
        "16384",
        "--max-num-seqs",
        "8",
        "--max-num-batched-tokens",
        "4096",
        "--gpu-memory-utilization",
        "0.88",
        "--kv-cache-dtype",
        "fp8",
    )


def test_from_plan_quantization_only_when_needed_and_prefix_off() -> None:
    awq = Quantization(method="awq", bits=4, group_size=128, cli_flag_needed=False)
    gguf_like = Quantization(method="fp8", cli_flag_needed=True)
    base = {"gpu_total_bytes": 24 * GiB}
    spec = LaunchSpec.from_plan(PlanInputs(model=_spec_model(awq), **base), "m")
    assert spec.quantization is None
    spec = LaunchSpec.from_plan(PlanInputs(model=_spec_model(gguf_like), **base), "m")
    assert spec.quantization == "fp8"
    spec = LaunchSpec.from_plan(
        PlanInputs(model=_spec_model(), enable_prefix_caching=False, enforce_eager=True, **base),
        "m",
        load_format="dummy",
    )
    cmd = build_command(spec)
    assert cmd.argv == (
        "vllm",
        "serve",
        "m",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--load-format",
        "dummy",
        "--enforce-eager",
        "--no-enable-prefix-caching",
    )


def test_api_key_goes_to_env_never_argv() -> None:
    spec = LaunchSpec(model="m", host="0.0.0.0", api_key="sk-secret-123", hf_token="hf_tok")
    cmd = build_command(spec)
    assert all("sk-secret-123" not in a for a in cmd.argv)
    assert cmd.env["VLLM_API_KEY"] == "sk-secret-123"
    assert cmd.env["HF_TOKEN"] == "hf_tok"
    text = cmd.redacted()
    assert "sk-secret-123" not in text and "hf_tok" not in text
    assert "VLLM_API_KEY='***'" in text
    assert "sk-secret" not in repr(spec) and "sk-secret" not in repr(cmd)
    # the redacted command is valid shell: it splits back into env assignments + argv
    parts = shlex.split(text)
    assert parts[parts.index("vllm") :] == list(cmd.argv)
    assert all(re.fullmatch(r"[A-Z_]+=.*", p) for p in parts[: parts.index("vllm")])


def test_env_additions() -> None:
    spec = LaunchSpec(
        model="m",
        cuda_visible_devices="1",
        hf_home="/hf",
        logging_level="debug",
        extra_env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"},
    )
    env = build_command(spec).env
    assert env == {
        **BASE_ENV,
        "VLLM_LOGGING_LEVEL": "DEBUG",
        "CUDA_VISIBLE_DEVICES": "1",
        "HF_HOME": "/hf",
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1",
    }


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (LaunchSpec(model="m", host="0.0.0.0"), "API key"),
        (LaunchSpec(model="m", host="192.168.1.5"), "API key"),
        (LaunchSpec(model="m", port=0), "out of range"),
        (LaunchSpec(model="m", port=70000), "out of range"),
        (LaunchSpec(model=""), "no model"),
        (LaunchSpec(model="--model"), "looks like a flag"),
        (LaunchSpec(model="m", gpu_memory_utilization=1.2), r"\(0, 1\]"),
        (LaunchSpec(model="m", max_model_len=0), "max_model_len"),
        (LaunchSpec(model="m", max_model_len="huge"), "positive integer"),  # type: ignore[arg-type]
        (LaunchSpec(model="m", extra_env={"VLLM_API_KEY": "x"}), "set by kvpilot"),
        (LaunchSpec(model="m", logging_level="LOUD"), "logging level"),
        (LaunchSpec(model="m", extra_args=("--max-model-len", "9")), "context length"),
    ],
)
def test_invalid_specs_raise_command_error(spec: LaunchSpec, match: str) -> None:
    with pytest.raises(CommandError, match=match):
        build_command(spec)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_hosts_need_no_key(host: str) -> None:
    assert build_command(LaunchSpec(model="m", host=host)).host == host


def test_ipv6_base_url() -> None:
    assert (
        build_command(LaunchSpec(model="m", host="::1", port=9000)).base_url == "http://[::1]:9000"
    )


def test_max_model_len_auto_needs_0_14() -> None:
    old = VllmRuntime(("vllm",), "0.12.0", "path", "vllm")
    new = VllmRuntime(("vllm",), "0.14.0", "path", "vllm")
    spec = LaunchSpec(model="m", auto_max_model_len=True)
    with pytest.raises(CommandError, match=r"0\.14"):
        build_command(spec, old, flags=_all_flags(spec))
    assert build_command(spec, new, flags=_all_flags(spec)).argv[-2:] == ("--max-model-len", "auto")


def test_parse_extra_args_shell_like_without_shell() -> None:
    args = parse_extra_args("--chat-template '/my dir/t.jinja' --seed 3 ; rm -rf /")
    assert args == ("--chat-template", "/my dir/t.jinja", "--seed", "3", ";", "rm", "-rf", "/")
    with pytest.raises(CommandError, match="cannot split"):
        parse_extra_args("--chat-template 'unclosed")


@pytest.mark.parametrize(
    ("text", "setting"),
    [
        ("--port 9000", "port setting"),
        ("--max_model_len=4096", "context length"),
        ("--api-key abc", "API key"),
        ("-tp 2", "tensor parallel"),
        ("--kv-cache-memory 8G", "KV cache size"),  # abbreviation of a managed flag
        ("--disable-prefix-caching", "prefix caching"),
    ],
)
def test_extra_args_may_not_repeat_managed_flags(text: str, setting: str) -> None:
    with pytest.raises(CommandError, match=setting):
        parse_extra_args(text)


def test_extra_args_checked_against_runtime_flags(flags033: FlagSet) -> None:
    assert parse_extra_args("--trust-remote-code --generation-config vllm", flags=flags033) == (
        "--trust-remote-code",
        "--generation-config",
        "vllm",
    )
    with pytest.raises(CommandError, match=r"0\.18\.0"):
        parse_extra_args("--swap-space 4", flags=flags033)
    # an abbreviation resolving to a managed flag is caught through the flag table
    with pytest.raises(CommandError, match="GPU memory fraction"):
        parse_extra_args("--device-memory-util 0.5", flags=flags033)
    # build_command refuses the same through extra_args
    spec = LaunchSpec(model="m", extra_args=("--swap-space", "4"))
    with pytest.raises(CommandError, match="removed"):
        build_command(spec, flags=flags033)


def test_port_probe_and_free_port_search() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert not port_is_free("127.0.0.1", port)
        other = find_free_port("127.0.0.1", port)
        assert other != port
        assert port_is_free("127.0.0.1", other)
    assert port_is_free("127.0.0.1", port)
    with pytest.raises(CommandError, match="out of range"):
        port_is_free("127.0.0.1", 0)


@pytest.fixture
def flags032_cpu(data_dir: Path) -> FlagSet:
    """The flag table of the recorded ``vllm serve --help=all`` of the CPU build 0.32.0."""
    return FlagSet(
        "0.32.0+cpu",
        parse_help_flags((data_dir / "serve_help_0.32.0_cpu.txt").read_text()),
    )


def test_polled_endpoints_leave_the_access_log_where_the_runtime_can(
    flags032_cpu: FlagSet, flags033: FlagSet
) -> None:
    spec = LaunchSpec(model="/m", port=8001)
    argv = build_command(spec, flags=flags032_cpu).argv
    at = argv.index("--disable-access-log-for-endpoints")
    assert argv[at + 1] == "/health,/metrics"
    # a flag table without the filter (an older vLLM would refuse it), or none at all
    assert "--disable-access-log-for-endpoints" not in build_command(spec, flags=flags033).argv
    assert "--disable-access-log-for-endpoints" not in build_command(spec).argv


@pytest.mark.parametrize(
    "extra",
    [
        ("--disable-uvicorn-access-log",),
        ("--disable-access-log-for-endpoints", "/ping"),
        ("--disable-access-log-for-endpoints=/ping",),
        ("--disable_uvicorn_access_log",),  # underscores, as argparse also accepts
    ],
)
def test_users_own_access_log_flag_wins(flags032_cpu: FlagSet, extra: tuple[str, ...]) -> None:
    spec = LaunchSpec(model="/m", port=8001, extra_args=extra)
    argv = build_command(spec, flags=flags032_cpu).argv
    assert argv[-len(extra) :] == extra
    assert argv.count("/health,/metrics") == 0
