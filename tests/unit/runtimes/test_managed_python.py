"""uv's managed Python where no interpreter on the machine fits the vLLM build: the installer's
choice (precheck) against uv's real download list, pointed at a local one with
``UV_PYTHON_DOWNLOADS_JSON_URL``. The download and install themselves run end to end in the
Debian 11 root (tests/packaging/test_old_base.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kvpilot.core.runtimes import managed_python
from kvpilot.core.runtimes.installer import RuntimeInstaller, find_uv
from kvpilot.core.runtimes.releases import RuntimeBuild

needs_uv = pytest.mark.skipif(find_uv() is None, reason="uv is not installed (pip install uv)")
GITHUB = "https://github.com/astral-sh/python-build-standalone/releases/download"


def _download_list(folder: Path, version: str) -> Path:
    major, minor, patch = (int(x) for x in version.split("."))
    name = f"cpython-{version}+20261201-x86_64-unknown-linux-gnu-install_only.tar.gz"
    entry = {
        "name": "cpython", "arch": {"family": "x86_64", "variant": None}, "os": "linux",
        "libc": "gnu", "major": major, "minor": minor, "patch": patch, "prerelease": "",
        "url": f"{GITHUB}/20261201/{name}", "sha256": None, "variant": None, "build": "20261201",
    }  # fmt: skip
    path = folder / "downloads.json"
    path.write_text(json.dumps({f"cpython-{version}-linux-x86_64-gnu": entry}))
    return path


@needs_uv
def test_no_fitting_python_on_the_machine_means_uvs_managed_one(
    home: Path,
    wheels: Path,
    release_for: Callable[..., RuntimeBuild],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The build wants exactly 3.10.9, which neither this interpreter nor anything on PATH
    (nothing: PATH is empty) is; uv lists a download for it, so the checks pass and the
    environment will be made with ``uv venv --managed-python``."""
    empty = home / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS_JSON_URL", str(_download_list(home, "3.10.9")))
    release = release_for("0.32.0", requires_python="==3.10.9")
    uv = find_uv()
    assert uv is not None
    assert managed_python.downloadable(uv, "==3.10.9") == ["3.10.9"]
    inst = RuntimeInstaller(release, installer="uv", no_index=True, find_links=[str(wheels)])
    assert inst.precheck() == []
    assert inst._managed == managed_python.ManagedPython("==3.10.9")
    argv = managed_python.venv_argv(uv, inst._managed, inst.target)
    assert argv[:5] == [uv, "venv", "--allow-existing", "--managed-python", "--python"]
    env = managed_python.uv_env(home / "data")
    assert env["UV_PYTHON_INSTALL_DIR"] == str(home / "data" / "runtimes" / "python")


@needs_uv
def test_nothing_to_download_either_is_the_python_problem(
    home: Path,
    wheels: Path,
    release_for: Callable[..., RuntimeBuild],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """uv has no download in the range: the check says what Python is needed, as before."""
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS_JSON_URL", str(_download_list(home, "3.10.9")))
    release = release_for("0.32.0", requires_python=">=3.99")
    problems = RuntimeInstaller(
        release, installer="uv", no_index=True, find_links=[str(wheels)]
    ).precheck()
    assert len(problems) == 1 and problems[0].startswith("vLLM 0.32.0 needs Python >=3.99")


def test_the_bundled_uv_is_looked_up_only_when_frozen() -> None:
    """Outside the packaged app there is no bundled uv."""
    assert managed_python.bundled_uv() is None
