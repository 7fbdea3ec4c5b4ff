"""Where the API key and the Hugging Face token of each profile are kept.

In order of preference:

1. ``keyring``: the system keyring through the ``keyring`` package (Secret Service on Linux
   desktops, the macOS Keychain, the Windows Credential Locker), service ``kvpilot``, user name
   ``<profile>/<field>``;
2. ``keyring-file``: keyring's file fallback (``keyrings.alt``), only when the user accepted it
   (:func:`accept_file_fallback`) and the package is installed;
3. ``settings-file``: the settings file itself, permissions 0600 (the last resort; the settings
   dialog says so in words with :meth:`SecretStore.describe`).

``KVPILOT_SECRETS=settings-file`` forces the last one (tests, portable installs);
``KVPILOT_SECRETS=keyring`` refuses to fall back.

:class:`~kvpilot.core.app.settings.SettingsStore` calls :func:`hydrate` after reading the file (the
secrets come back into the in-memory profiles, and secrets still in the file are moved into the
keyring: the migration on first start) and :func:`strip` before writing (what goes to the
keyring leaves the file). Nothing here logs a secret's value.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any

log = logging.getLogger("kvpilot.secrets")

SERVICE = "kvpilot"
BACKEND_ENV = "KVPILOT_SECRETS"
FIELDS: tuple[str, ...] = ("api_key", "hf_token")
FALLBACK_MARKER = "secrets-file-fallback-accepted"

KIND_KEYRING = "keyring"
KIND_KEYRING_FILE = "keyring-file"
KIND_SETTINGS_FILE = "settings-file"


_prefetch_lock = threading.Lock()
_prefetch: threading.Thread | None = None


def prefetch_keyring() -> None:
    """Start finding the keyring backend on a daemon thread and return at once.

    keyring imports every backend it ships to pick one, and on Linux its macOS backend looks
    for the Security framework with ``ctypes.util.find_library``, which runs ``ldconfig``,
    ``gcc`` and ``ld`` (0.3-1 s). The desktop app calls this first thing, so that the search
    waits on those programs while Qt loads; :func:`default_store` waits for the thread.
    Does nothing when ``KVPILOT_SECRETS=settings-file``, when there is no session bus
    (:func:`no_session_bus`) or a prefetch already ran.
    """
    global _prefetch
    if os.environ.get(BACKEND_ENV, "").strip().lower() == KIND_SETTINGS_FILE:
        return
    if no_session_bus():
        return
    with _prefetch_lock:
        if _prefetch is not None:
            return
        _prefetch = threading.Thread(
            target=_usable_keyring, name="kvpilot-keyring-prefetch", daemon=True
        )
        _prefetch.start()


def no_session_bus() -> bool:
    """True on Linux when keyring could only confirm that there is no system keyring: no D-Bus
    session bus (no ``DBUS_SESSION_BUS_ADDRESS``, no ``$XDG_RUNTIME_DIR/bus``), over which
    Secret Service and KWallet are reached, and keyring not configured otherwise in this
    process or by the user (not imported yet; no ``PYTHON_KEYRING_BACKEND``, no
    ``keyringrc.cfg``). Headless sessions, SSH and WSL2 without systemd look like this; the
    search costs 0.1-0.3 s of imports at start-up there.
    """
    if not sys.platform.startswith("linux") or "keyring" in sys.modules:
        return False
    if os.environ.get("DBUS_SESSION_BUS_ADDRESS") or os.environ.get("PYTHON_KEYRING_BACKEND"):
        return False
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir and Path(runtime_dir, "bus").exists():
        return False
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return not Path(config_home, "python_keyring", "keyringrc.cfg").exists()


def _wait_for_prefetch() -> None:
    with _prefetch_lock:
        thread = _prefetch
    if thread is not None:
        thread.join()


def _usable_keyring() -> Any | None:
    """The system keyring backend to use, or None when there is no real one.

    keyring's choice is taken apart where it is a chain: on a Linux desktop with
    ``keyrings.alt`` installed it chains Secret Service with keyrings.alt's plain-text file, and
    reads fall through to that file. The store talks to the first real member alone, so that
    the file is used only when the user accepted it (:func:`default_store`). Not real: keyring's
    fail and null backends, an empty chain, keyrings.alt's files.
    """
    if no_session_bus():
        return None
    try:
        import keyring
        from keyring.backends import chainer
    except ImportError:
        return None
    try:
        backend = keyring.get_keyring()
        members = backend.backends if isinstance(backend, chainer.ChainerBackend) else [backend]
    except Exception:  # noqa: BLE001 - a broken keyring set-up means: not usable
        return None
    return next((b for b in members if _is_system_keyring(b)), None)


def _is_system_keyring(backend: Any) -> bool:
    """False for keyring's fail / null backends, a chain and keyrings.alt's file backends."""
    from keyring.backends import chainer, fail

    if isinstance(backend, fail.Keyring | chainer.ChainerBackend):
        return False
    module = type(backend).__module__
    return not module.startswith(("keyring.backends.null", "keyrings.alt"))


def _display_name(backend: Any) -> str:
    """keyring's name for ``backend`` ("SecretService Keyring", "macOS Keyring"), else its
    class name."""
    name = getattr(backend, "name", None)
    return name if isinstance(name, str) and name else type(backend).__name__


def _file_keyring(config_dir: Path) -> Any | None:
    try:
        from keyrings.alt.file import PlaintextKeyring
    except ImportError:
        return None
    ring = PlaintextKeyring()
    ring.file_path = str(config_dir / "secrets.cfg")  # next to the settings, not in $HOME
    return ring


def fallback_accepted(config_dir: Path) -> bool:
    """True when the user accepted keyring's file fallback for this config directory."""
    return (config_dir / FALLBACK_MARKER).exists()


def accept_file_fallback(config_dir: Path, accepted: bool = True) -> None:
    """Record (or withdraw) the user's consent to keyring's file fallback."""
    marker = config_dir / FALLBACK_MARKER
    if accepted:
        config_dir.mkdir(parents=True, exist_ok=True)
        marker.write_text("1\n", encoding="utf-8")
    elif marker.exists():
        marker.unlink()


@dataclass
class SecretStore:
    """One place for secrets; ``kind`` is ``keyring``, ``keyring-file`` or ``settings-file``.

    ``backend`` is the keyring backend object (None for ``settings-file``).
    """

    kind: str
    backend: Any | None = None
    backend_name: str = ""
    #: (profile, field) of each secret the keyring could not give (locked, no service)
    unreadable: set[tuple[str, str]] = dc_field(default_factory=set)

    @property
    def in_settings_file(self) -> bool:
        """True when secrets stay in the settings file."""
        return self.kind == KIND_SETTINGS_FILE

    def describe(self) -> str:
        """One sentence for the settings dialog: where the secrets are."""
        if self.kind == KIND_KEYRING:
            return (
                "API key and Hugging Face token are stored in the system keyring "
                f"({self.backend_name}), not in the settings file."
            )
        if self.kind == KIND_KEYRING_FILE:
            return (
                "API key and Hugging Face token are stored in keyring's file fallback "
                f"({self.backend_name}), which you accepted; no system keyring is available."
            )
        return (
            "No system keyring is available, so the API key and Hugging Face token are stored "
            "in the settings file, readable only by you (permissions 0600)."
        )

    @staticmethod
    def _user(profile: str, field: str) -> str:
        return f"{profile}/{field}"

    def get(self, profile: str, field: str) -> str:
        """The secret, "" when none (or the keyring cannot be read)."""
        if self.backend is None:
            return ""
        try:
            value = self.backend.get_password(SERVICE, self._user(profile, field))
        except Exception as exc:  # noqa: BLE001 - keyring errors vary by backend
            log.warning("secrets: cannot read %s of profile %r: %s", field, profile,
                        type(exc).__name__)
            self.unreadable.add((profile, field))
            return ""
        return value or ""

    def set(self, profile: str, field: str, value: str) -> bool:
        """Store (``value`` "" deletes); False when the keyring refused."""
        if self.backend is None:
            return False
        user = self._user(profile, field)
        try:
            if value:
                self.backend.set_password(SERVICE, user, value)
            elif self.backend.get_password(SERVICE, user) is not None:
                self.backend.delete_password(SERVICE, user)
        except Exception as exc:  # noqa: BLE001 - keyring errors vary by backend
            log.warning("secrets: cannot store %s of profile %r: %s", field, profile,
                        type(exc).__name__)
            return False
        return True

    def forget_profiles(self, keep: Iterable[str], known: Iterable[str]) -> None:
        """Delete the secrets of profiles in ``known`` that are not in ``keep``."""
        kept = set(keep)
        for name in known:
            if name not in kept:
                for f in FIELDS:
                    self.set(name, f, "")


def default_store(config_dir: Path) -> SecretStore:
    """The store for ``config_dir`` following the order in the module docstring."""
    wanted = os.environ.get(BACKEND_ENV, "auto").strip().lower()
    if wanted == KIND_SETTINGS_FILE:
        return SecretStore(KIND_SETTINGS_FILE)
    _wait_for_prefetch()  # keyring caches the backend it found: the call below is quick then
    ring = _usable_keyring()
    if ring is not None:
        return SecretStore(KIND_KEYRING, ring, _display_name(ring))
    if fallback_accepted(config_dir):
        file_ring = _file_keyring(config_dir)
        if file_ring is not None:
            return SecretStore(KIND_KEYRING_FILE, file_ring, str(config_dir / "secrets.cfg"))
    if wanted == KIND_KEYRING:
        log.warning("secrets: %s=keyring but no keyring is usable; using the settings file",
                    BACKEND_ENV)
    return SecretStore(KIND_SETTINGS_FILE)


def file_fallback_available() -> bool:
    """True when keyring's file fallback (``keyrings.alt``) is installed."""
    try:
        import keyrings.alt.file  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class KeyringConsent:
    """What the settings dialog offers about keyring's file fallback, and where secrets are.

    ``offered``: no system keyring is in use (and ``KVPILOT_SECRETS`` does not force a store),
    so the choice between the file fallback and the settings file matters; ``available``:
    ``keyrings.alt`` is installed; ``accepted``: the user's recorded consent;
    ``kind`` / ``description``: the store in use (:meth:`SecretStore.describe`).
    """

    offered: bool
    available: bool
    accepted: bool
    kind: str
    description: str


def fallback_choice(store: SecretStore, config_dir: Path) -> KeyringConsent:
    """The file-fallback choice for ``config_dir`` while ``store`` holds the secrets."""
    forced = os.environ.get(BACKEND_ENV, "auto").strip().lower() == KIND_SETTINGS_FILE
    return KeyringConsent(
        offered=store.kind != KIND_KEYRING and not forced,
        available=file_fallback_available(),
        accepted=fallback_accepted(config_dir),
        kind=store.kind,
        description=store.describe(),
    )


def hydrate_json(data: dict[str, Any], store: SecretStore) -> list[str]:
    """Fill the secrets of each profile object of a parsed settings file from ``store``, in
    place (before the profiles are validated: a wide host needs its API key); secrets found in
    the file are copied into the store.

    Returns the names of the profiles whose secrets were found in the file and are now in the
    store (the caller writes the file again so that they leave it).
    """
    if store.in_settings_file:
        return []
    raw_profiles = data.get("profiles")
    if not isinstance(raw_profiles, list):
        return []
    migrated: list[str] = []
    for raw in raw_profiles:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            continue
        name = raw["name"]
        moved = False
        for f in FIELDS:
            in_file = raw.get(f)
            if isinstance(in_file, str) and in_file:
                moved = store.set(name, f, in_file) or moved
            else:
                kept = store.get(name, f)
                if kept:
                    raw[f] = kept
        if moved:
            migrated.append(name)
    return migrated


def strip(settings: Any, store: SecretStore) -> Any:
    """The settings to write to the file: secrets that ``store`` kept are blanked.

    A secret the keyring refused stays in the file (0600) rather than being lost.
    """
    if store.in_settings_file:
        return settings
    profiles = []
    for p in settings.profiles:
        values = {}
        for f in FIELDS:
            value = getattr(p, f)
            if store.set(p.name, f, value):
                values[f] = ""
        profiles.append(replace(p, **values))
    return replace(settings, profiles=tuple(profiles))
