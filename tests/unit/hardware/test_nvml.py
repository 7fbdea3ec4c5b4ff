"""The NVML choke point: field errors -> None (logged once), lost GPU raised, init errors typed."""

from __future__ import annotations

import logging
import sys
import types

import pytest
from fakes import pynvml_stub

from kvpilot.core.hardware import nvml as nvml_mod
from kvpilot.core.hardware.nvml import GpuLostError, Nvml, NvmlInitError
from kvpilot.core.hardware.problems import ProblemKind


def _one_gpu(**fields: object) -> pynvml_stub.RecordedNvml:
    return pynvml_stub.make({"devices": [{"name": "NVIDIA GeForce RTX 4090", **fields}]})


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("LIBRARY_NOT_FOUND", ProblemKind.LIBRARY_NOT_FOUND),
        ("DRIVER_NOT_LOADED", ProblemKind.DRIVER_NOT_LOADED),
        ("LIB_RM_VERSION_MISMATCH", ProblemKind.VERSION_MISMATCH),
        ("NO_PERMISSION", ProblemKind.NO_PERMISSION),
        ("UNKNOWN", ProblemKind.UNKNOWN),
    ],
)
def test_init_failures_become_typed_problems_with_an_action(code: str, kind: ProblemKind) -> None:
    fake = pynvml_stub.make({"init_error": code, "devices": []})
    with pytest.raises(NvmlInitError) as info:
        Nvml(fake).open()
    problem = info.value.problem
    assert problem.kind is kind
    assert problem.message and problem.action
    assert code in (problem.detail or "")
    assert problem.one_line() == f"{problem.message}: {problem.action}"


def test_oserror_from_the_binding_counts_as_missing_library() -> None:
    module = types.SimpleNamespace(NVMLError=RuntimeError)

    def boom() -> None:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    module.nvmlInit = boom
    with pytest.raises(NvmlInitError) as info:
        Nvml(module).open()
    assert info.value.problem.kind is ProblemKind.LIBRARY_NOT_FOUND


def test_not_supported_field_is_none_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    fake = _one_gpu(errors={"nvmlDeviceGetPowerUsage": "NOT_SUPPORTED"})
    caplog.set_level(logging.INFO, logger="kvpilot.hardware")
    with Nvml(fake) as nv:
        h = nv.handle(0)
        missing: list[str] = []
        for _ in range(3):
            assert nv.call("nvmlDeviceGetPowerUsage", h, field="power", missing=missing) is None
    assert missing == ["power", "power", "power"]
    lines = [r for r in caplog.records if "power" in r.getMessage()]
    assert len(lines) == 1
    assert "not available" in lines[0].getMessage()


@pytest.mark.parametrize("code", ["NO_PERMISSION", "FUNCTION_NOT_FOUND", "NOT_FOUND", "NO_DATA"])
def test_other_per_field_errors_are_none(code: str) -> None:
    fake = _one_gpu(errors={"nvmlDeviceGetName": code})
    with Nvml(fake) as nv:
        assert nv.call("nvmlDeviceGetName", nv.handle(0)) is None


def test_function_missing_from_binding_is_none() -> None:
    fake = _one_gpu()
    with Nvml(fake) as nv:
        missing: list[str] = []
        assert nv.call("nvmlDeviceGetSomethingNew", nv.handle(0), missing=missing) is None
        assert missing == ["nvmlDeviceGetSomethingNew"]


def test_library_mismatch_error_is_none() -> None:
    fake = _one_gpu()

    def old_driver(handle: object) -> None:
        raise fake.NVMLLibraryMismatchError("use a versioned function")

    fake.nvmlDeviceGetComputeRunningProcesses = old_driver  # type: ignore[method-assign]
    with Nvml(fake) as nv:
        assert nv.call("nvmlDeviceGetComputeRunningProcesses", nv.handle(0)) is None


@pytest.mark.parametrize("code", ["GPU_IS_LOST", "RESET_REQUIRED"])
def test_lost_gpu_raises(code: str) -> None:
    fake = _one_gpu(errors={"nvmlDeviceGetName": code})
    with Nvml(fake) as nv, pytest.raises(GpuLostError) as info:
        nv.call("nvmlDeviceGetName", nv.handle(0))
    assert info.value.problem.kind is ProblemKind.GPU_LOST


def test_bytes_are_decoded() -> None:
    fake = _one_gpu()
    fake.nvmlDeviceGetName = lambda _h: b"NVIDIA GeForce RTX 4090"  # type: ignore[method-assign]
    with Nvml(fake) as nv:
        assert nv.call("nvmlDeviceGetName", nv.handle(0)) == "NVIDIA GeForce RTX 4090"


def test_sessions_nest_and_close_releases_init() -> None:
    fake = _one_gpu()
    a, b = Nvml(fake).open(), Nvml(fake).open()
    assert fake.init_count == 2
    a.close()
    a.close()  # idempotent
    assert fake.init_count == 1
    b.close()
    assert fake.init_count == 0


def test_import_pynvml_gives_nvidias_bindings() -> None:
    module = nvml_mod.import_pynvml()
    assert callable(module.nvmlInitWithFlags)


def test_shadowing_pynvml_package_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    impostor = types.ModuleType("pynvml")
    impostor.__file__ = "/site-packages/pynvml/__init__.py"
    monkeypatch.setitem(sys.modules, "pynvml", impostor)
    with pytest.raises(NvmlInitError) as info:
        nvml_mod.import_pynvml()
    assert info.value.problem.kind is ProblemKind.BINDINGS_BROKEN
    assert "nvidia-ml-py" in info.value.problem.action


def test_env_variable_selects_one_shared_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(nvml_mod.FAKE_ENV, "rtx4090-desktop")
    first, second = nvml_mod.default_module(), nvml_mod.default_module()
    assert first is second
    assert nvml_mod.is_fake(first)
    assert nvml_mod.describe_source(first) == "replay of rtx4090-desktop"


def test_without_env_the_real_pynvml_is_default() -> None:
    module = nvml_mod.default_module()
    assert not nvml_mod.is_fake(module)
    assert nvml_mod.describe_source(module) == "nvml"


def test_a_commands_fake_nvml_option_comes_before_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(nvml_mod.FAKE_ENV, raising=False)
    assert nvml_mod.option_replay(None) is None  # the real library is the caller's default
    monkeypatch.setenv(nvml_mod.FAKE_ENV, "rtx3090-idle")
    from_env = nvml_mod.option_replay(None)
    from_option = nvml_mod.option_replay("rtx4090-desktop")
    assert from_env is not None and "rtx3090-idle" in str(from_env.source)
    assert from_option is not None and "rtx4090-desktop" in str(from_option.source)
