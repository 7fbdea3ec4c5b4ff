"""Serving at login: the window as an XDG autostart entry, or a headless systemd user unit.

Two ways to have a profile back after a reboot without a terminal:

* **window**: ``$XDG_CONFIG_HOME/autostart/kvpilot.desktop`` opens ``kvpilot gui --profile NAME``
  when the desktop session starts (freedesktop.org's autostart specification);
* **headless**: ``$XDG_CONFIG_HOME/systemd/user/kvpilot-serve.service`` runs ``kvpilot serve
  --profile NAME`` (or ``kvpilot front --profile A --profile B ...``: several profiles behind one
  address) under the user's systemd manager, enabled for ``default.target`` (the link
  ``default.target.wants/kvpilot-serve.service``, what ``systemctl --user enable`` makes), and
  restarts it after a failure: ``Restart=on-failure`` every :data:`RESTART_SEC` s, at most
  :data:`START_LIMIT_BURST` starts in :data:`START_LIMIT_INTERVAL_SEC` s (no restart storm), no
  restart after a user error (exit status 2: an unknown profile, a damaged settings file).

The executable is the packaged one when kvpilot runs frozen, else the installed ``kvpilot``
(:func:`kvpilot.core.app.desktop.launcher_argv`). Secrets never enter these files: the API key and
the Hugging Face token stay in the keyring (or the 0600 settings file) and ``kvpilot serve
--profile`` reads them itself; the unit's environment carries only kvpilot's folder and
secrets-store choices (:data:`PASSED_ENV`), never a key.

:func:`enable`, :func:`disable` and :func:`status` are the one core of ``kvpilot autostart`` and
of the settings dialog's "Start at login" section.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kvpilot.core.base import paths
from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.base.programs import run_for_output

AUTOSTART_NAME = "kvpilot.desktop"
UNIT_NAME = "kvpilot-serve.service"
WANTS_DIR = "default.target.wants"
#: seconds between a failed serve and the next start (vLLM's GPU memory needs a moment to free)
RESTART_SEC = 30
#: at most this many starts within :data:`START_LIMIT_INTERVAL_SEC`, then systemd gives up
START_LIMIT_BURST = 4
START_LIMIT_INTERVAL_SEC = 900
#: how long the stop may take (kvpilot stops the vLLM tree itself: TERM, then KILL)
TIMEOUT_STOP_SEC = 90
#: kvpilot's own settings passed on to the unit (folders, secrets store): never a secret
PASSED_ENV: tuple[str, ...] = (
    "KVPILOT_CONFIG_DIR", "KVPILOT_DATA_DIR", "KVPILOT_SECRETS", "HF_HOME",
)
MODE_WINDOW = "window"
MODE_HEADLESS = "headless"
#: systemctl calls may hang on a sick bus; never longer than this (s)
SYSTEMCTL_TIMEOUT_S = 15.0


class AutostartError(KvpilotError):
    """An autostart file could not be written or removed, or the profile name is unusable."""


def xdg_config_home() -> Path:
    """``$XDG_CONFIG_HOME`` or ``~/.config``."""
    env = os.environ.get("XDG_CONFIG_HOME")
    return Path(env) if env else Path.home() / ".config"


@dataclass(frozen=True)
class AutostartPaths:
    """Where the two autostart files live under one XDG config folder."""

    config_home: Path

    @property
    def desktop_file(self) -> Path:
        return self.config_home / "autostart" / AUTOSTART_NAME

    @property
    def unit_file(self) -> Path:
        return self.config_home / "systemd" / "user" / UNIT_NAME

    @property
    def wants_link(self) -> Path:
        return self.config_home / "systemd" / "user" / WANTS_DIR / UNIT_NAME


@dataclass(frozen=True)
class AutostartStatus:
    """What starts at login: ``mode`` (``window``, ``headless`` or None), the ``profile`` its
    files name, the files, and the unit's state in the user manager (``active``, ``failed``,
    ...; None where no systemd user manager answers)."""

    mode: str | None
    profile: str | None
    desktop_file: Path | None
    unit_file: Path | None
    unit_state: str | None = None
    note: str = ""
    #: the profiles a headless front serves (empty: one profile, ``kvpilot serve``)
    front: tuple[str, ...] = ()

    def describe(self) -> str:
        """One sentence for a person."""
        if self.mode is None:
            return "nothing of kvpilot starts at login"
        what = ("the kvpilot window opens" if self.mode == MODE_WINDOW
                else "kvpilot serves headless (systemd user unit)")
        state = f"; the unit is {self.unit_state} now" if self.unit_state else ""
        note = f"; {self.note}" if self.note else ""
        if self.front:
            names = ", ".join(repr(p) for p in self.front)
            return f"at login {what} a front for profiles {names}{state}{note}"
        return f"at login {what} with profile {self.profile!r}{state}{note}"


def _check_name(profile: str) -> str:
    name = profile.strip()
    if not name:
        raise AutostartError("give the profile to start at login (--profile NAME)")
    if not name.isprintable():
        raise AutostartError(f"profile name {profile!r} has a line break or control character")
    return name


def desktop_quote(arg: str) -> str:
    """One argument of a desktop entry's ``Exec`` key (its quoting rules; ``%`` doubled)."""
    arg = arg.replace("%", "%%")
    if re.fullmatch(r"[A-Za-z0-9_./+:=@%-]+", arg):
        return arg
    quoted = re.sub(r'([\\"`$])', r"\\\1", arg)  # the quoting rule: \ before \ " ` $
    return '"' + quoted.replace("\\", "\\\\") + '"'  # then the string rule doubles each \


def systemd_quote(arg: str) -> str:
    """One argument of a unit's ``ExecStart``: double-quoted C-style, ``%`` and ``$`` escaped
    so systemd expands neither specifiers nor variables in it."""
    if re.fullmatch(r"[A-Za-z0-9_./+:=@-]+", arg):
        return arg
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def _env_assignment(name: str, value: str) -> str:
    """One ``Environment=`` assignment, quoted as systemd reads it (no specifier expanded)."""
    text = f"{name}={value}"
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{escaped}"'


def desktop_entry_text(argv: list[str], profile: str) -> str:
    """The autostart entry that opens the window with ``profile``."""
    exec_line = " ".join(desktop_quote(a) for a in [*argv, "gui", "--profile", profile])
    return "\n".join([
        "[Desktop Entry]",
        "Type=Application",
        "Version=1.5",
        "Name=kvpilot",
        f"Comment=Open kvpilot with profile {profile} at login",
        f"Exec={exec_line}",
        f"TryExec={argv[0]}",
        "Icon=kvpilot",
        "Terminal=false",
        "X-GNOME-Autostart-enabled=true",
        f"X-kvpilot-Profile={profile}",
        "",
    ])


def front_argv(profiles: tuple[str, ...], port: int | None = None) -> list[str]:
    """The ``kvpilot front`` arguments that serve ``profiles`` behind one address."""
    args = ["front"]
    for name in profiles:
        args += ["--profile", name]
    return args + (["--port", str(port)] if port is not None else [])


def unit_text(argv: list[str], profile: str, environ: dict[str, str] | None = None, *,
              front: tuple[str, ...] = (), front_port: int | None = None) -> str:
    """The systemd user unit that serves ``profile`` headless and restarts it on failure;
    ``environ`` (default: this process's) gives the :data:`PASSED_ENV` values to pass. With
    ``front`` (profile names, ``profile`` first among them) it runs ``kvpilot front`` for them
    instead, on ``front_port`` (None: the front's default)."""
    env = os.environ if environ is None else environ
    command = front_argv(front, front_port) if front else ["serve", "--profile", profile]
    exec_start = " ".join(systemd_quote(a) for a in [*argv, *command])
    what = (f"serve profiles {', '.join(front)} behind one address" if front
            else f"serve profile {profile}")
    lines = [
        "[Unit]",
        f"Description=kvpilot: {what.replace('%', '%%')} with vLLM",
        f"StartLimitIntervalSec={START_LIMIT_INTERVAL_SEC}",
        f"StartLimitBurst={START_LIMIT_BURST}",
        "",
        "[Service]",
        "Type=exec",
        f"ExecStart={exec_start}",
        "Restart=on-failure",
        f"RestartSec={RESTART_SEC}",
        # 2 is a user error (unknown profile, damaged settings): a restart cannot mend it
        "RestartPreventExitStatus=2",
        # kvpilot stops the vLLM tree itself on SIGTERM; the rest is killed after the timeout
        "KillMode=mixed",
        f"TimeoutStopSec={TIMEOUT_STOP_SEC}",
        "Environment=PYTHONUNBUFFERED=1",
    ]
    lines += [f"Environment={_env_assignment(name, env[name])}"
              for name in PASSED_ENV if env.get(name)]
    lines += ["", "[Install]", "WantedBy=default.target", f"X-kvpilot-Profile={profile}"]
    if front:
        lines.append(f"X-kvpilot-Front={chr(9).join(front)}")
    return "\n".join([*lines, ""])


def _profile_in(path: Path, key: str = "X-kvpilot-Profile") -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(f"{key}="):
            return line.split("=", 1)[1]
    return None


def _front_in(path: Path | None) -> tuple[str, ...]:
    found = _profile_in(path, "X-kvpilot-Front") if path is not None else None
    return tuple(found.split("\t")) if found else ()


def _systemctl(*args: str) -> subprocess.CompletedProcess[str] | None:
    """``systemctl --user ARGS``, or None where there is no systemctl or no user manager."""
    exe = shutil.which("systemctl")
    if exe is None:
        return None
    try:
        return run_for_output([exe, "--user", *args], SYSTEMCTL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _reload() -> str:
    """Tell a running user manager that the unit changed; a note when none answered."""
    done = _systemctl("daemon-reload")
    if done is None or done.returncode != 0:
        return ("no systemd user manager answered; the unit takes effect at the next login "
                "(run `systemctl --user daemon-reload` to load it now)")
    return ""


def _write(path: Path, text: str, mode: int) -> None:
    try:
        paths.atomic_write_text(path, text, mode=mode)
    except OSError as exc:
        raise AutostartError(
            f"cannot write {path}: {exc.strerror or exc}; check that {path.parent} is writable "
            "(or set XDG_CONFIG_HOME)"
        ) from exc


def _remove(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise AutostartError(f"cannot remove {path}: {exc.strerror or exc}") from exc
    return True


def enable(
    profile: str,
    *,
    headless: bool,
    config_home: Path | None = None,
    argv: list[str] | None = None,
    reload: bool = True,
    front: tuple[str, ...] = (),
    front_port: int | None = None,
) -> AutostartStatus:
    """Start ``profile`` at login: the window (autostart entry) or, ``headless``, the systemd
    user unit (written and enabled for ``default.target``). The other way is removed, so one
    thing starts at login. ``argv`` is the kvpilot command (default: this installation's);
    ``reload`` asks a running user manager to read the unit now. ``front`` (headless only):
    serve these profiles behind one address (``kvpilot front``) on ``front_port``; ``profile``
    is then the first of them.

    Raises:
        AutostartError: an empty profile name, a front without ``headless``, or a file that
            cannot be written.
    """
    from kvpilot.core.app.desktop import launcher_argv

    front = tuple(_check_name(p) for p in front)
    if front and not headless:
        raise AutostartError("a front starts at login without the window: add --headless")
    name = _check_name(front[0] if front else profile)
    where = AutostartPaths(config_home or xdg_config_home())
    argv = argv or launcher_argv()
    note = ""
    if headless:
        _remove(where.desktop_file)
        _write(where.unit_file, unit_text(argv, name, front=front, front_port=front_port), 0o644)
        link = where.wants_link
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
        try:
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(Path("..") / UNIT_NAME)
        except OSError as exc:
            raise AutostartError(f"cannot enable {UNIT_NAME} ({link}): {exc.strerror or exc}"
                                 ) from exc
        if reload:
            note = _reload()
    else:
        removed = _remove(where.wants_link) | _remove(where.unit_file)
        if removed and reload:
            _reload()
        _write(where.desktop_file, desktop_entry_text(argv, name), 0o644)
    found = status(config_home=where.config_home, query_manager=reload)
    return AutostartStatus(found.mode, found.profile, found.desktop_file, found.unit_file,
                           found.unit_state, note or found.note, found.front)


def disable(*, config_home: Path | None = None, reload: bool = True) -> AutostartStatus:
    """Start nothing at login: remove the autostart entry and the unit (a headless server that
    runs now keeps running until it is stopped: ``systemctl --user stop kvpilot-serve``).

    Raises:
        AutostartError: a file that cannot be removed.
    """
    where = AutostartPaths(config_home or xdg_config_home())
    running = status(config_home=where.config_home, query_manager=reload).unit_state
    removed_unit = _remove(where.wants_link) | _remove(where.unit_file)
    _remove(where.desktop_file)
    if removed_unit and reload:
        _reload()
    note = ("the headless server still runs; stop it with `systemctl --user stop "
            f"{UNIT_NAME}`" if running == "active" else "")
    return AutostartStatus(None, None, None, None, None, note)


def status(*, config_home: Path | None = None, query_manager: bool = True) -> AutostartStatus:
    """What starts at login now (read from the files; the unit's state from the user manager
    when ``query_manager`` and one answers)."""
    where = AutostartPaths(config_home or xdg_config_home())
    desktop = where.desktop_file if where.desktop_file.is_file() else None
    unit = where.unit_file if where.unit_file.is_file() else None
    enabled = unit is not None and where.wants_link.is_symlink()
    state = None
    if unit is not None and query_manager:
        done = _systemctl("is-active", UNIT_NAME)
        if done is not None and done.stdout.strip():
            state = done.stdout.strip().splitlines()[0]
    if enabled and unit is not None:
        return AutostartStatus(MODE_HEADLESS, _profile_in(unit), desktop, unit, state,
                               front=_front_in(unit))
    if desktop is not None:
        return AutostartStatus(MODE_WINDOW, _profile_in(desktop), desktop, unit, state)
    note = "the unit is written but not enabled" if unit is not None else ""
    return AutostartStatus(None, None, None, unit, state, note)
