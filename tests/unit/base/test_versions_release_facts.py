"""scripts/vllm_release_facts.py: what changed between two vLLM wheels among kvpilot's facts.

The fake wheels are zip files this test builds (a few ``vllm/*.py`` modules and a METADATA);
the real 0.33.0 and 0.34.0 wheels are used where they are already cached outside the clone
(``~/.cache/kvpilot-test-wheels`` or ``$KVPILOT_TEST_WHEELS``; nothing is downloaded here).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
from testpaths import REPO


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "vllm_release_facts", REPO / "scripts" / "vllm_release_facts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


facts = _script()

OLD = {
    "engine/arg_utils.py": '''
from vllm.config import CacheConfig
class EngineArgs:
    block_size: int | None = None
    gpu_memory_utilization: float = CacheConfig.gpu_memory_utilization
    max_num_seqs: int | None = None
    def add_cli_args(parser):
        parser.add_argument("--gpu-memory-utilization")
        parser.add_argument("--max-num-seqs")
        parser.add_argument("--old-flag")
''',
    "config/cache.py": '''
class CacheConfig:
    DEFAULT_BLOCK_SIZE: ClassVar[int] = 16
    gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)
    block_size: int = Field(default=None, gt=0)
''',
    "v1/worker/gpu_worker.py": '''
class Worker:
    def determine_available_memory(self):
        logger.info("Available KV cache memory: %s GiB", x)
        return self.requested - used
''',
    "v1/worker/gpu_model_runner.py": '''
def profile():
    logger.info("Estimated CUDA graph memory: %.2f GiB total", est)
''',
    "v1/core/kv_cache_planning.py": '''
def _auto_fit_max_model_len(cfg):
    logger.info("Auto-fit max_model_len: reduced from %d to %d to fit in available KV cache "
                "memory (%s)", a, b, c)
''',
    "v1/metrics/loggers.py": '''
NAMES = ["vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:gone_metric"]
''',
}

NEW = {
    **OLD,
    "engine/arg_utils.py": '''
from vllm.config import CacheConfig
class EngineArgs:
    block_size: int | None = None
    gpu_memory_utilization: float | None = CacheConfig.gpu_memory_utilization
    enable_extensible_kv_cache: bool | None = CacheConfig.enable_extensible_kv_cache
    max_num_seqs: int | None = None
    def add_cli_args(parser):
        parser.add_argument("--gpu-memory-utilization")
        parser.add_argument("--enable-extensible-kv-cache")
        parser.add_argument("--max-num-seqs")
        logger.warning("--max-num-seqs above 1024 is deprecated")
''',
    "config/cache.py": '''
class CacheConfig:
    DEFAULT_BLOCK_SIZE: ClassVar[int] = 64
    DEFAULT_GPU_MEMORY_UTILIZATION: ClassVar[float] = 0.92
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    block_size: int = Field(default=None, gt=0)
    enable_extensible_kv_cache: bool = Field(default=None)

    @property
    def resolved_gpu_memory_utilization(self):
        return self.gpu_memory_utilization or 1.0
''',
    "v1/worker/gpu_worker.py": '''
class Worker:
    def determine_available_memory(self):
        logger.info("Available KV cache memory: %s GiB", x)
        return self.requested - used - 0
''',
    "v1/worker/gpu_model_runner.py": None,
    "v1/worker/extensible_kv_cache.py": '''
def measure_kv_cache_bytes(*, init_free_memory, free_memory):
    logger.info("Extended KV cache to %d blocks (%.2f GiB).", n, g)
    return free_memory
''',
    "v1/core/kv_cache_planning.py": '''
def _auto_fit_max_model_len(cfg):
    logger.info("Auto-fit max_model_len: reduced from %d to %d to fit in available KV cache "
                "memory (%s)%s", a, b, c, note)
''',
    "v1/metrics/loggers.py": '''
NAMES = ["vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:new_metric"]
''',
}


def _wheel(tmp_path: Path, version: str, modules: dict[str, str | None]) -> Path:
    path = tmp_path / f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for rel, text in modules.items():
            if text is not None:
                zf.writestr(f"vllm/{rel}", text)
        zf.writestr(f"vllm-{version}.dist-info/METADATA",
                    f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
                    "Requires-Python: <3.15,>=3.11\n"
                    f"Requires-Dist: torch=={'2.14.0' if version == '9.2.0' else '2.13.0'}\n")
    return path


@pytest.fixture
def report(tmp_path: Path):
    old = facts.Wheel(_wheel(tmp_path, "9.1.0", OLD))
    new = facts.Wheel(_wheel(tmp_path, "9.2.0", NEW))
    return facts.compare(old, new)


def test_flags_defaults_and_deprecations(report) -> None:
    assert report.flags_added == ["--enable-extensible-kv-cache"]
    assert report.flags_removed == ["--old-flag"]
    assert report.metadata["requires torch"] == ("torch==2.13.0", "torch==2.14.0")
    # the EngineArgs default names a config field: it is resolved to that field's default
    old_util, new_util = report.engine_defaults["gpu_memory_utilization"]
    assert old_util.startswith("0.92") and new_util.startswith("None")
    assert report.engine_defaults["enable_extensible_kv_cache"][0] is None
    assert report.config_defaults["CacheConfig.DEFAULT_BLOCK_SIZE"] == ("16", "64")
    assert report.config_defaults["CacheConfig.gpu_memory_utilization"] == ("0.92", "None")
    assert "CacheConfig.block_size" not in report.config_defaults  # unchanged
    assert report.deprecations_added == ["--max-num-seqs above 1024 is deprecated"]


def test_log_lines_are_judged_by_the_scanners_own_rows(report) -> None:
    status = {(line["what"], line["releases"]): line["status"] for line in report.log_lines}
    by_what = {}
    for (what, _), st in status.items():
        by_what.setdefault(what, set()).add(st)
    assert by_what["available_kv"] == {"found"}
    assert by_what["cudagraph_estimate"] == {"gone"}
    assert by_what["kv_extended"] == {"new"}
    assert by_what["max_model_len_auto_fit"] == {"changed"}
    assert "absent" in by_what["v0_weights"]  # no template of either wheel prints it


def test_metrics_and_the_memory_path(report) -> None:
    assert report.metrics_read["vllm:kv_cache_usage_perc"] == "found"
    assert report.metrics_added == ["vllm:new_metric"]
    assert report.metrics_removed == ["vllm:gone_metric"]
    path = {e["function"]: e for e in report.memory_path}
    changed = path["Worker.determine_available_memory"]
    assert changed["status"] == "changed"
    assert "-        return self.requested - used" in changed["diff"]
    assert "+        return self.requested - used - 0" in changed["diff"]
    assert path["measure_kv_cache_bytes"]["status"] == "new"
    assert path["CacheConfig.resolved_gpu_memory_utilization"]["status"] == "new"
    assert path["_auto_fit_max_model_len"]["status"] == "changed"
    text = facts.render(report)
    assert "vLLM 9.1.0 -> 9.2.0" in text and "+ --enable-extensible-kv-cache" in text
    assert "~ CacheConfig.DEFAULT_BLOCK_SIZE: 16 -> 64" in text


def test_command_line_and_a_file_that_is_no_wheel(tmp_path: Path, capsys) -> None:
    old, new = _wheel(tmp_path, "9.1.0", OLD), _wheel(tmp_path, "9.2.0", NEW)
    assert facts.main([str(old), str(new), "--no-diff"]) == 0
    out = capsys.readouterr().out
    assert "== start-up memory path" in out and "@@" not in out
    bad = tmp_path / "bad.whl"
    bad.write_text("not a zip")
    assert facts.main([str(bad), str(new)]) == 2
    err = capsys.readouterr().err
    assert "not a readable wheel" in err and "Traceback" not in err


def _cached(version: str) -> Path | None:
    places = [Path(p) for p in os.environ.get("KVPILOT_TEST_WHEELS", "").split(os.pathsep) if p]
    places.append(Path.home() / ".cache" / "kvpilot-test-wheels")
    for place in places:
        found = sorted(place.glob(f"vllm-{version}-*.whl")) if place.is_dir() else []
        if found:
            return found[0]
    return None


def test_the_real_033_and_034_wheels() -> None:
    old, new = _cached("0.33.0"), _cached("0.34.0")
    if old is None or new is None:
        pytest.skip("the real vLLM 0.33.0 / 0.34.0 wheels are not cached in "
                    "~/.cache/kvpilot-test-wheels (pip download --no-deps vllm==0.34.0 there)")
    report = facts.compare(facts.Wheel(old), facts.Wheel(new))
    # the utilization default, the block size, the extensible-cache flag
    assert report.config_defaults["CacheConfig.gpu_memory_utilization"] == ("0.92", "None")
    assert report.config_defaults["CacheConfig.DEFAULT_BLOCK_SIZE"] == ("16", "64")
    assert "--enable-extensible-kv-cache" in report.flags_added
    assert report.flags_removed == []
    # the memory functions that changed or came
    path = {e["function"]: e["status"] for e in report.memory_path}
    assert path["measure_kv_cache_bytes"] == "new"
    assert path["finalize_extensible_kv_cache"] == "new"
    assert path["Worker.determine_available_memory"] == "changed"
    assert path["request_memory"] == "changed"
    status = {line["what"]: line["status"] for line in report.log_lines}
    assert status["kv_extended"] == "new" and status["kv_after_warmup"] == "new"
    assert status["cudagraph_estimate"] == "gone"
    assert report.metrics_read["vllm:cache_config_info"] == "found"
