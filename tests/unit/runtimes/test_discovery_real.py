"""Discovery, version and flag table against the real vLLM CPU install the tests use."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from e2e.conftest import vllm_executable_for_tests

from kvpilot.core.base.errors import CommandError
from kvpilot.core.runtimes.discovery import check_flags, discover, learn_flags
from kvpilot.core.vllm.command import LaunchSpec, build_command

pytestmark = pytest.mark.e2e

@pytest.fixture(scope="module")
def real_vllm() -> Path:
    exe, why_not = vllm_executable_for_tests()
    if exe is None or not exe.exists():
        reason = why_not or f"{exe} does not exist"
        if os.environ.get("CI") == "true":
            pytest.fail(f"the real vLLM CPU runtime is missing: {reason}", pytrace=False)
        pytest.skip(f"no vLLM CPU runtime: {reason} (tests/run installs it)")
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


def test_real_vllm_parses_the_limit_mm_argv(real_vllm: Path) -> None:
    """The ``--limit-mm-per-prompt`` value kvpilot writes for this release is what its own
    argument parser reads as "no images, no videos" (and the old pair syntax is refused)."""
    import json
    import subprocess

    from kvpilot.core.vllm.command import build_argv_tail

    tail = build_argv_tail(LaunchSpec(model="m", limit_mm_per_prompt=0), "0.32.0+cpu")
    value = tail[tail.index("--limit-mm-per-prompt") + 1]
    script = (
        "import json, sys\n"
        "from vllm.engine.arg_utils import EngineArgs\n"
        "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
        "p = EngineArgs.add_cli_args(FlexibleArgumentParser())\n"
        "print(json.dumps(p.parse_args(['--limit-mm-per-prompt', sys.argv[1]])"
        ".limit_mm_per_prompt))\n"
    )
    python = real_vllm.parent / "python"
    out = subprocess.run([str(python), "-c", script, value], capture_output=True, text=True,
                         timeout=300, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"image": 0, "video": 0}
    old = subprocess.run([str(python), "-c", script, "image=0,video=0"], capture_output=True,
                         text=True, timeout=300)
    assert old.returncode != 0
