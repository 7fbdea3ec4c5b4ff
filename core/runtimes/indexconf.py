"""Which package index pip or uv will install from, read from their own configuration.

The runtime installer passes ``--index-url`` only when the user gave one; otherwise pip or uv
use their configuration, and the reachability check must look at the same index:

* pip: ``PIP_INDEX_URL`` and its configuration files (``PIP_CONFIG_FILE``, the user's
  ``pip.conf``, the global and site files; ``[install]`` over ``[global]``), read by pip itself
  through ``pip config list`` of the interpreter the venv is made with (else ``pip`` on
  ``PATH``), not by a parser of ours; also ``no-index`` and ``find-links``.
* uv: ``UV_DEFAULT_INDEX`` / ``UV_INDEX_URL`` / ``UV_NO_INDEX`` / ``UV_FIND_LINKS``, then its
  ``uv.toml`` files in uv's order: ``UV_CONFIG_FILE`` alone when set; else the project's
  (``uv.toml``, or ``[tool.uv]`` of ``pyproject.toml``, in the working directory or above) over
  the user's (``$XDG_CONFIG_HOME/uv/uv.toml``, default ``~/.config``) over the system's
  (``$XDG_CONFIG_DIRS/uv/uv.toml``, default ``/etc/xdg``, and ``/etc/uv/uv.toml``);
  ``UV_NO_CONFIG`` skips the files. In a file, ``[pip] index-url`` (what ``uv pip`` reads
  first), the ``[[index]]`` marked ``default = true``, then the top-level ``index-url``.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvpilot.core.base.programs import run_for_output

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the tomli backport (a dependency there)
    import tomli as tomllib

PIP_CONFIG_TIMEOUT_S = 30.0
_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class IndexConfig:
    """What an installer's configuration says about where packages come from.

    ``index_url`` None: the installer's built-in default (PyPI). ``source`` names where
    ``index_url`` / ``no_index`` came from (an environment variable, a pip configuration key, a
    uv.toml path), "" when nothing was configured.
    """

    index_url: str | None = None
    no_index: bool = False
    find_links: tuple[str, ...] = ()
    source: str = ""


# --------------------------------------------------------------------------------------- pip
def _pip_commands(python: str | None) -> list[list[str]]:
    commands = []
    if python:
        commands.append([python, "-m", "pip"])
    for name in ("pip3", "pip"):
        found = shutil.which(name)
        if found:
            commands.append([found])
    return commands


def parse_pip_config_list(text: str) -> dict[str, str]:
    """``pip config list`` output (``section.key='value'`` lines) as a dict."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, raw = line.partition("=")
        if not sep or "." not in key:
            continue
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw.strip("'\"")
        values[key.strip()] = str(value)
    return values


def _pip_option(values: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """pip's own precedence: the environment, then ``[install]``, then ``[global]``."""
    for section in (":env:", "install", "global"):
        key = f"{section}.{name}"
        if key in values:
            return values[key], key
    return None


def pip_config(
    python: str | None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = PIP_CONFIG_TIMEOUT_S,
) -> IndexConfig:
    """The index settings pip would use (see the module docstring); ``python`` is the
    interpreter whose pip is asked first. Falls back to ``PIP_INDEX_URL`` alone when no pip
    answers."""
    environ = dict(os.environ if env is None else env)
    environ.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    environ.pop("PYTHONHOME", None)
    for command in _pip_commands(python):
        try:
            proc = run_for_output([*command, "config", "list"], timeout_s, environ)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode == 0:
            return _pip_index(parse_pip_config_list(proc.stdout))
    url = environ.get("PIP_INDEX_URL")
    return IndexConfig(index_url=url or None, source="PIP_INDEX_URL" if url else "")


def _pip_index(values: Mapping[str, str]) -> IndexConfig:
    index = _pip_option(values, "index-url")
    no_index = _pip_option(values, "no-index")
    links = _pip_option(values, "find-links")
    off = no_index is not None and no_index[0].strip().lower() in _TRUE
    source = ""
    if off and no_index is not None:
        source = _pip_source(no_index[1])
    elif index is not None:
        source = _pip_source(index[1])
    return IndexConfig(
        index_url=index[0].strip() or None if index else None,
        no_index=off,
        find_links=tuple(links[0].split()) if links else (),
        source=source,
    )


def _pip_source(key: str) -> str:
    """``PIP_INDEX_URL`` for an environment setting, else ``pip's configuration, <key>``."""
    section, _, name = key.partition(".")
    if section == ":env:":
        return f"PIP_{name.upper().replace('-', '_')}"
    return f"pip's configuration, {key}"


# ---------------------------------------------------------------------------------------- uv
def uv_config_files(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> list[Path]:
    """uv's configuration files that exist, highest precedence first."""
    environ = os.environ if env is None else env
    if environ.get("UV_NO_CONFIG", "").strip().lower() in _TRUE:
        return []
    explicit = environ.get("UV_CONFIG_FILE")
    if explicit:
        return [Path(explicit)]
    files: list[Path] = []
    here = (cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "uv.toml").is_file():
            files.append(folder / "uv.toml")
            break
        if (folder / "pyproject.toml").is_file() and _has_tool_uv(folder / "pyproject.toml"):
            files.append(folder / "pyproject.toml")
            break
    home = environ.get("HOME") or str(Path.home())
    user = Path(environ.get("XDG_CONFIG_HOME") or Path(home) / ".config") / "uv" / "uv.toml"
    if user.is_file():
        files.append(user)
    dirs = [d for d in environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep) if d]
    for system in [*(Path(d) / "uv" / "uv.toml" for d in dirs), Path("/etc/uv/uv.toml")]:
        if system.is_file():
            files.append(system)
            break
    return files


def _has_tool_uv(pyproject: Path) -> bool:
    try:
        return "uv" in _read_toml(pyproject).get("tool", {})
    except (OSError, tomllib.TOMLDecodeError):
        return False


def _read_toml(path: Path) -> dict[str, Any]:
    with open(path, "rb") as fh:
        return tomllib.load(fh)


def _uv_settings(path: Path) -> dict[str, Any]:
    data = _read_toml(path)
    if path.name == "pyproject.toml":
        tool = data.get("tool", {})
        data = tool.get("uv", {}) if isinstance(tool, dict) else {}
    return data if isinstance(data, dict) else {}


def _uv_file_index(settings: Mapping[str, Any]) -> tuple[str | None, bool | None, list[str]]:
    """(index URL, no-index, find-links) one uv configuration sets; None where it is silent."""
    pip = settings.get("pip") if isinstance(settings.get("pip"), dict) else {}
    assert isinstance(pip, dict)
    url: str | None = None
    for candidate in (pip.get("index-url"), _default_index(settings.get("index"))):
        if isinstance(candidate, str) and candidate:
            url = candidate
            break
    if url is None and isinstance(settings.get("index-url"), str):
        url = settings["index-url"] or None
    no_index = pip.get("no-index", settings.get("no-index"))
    links = pip.get("find-links", settings.get("find-links")) or []
    return (
        url,
        bool(no_index) if isinstance(no_index, bool) else None,
        [str(x) for x in links] if isinstance(links, list) else [],
    )


def _default_index(indexes: object) -> str | None:
    if not isinstance(indexes, list):
        return None
    for entry in indexes:
        if isinstance(entry, dict) and entry.get("default") is True:
            url = entry.get("url")
            return url if isinstance(url, str) else None
    return None


def uv_config(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> IndexConfig:
    """The index settings ``uv pip install`` would use (see the module docstring).

    A configuration file that is not valid TOML is skipped (uv itself would refuse it, and its
    install step then says so in the log).
    """
    environ = os.environ if env is None else env
    env_links = tuple(environ.get("UV_FIND_LINKS", "").replace(",", " ").split())
    if environ.get("UV_NO_INDEX", "").strip().lower() in _TRUE:
        return IndexConfig(no_index=True, find_links=env_links, source="UV_NO_INDEX")
    for name in ("UV_DEFAULT_INDEX", "UV_INDEX_URL"):
        if environ.get(name):
            return IndexConfig(index_url=environ[name], find_links=env_links, source=name)
    url: str | None = None
    no_index: bool | None = None
    links: list[str] = list(env_links)
    source = ""
    for path in uv_config_files(environ, cwd):
        try:
            file_url, file_no_index, file_links = _uv_file_index(_uv_settings(path))
        except (OSError, tomllib.TOMLDecodeError):
            continue
        if url is None and no_index is None and (file_url or file_no_index is not None):
            source = str(path)
        if url is None:
            url = file_url
        if no_index is None:
            no_index = file_no_index
        links.extend(file_links)
    return IndexConfig(
        index_url=url,
        no_index=bool(no_index),
        find_links=tuple(dict.fromkeys(links)),
        source=source,
    )


def installer_config(
    installer: str, python: str | None, env: Mapping[str, str] | None = None
) -> IndexConfig:
    """:func:`uv_config` for ``installer == "uv"``, else :func:`pip_config`."""
    return uv_config(env) if installer == "uv" else pip_config(python, env)

