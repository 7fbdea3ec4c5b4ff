"""A keyring backend that keeps passwords in a dict (``keyring.set_keyring`` installs it).

It is a real :class:`keyring.backend.KeyringBackend`, so kvpilot's code talks to it through the
``keyring`` package exactly as it talks to Secret Service on a desktop.
"""

from __future__ import annotations

from keyring.backend import KeyringBackend
from keyring.compat import properties
from keyring.errors import PasswordDeleteError


class MemoryKeyring(KeyringBackend):
    """In-memory passwords; ``refuse`` makes every write fail, ``locked`` every read too (a
    locked keyring)."""

    name = "MemoryKeyring"  # shown by the settings dialog, like "SecretService Keyring"

    @properties.classproperty
    def priority(cls) -> float:
        # not viable for keyring's own discovery: only ``keyring.set_keyring`` installs it
        raise RuntimeError("MemoryKeyring is installed explicitly by tests")

    def __init__(self, *, refuse: bool = False) -> None:
        super().__init__()
        self.passwords: dict[tuple[str, str], str] = {}
        self.refuse = refuse
        self.locked = False

    def get_password(self, service: str, username: str) -> str | None:
        if self.locked:
            raise RuntimeError("the keyring is locked")
        return self.passwords.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        if self.refuse:
            raise RuntimeError("the keyring is locked")
        self.passwords[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        if (service, username) not in self.passwords:
            raise PasswordDeleteError(username)
        del self.passwords[(service, username)]
