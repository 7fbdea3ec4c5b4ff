"""Runtime discovery, version reading and the per-version flag table."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kvpilot.core.base.errors import CommandError, RuntimeNotFoundError
from kvpilot.core.runtimes import discovery as rt
from kvpilot.core.runtimes.discovery import (
    FlagSet,
    VllmRuntime,
    check_flags,
    cudagraph_estimate_in_budget,
    default_gpu_memory_utilization,
    discover,
    has_cache_config_tokens_metric,
    learn_flags,
    list_runtimes,
    parse_help_flags,
    parse_version_output,
    read_version,
    removed_flag_message,
    supports_max_model_len_auto,
)


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No real vllm on PATH, no KVPILOT_VLLM, caches and data under tmp."""
    monkeypatch.delenv("KVPILOT_VLLM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


# ---------------------------------------------------------------- versions


def test_version_dependent_defaults() -> None:
    assert default_gpu_memory_utilization("0.11.0") == 0.9
    assert default_gpu_memory_utilization("0.19.0") == 0.9
    assert default_gpu_memory_utilization("0.20.0") == 0.92
    assert default_gpu_memory_utilization("0.32.0+cpu") == 0.92
    assert not supports_max_model_len_auto("0.12.0")
    assert supports_max_model_len_auto("0.14.0")
    assert not cudagraph_estimate_in_budget("0.19.0")
    assert cudagraph_estimate_in_budget("0.20.0")
    assert not has_cache_config_tokens_metric("0.22.0")
    assert has_cache_config_tokens_metric("0.25.0")


def test_parse_version_output_skips_noise_lines() -> None:
    text = "Triton is installed, but doesn't include CPU backend. Disabling Triton.\n0.32.0+cpu\n"
    assert parse_version_output(text) == "0.32.0+cpu"
    assert parse_version_output("no version here\n") is None


# ---------------------------------------------------------------- discovery


def test_discover_configured_executable(make_fake_vllm, cache: Path) -> None:
    exe = make_fake_vllm("0.32.0+cpu")
    found = discover(str(exe), cache_dir=cache)
    assert found == VllmRuntime((str(exe),), "0.32.0+cpu", "profile", str(exe))
    assert found.serve_argv() == (str(exe), "serve")
    assert (found.release.number, found.release.variant) == ("0.32.0", "cpu")


def test_discover_configured_python_uses_module_entry(tmp_path: Path, cache: Path) -> None:
    # a python "interpreter" that prints a version when asked through the module entry point
    bindir = tmp_path / "pyenv" / "bin"
    bindir.mkdir(parents=True)
    py = bindir / "python3"
    py.write_text(
        f"#!{sys.executable}\nimport sys\n"
        "assert sys.argv[1:3] == ['-m', 'vllm.entrypoints.cli.main'], sys.argv\n"
        "print('0.33.0')\n"
    )
    py.chmod(0o755)
    found = discover(str(py), cache_dir=cache)
    assert found.argv_prefix == (str(py), "-m", "vllm.entrypoints.cli.main")
    assert found.version == "0.33.0"


def test_discover_accepts_environment_folder(make_fake_vllm, tmp_path: Path, cache: Path) -> None:
    exe = make_fake_vllm("0.30.0")
    found = discover(str(exe.parent.parent), cache_dir=cache)
    assert found.argv_prefix == (str(exe),)


def test_discover_order_env_then_path_then_managed(
    make_fake_vllm, tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    managed = make_fake_vllm("0.25.0", folder=tmp_path / "data" / "runtimes" / "v025" / "bin")
    on_path = make_fake_vllm("0.28.0", folder=tmp_path / "pathdir")
    from_env = make_fake_vllm("0.30.0", folder=tmp_path / "envdir")
    data = tmp_path / "data"

    assert discover(data_dir=data, cache_dir=cache).location == str(managed)
    monkeypatch.setenv("PATH", str(on_path.parent))
    found = discover(data_dir=data, cache_dir=cache)
    assert (found.source, found.version) == ("path", "0.28.0")
    monkeypatch.setenv("KVPILOT_VLLM", str(from_env))
    found = discover(data_dir=data, cache_dir=cache)
    assert (found.source, found.version) == ("env", "0.30.0")
    listed = list_runtimes(data_dir=data, cache_dir=cache)
    assert [r.source for r in listed] == ["env", "path", "managed"]
    assert [r.version for r in listed] == ["0.30.0", "0.28.0", "0.25.0"]


def test_discover_nothing_found_says_what_to_install(tmp_path: Path, cache: Path) -> None:
    with pytest.raises(RuntimeNotFoundError) as err:
        discover(data_dir=tmp_path / "nodata", cache_dir=cache)
    assert "pip install vllm" in str(err.value)
    assert "KVPILOT_VLLM" in str(err.value)


def test_broken_configured_runtime_is_reported_not_replaced(
    make_fake_vllm, tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = make_fake_vllm("0.28.0", folder=tmp_path / "pathdir")
    monkeypatch.setenv("PATH", str(good.parent))
    broken = make_fake_vllm("0.28.0", folder=tmp_path / "broken", version_rc=1)
    with pytest.raises(RuntimeNotFoundError, match="configured vLLM"):
        discover(str(broken), cache_dir=cache)
    with pytest.raises(RuntimeNotFoundError, match="does not exist"):
        discover(str(tmp_path / "missing" / "vllm"), cache_dir=cache)
    # a broken PATH entry is skipped in favour of the managed runtime
    monkeypatch.setenv("PATH", str(broken.parent))
    managed = make_fake_vllm("0.25.0", folder=tmp_path / "data" / "runtimes" / "a" / "bin")
    assert discover(data_dir=tmp_path / "data", cache_dir=cache).location == str(managed)


def test_version_is_cached_until_the_executable_changes(
    make_fake_vllm, call_count, cache: Path
) -> None:
    exe = make_fake_vllm("0.32.0+cpu")
    assert read_version((str(exe),), cache_dir=cache) == "0.32.0+cpu"
    assert read_version((str(exe),), cache_dir=cache) == "0.32.0+cpu"
    assert call_count(exe, "--version") == 1
    # reinstall: new content and mtime -> asked again
    make_fake_vllm("0.33.0")
    st = exe.stat()
    os.utime(exe, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000_000))
    assert read_version((str(exe),), cache_dir=cache) == "0.33.0"
    assert call_count(exe, "--version") == 2


def test_version_timeout_is_a_runtime_error(tmp_path: Path, cache: Path) -> None:
    slow = tmp_path / "vllm"
    slow.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(5)\n")
    slow.chmod(0o755)
    with pytest.raises(RuntimeNotFoundError, match="did not answer"):
        read_version((str(slow),), cache_dir=cache, timeout_s=0.5)


def test_a_runtime_program_that_cannot_run_names_itself_and_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "gone" / "vllm"
    with pytest.raises(RuntimeNotFoundError) as err:
        rt.ask_runtime([str(missing), "--version"], 5, silent="never", hint="install one")
    assert str(err.value).startswith(f"cannot run {missing} (")
    assert str(err.value).endswith("; install one")


def test_a_failed_runtime_program_is_told_in_its_last_words(tmp_path: Path) -> None:
    noisy = tmp_path / "vllm"
    noisy.write_text(f"#!{sys.executable}\nimport sys\nprint('out')\n"
                     "sys.stderr.write('warming up\\nImportError: no torch\\n')\nsys.exit(3)\n")
    noisy.chmod(0o755)
    proc = rt.ask_runtime([str(noisy)], 30, silent="never")
    assert proc.returncode == 3 and rt.last_words(proc) == "ImportError: no torch"
    quiet = tmp_path / "quiet"
    quiet.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(4)\n")
    quiet.chmod(0o755)
    assert rt.last_words(rt.ask_runtime([str(quiet)], 30, silent="never")) == "exit status 4"


# ---------------------------------------------------------------- flags


def test_parse_help_flags_reads_invocations_only(data_dir: Path) -> None:
    flags = parse_help_flags((data_dir / "serve_help_0.33_excerpt.txt").read_text())
    for flag in (
        "--max-model-len",
        "--gpu-memory-utilization",
        "--device-memory-utilization",
        "--kv-cache-dtype",
        "--enforce-eager",
        "--no-enforce-eager",
        "--enable-prefix-caching",
        "--disable-prefix-caching",
        "--no-enable-prefix-caching",
        "--no-disable-prefix-caching",
        "--enable-log-requests",
        "--disable-log-requests",
        "-tp",
        "-q",
        "-cc",
        "-h",
        "--help",
        "--hf-token",
    ):
        assert flag in flags, flag
    # mentioned in help prose, not a flag
    assert "--kv-cache-memory" not in flags
    assert "--help=ModelConfig" not in flags
    assert "--swap-space" not in flags
    # a BooleanOptionalAction pair gets no invented --disable-X
    assert "--disable-enforce-eager" not in flags


@pytest.fixture
def flags033(data_dir: Path) -> FlagSet:
    return FlagSet(
        "0.33.0", parse_help_flags((data_dir / "serve_help_0.33_excerpt.txt").read_text())
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["/m", "--max-model-len", "4096"],
        ["/m", "--max_model_len=4096"],  # underscores
        ["/m", "--max-model", "4096"],  # unambiguous abbreviation
        ["/m", "--kv-cache-memory=8G"],  # abbreviation of --kv-cache-memory-bytes
        ["/m", "-O3", "-tp", "1"],  # short option with attached value
        ["/m", "-cc.cudagraph_mode=PIECEWISE"],  # dotted key
        ["/m", "--limit-mm-per-prompt.image", "2"],
        ["/m", "--max-model-len", "-1"],  # negative number is a value
        ["/m", "--no-enable-prefix-caching"],  # hidden negation
    ],
)
def test_check_flags_accepts_what_vllm_accepts(flags033: FlagSet, argv: list[str]) -> None:
    check_flags(flags033, argv)


def test_check_flags_names_replacement_of_removed_flag(flags033: FlagSet) -> None:
    with pytest.raises(CommandError) as err:
        check_flags(flags033, ["/m", "--swap-space", "4"])
    msg = str(err.value)
    assert "--swap-space was removed in vLLM 0.18.0" in msg
    assert "--kv-cache-memory-bytes" in msg
    with pytest.raises(CommandError, match="--runner pooling"):
        check_flags(flags033, ["/m", "--task", "generate"])
    with pytest.raises(CommandError, match=r"before vLLM 0\.11"):
        check_flags(flags033, ["/m", "--num-scheduler-steps", "8"])


def test_check_flags_unknown_and_ambiguous(flags033: FlagSet) -> None:
    with pytest.raises(CommandError, match=r"vLLM 0.33.0 has no flag --max-model-length"):
        check_flags(flags033, ["/m", "--max-model-length", "4"])
    with pytest.raises(CommandError, match="did you mean --enforce-eager"):
        check_flags(flags033, ["/m", "--enforce-eagre"])
    with pytest.raises(CommandError, match="ambiguous"):
        check_flags(flags033, ["/m", "--max-num", "4"])


def test_removed_flag_message_mentions_readded_version() -> None:
    msg = removed_flag_message("--disable_log_requests", "0.32.0")
    assert msg.startswith("--disable-log-requests was removed in vLLM 0.17.0")
    assert "0.33.0" in msg
    assert msg.endswith(".")


def test_learn_flags_runs_help_once_per_version(
    make_fake_vllm, call_count, cache: Path, tmp_path: Path
) -> None:
    exe = make_fake_vllm("0.33.0")
    runtime = VllmRuntime((str(exe),), "0.33.0", "profile", str(exe))
    first = learn_flags(runtime, cache_dir=cache)
    second = learn_flags(runtime, cache_dir=cache)
    assert first == second
    assert "--max-model-len" in first.flags
    assert call_count(exe, "serve --help=all") == 1
    # check_flags with a runtime learns (from the cache) and refuses a removed flag
    with pytest.raises(CommandError, match=r"0\.18\.0"):
        check_flags(runtime, ["/m", "--swap-space", "4"])


def test_learn_flags_refuses_help_without_flags(make_fake_vllm, cache: Path) -> None:
    exe = make_fake_vllm("0.31.0", help_text="usage: nothing useful\n")
    runtime = VllmRuntime((str(exe),), "0.31.0", "profile", str(exe))
    with pytest.raises(RuntimeNotFoundError, match="could not read the flags"):
        learn_flags(runtime, cache_dir=cache)


def test_default_cache_location_is_platform_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert rt._cache_dir(None) == tmp_path / "xdg-cache" / "kvpilot" / "vllm"


# ---------------------------------------------------------------- the real 0.32.0 help


@pytest.fixture
def flags032(data_dir: Path) -> FlagSet:
    text = (data_dir / "serve_help_0.32.0_cpu.txt").read_text()
    return FlagSet("0.32.0+cpu", parse_help_flags(text))


def test_real_032_help_flag_table(flags032: FlagSet) -> None:
    for flag in (
        "--max-model-len",
        "--kv-cache-memory-bytes",
        "--gpu-memory-utilization",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--served-model-name",
        "--enforce-eager",
        "--load-format",
        "-tp",
    ):
        assert flag in flags032.flags, flag
    assert "--swap-space" not in flags032.flags
    assert "--disable-log-requests" not in flags032.flags  # gone 0.17.0-0.32.x
    assert len(flags032.flags) > 300


def test_real_032_accepts_the_cpu_test_command(flags032: FlagSet) -> None:
    check_flags(
        flags032,
        [
            "/data/tinymodel",
            "--host",
            "127.0.0.1",
            "--port",
            "8765",
            "--max-model-len",
            "1024",
            "--max-num-seqs",
            "4",
            "--dtype",
            "float32",
            "--enforce-eager",
            "--kv-cache-memory-bytes",
            "64M",
            "-O3",
            "--load-format",
            "dummy",
        ],
    )


def test_real_032_refuses_disable_log_requests_with_history(flags032: FlagSet) -> None:
    with pytest.raises(CommandError) as err:
        check_flags(flags032, ["/m", "--disable-log-requests"])
    assert "removed in vLLM 0.17.0" in str(err.value)
    assert "accepted again from 0.33.0" in str(err.value)
    assert "vLLM 0.32.0+cpu does not accept it" in str(err.value)
