"""The desktop entry of kvpilot for the current user (freedesktop.org menus and launchers).

:func:`install_desktop_entry` writes ``<XDG data dir>/applications/kvpilot.desktop`` (from
``resources/kvpilot.desktop``) with ``Exec`` and ``TryExec`` set to the absolute path of the
executable that runs kvpilot now, and the icons into
``<XDG data dir>/icons/hicolor/<N>x<N>/apps/kvpilot.png``; :func:`uninstall_desktop_entry`
removes exactly those files. The XDG data dir is ``$XDG_DATA_HOME`` or ``~/.local/share``.

:func:`should_offer` says whether the GUI should offer the entry once: only for a frozen build
(the PyInstaller executable), when no entry exists and the offer was not made before (a marker
in kvpilot's data directory).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kvpilot.core.base import paths
from kvpilot.core.base.errors import KvpilotError

DESKTOP_NAME = "kvpilot.desktop"
ICON_NAME = "kvpilot"
ICON_SIZES: tuple[int, ...] = (32, 48, 64, 128, 256)
OFFERED_MARKER = "desktop-entry-offered"


class DesktopEntryError(KvpilotError):
    """The desktop entry could not be written or removed."""


def xdg_data_home() -> Path:
    """``$XDG_DATA_HOME`` or ``~/.local/share``."""
    env = os.environ.get("XDG_DATA_HOME")
    return Path(env) if env else Path.home() / ".local" / "share"


def is_frozen() -> bool:
    """True inside the PyInstaller executable."""
    return bool(getattr(sys, "frozen", False))


def launcher_argv() -> list[str]:
    """The absolute command that starts kvpilot as it runs now.

    Frozen: the executable itself. Installed: the ``kvpilot`` script next to this Python (or on
    PATH). Otherwise: this Python with ``-m kvpilot.core.cli``.
    """
    if is_frozen():
        return [str(Path(sys.executable).resolve())]
    script = Path(sys.executable).parent / "kvpilot"
    if script.exists():
        return [str(script.absolute())]
    from shutil import which

    found = which("kvpilot")
    if found:
        return [str(Path(found).absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "kvpilot.core.cli"]


@dataclass(frozen=True)
class DesktopEntry:
    """What was written (or removed): the .desktop file, the icon files, the Exec line."""

    desktop_file: Path
    icon_files: tuple[Path, ...]
    exec_line: str


def _desktop_quote(arg: str) -> str:
    # the Exec key's quoting rules: quote args with reserved characters, escape \ " ` $
    if re.fullmatch(r"[A-Za-z0-9_./+:=@%-]+", arg):
        return arg
    escaped = re.sub(r'([\\"`$])', r"\\\1", arg)
    return f'"{escaped}"'


def entry_text(argv: list[str]) -> str:
    """The bundled .desktop template with ``Exec`` / ``TryExec`` for ``argv``."""
    template = (resources.files("kvpilot.resources") / DESKTOP_NAME).read_text(encoding="utf-8")
    exec_line = " ".join(_desktop_quote(a) for a in [*argv, "gui"])
    out = []
    for line in template.splitlines():
        if line.startswith("Exec="):
            line = f"Exec={exec_line}"
        elif line.startswith("TryExec="):
            line = f"TryExec={argv[0]}"
        out.append(line)
    return "\n".join(out) + "\n"


def _paths(data_home: Path) -> tuple[Path, list[tuple[int, Path]]]:
    desktop = data_home / "applications" / DESKTOP_NAME
    icons = [
        (n, data_home / "icons" / "hicolor" / f"{n}x{n}" / "apps" / f"{ICON_NAME}.png")
        for n in ICON_SIZES
    ]
    return desktop, icons


def install_desktop_entry(
    data_home: Path | None = None, argv: list[str] | None = None
) -> DesktopEntry:
    """Write the .desktop file and icons for the current user.

    Raises:
        DesktopEntryError: a file cannot be written (names it and the OS reason).
    """
    home = data_home or xdg_data_home()
    argv = argv or launcher_argv()
    desktop, icons = _paths(home)
    written: list[Path] = []
    icon_root = resources.files("kvpilot.resources") / "icons"
    try:
        for size, target in icons:
            data = (icon_root / f"kvpilot-{size}.png").read_bytes()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            written.append(target)
        text = entry_text(argv)
        # some launchers only trust executable entries
        paths.atomic_write_text(desktop, text, mode=0o755)
    except OSError as exc:
        raise DesktopEntryError(
            f"cannot write {exc.filename or desktop}: {exc.strerror or exc}; check that "
            f"{home} is writable (or set XDG_DATA_HOME)"
        ) from exc
    exec_line = next(ln for ln in text.splitlines() if ln.startswith("Exec="))[5:]
    return DesktopEntry(desktop, tuple(written), exec_line)


def uninstall_desktop_entry(data_home: Path | None = None) -> DesktopEntry:
    """Remove the .desktop file and the icons :func:`install_desktop_entry` wrote.

    Raises:
        DesktopEntryError: a file exists but cannot be removed.
    """
    home = data_home or xdg_data_home()
    desktop, icons = _paths(home)
    removed: list[Path] = []
    exec_line = ""
    with contextlib.suppress(OSError):
        exec_line = next(
            (ln[5:] for ln in desktop.read_text().splitlines() if ln.startswith("Exec=")), ""
        )
    for path in [desktop, *(p for _, p in icons)]:
        try:
            path.unlink()
            removed.append(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise DesktopEntryError(
                f"cannot remove {path}: {exc.strerror or exc}; check its permissions"
            ) from exc
    return DesktopEntry(desktop, tuple(p for p in removed if p != desktop), exec_line)


def entry_installed(data_home: Path | None = None) -> bool:
    """True when kvpilot's .desktop file exists for this user."""
    return _paths(data_home or xdg_data_home())[0].exists()


def should_offer(data_home: Path | None = None, data_dir: Path | None = None,
                 frozen: bool | None = None) -> bool:
    """Offer the desktop entry now? Frozen build, no entry yet, never offered before."""
    if not (is_frozen() if frozen is None else frozen):
        return False
    if entry_installed(data_home):
        return False
    return not ((data_dir or paths.data_dir()) / OFFERED_MARKER).exists()


def mark_offered(data_dir: Path | None = None) -> None:
    """Remember that the offer was made (it is not made again)."""
    folder = data_dir or paths.data_dir()
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / OFFERED_MARKER).write_text("1\n", encoding="utf-8")
