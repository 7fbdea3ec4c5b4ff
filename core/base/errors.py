"""The exception tree of kvpilot.

Every error that a user can cause or fix derives from :class:`KvpilotError` and carries a
one-line ``message`` that names the problem and what to do. The CLI prints that line and exits
with status 2; the GUI shows it in a banner. Programming errors stay ordinary exceptions.

    KvpilotError
     ├── ModelSpecError        config.json / safetensors / catalog problems (models/)
     ├── FitError              impossible inputs to the fit engine (fit/)
     ├── HardwareError         NVML / driver problems (hardware/)
     │    └── ProcUnreadableError  /proc hidden or unreadable (a container, a chroot)
     ├── RuntimeNotFoundError  no usable vLLM executable (runtimes/discovery.py)
     ├── RuntimeInstallError   a managed vLLM runtime cannot be chosen, installed or removed
     ├── CommandError          a plan or extra argument that cannot become a vllm argv
     ├── SettingsError         settings file problems (settings.py)
     └── FolderError           one of kvpilot's own folders cannot be written (paths.py)
"""

from __future__ import annotations


class KvpilotError(Exception):
    """Base of all user-facing errors; ``str(err)`` is the one-line message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ModelSpecError(KvpilotError):
    """A model description could not be read: names the file and the field."""

    def __init__(self, message: str, *, path: str | None = None, field: str | None = None) -> None:
        where = f"{_one_line(path)}: " if path else ""
        what = f"field '{_one_line(field)}': " if field else ""
        super().__init__(f"{where}{what}{message}")
        self.path = path
        self.field = field


def _one_line(text: str) -> str:
    """``text`` as typed when it prints on one line, else quoted with escapes (a pasted path
    with a newline must not break the one-line message)."""
    return text if text.isprintable() else repr(text)


class FitError(KvpilotError):
    """Inputs to the fit engine that make no sense (negative context, utilization > 1, ...)."""


class HardwareError(KvpilotError):
    """The GPU or driver could not be read."""


class ProcUnreadableError(HardwareError):
    """``/proc`` cannot be read (a container or chroot): the machine's memory and processes are
    unknown. Not "no GPU": planning on this machine cannot go on until it is visible."""


class RuntimeNotFoundError(KvpilotError):
    """No usable vLLM installation was found."""


class RuntimeInstallError(KvpilotError):
    """A managed runtime could not be picked, installed, verified or removed (runtimes/).

    ``log_path`` is the installer's full log when one was written; ``cause`` the failing
    command's own last words (its error lines), for a caller that words the message itself.
    """

    def __init__(
        self, message: str, *, log_path: str | None = None, cause: str | None = None
    ) -> None:
        super().__init__(message)
        self.log_path = log_path
        self.cause = cause


class RuntimeInstallCancelled(RuntimeInstallError):
    """The user cancelled an install; the half-made runtime folder was removed."""


class CommandError(KvpilotError):
    """A plan or user argument that cannot be turned into a valid ``vllm serve`` command."""


#: ``MeasurementError.kind`` of a dry run the user stopped
MEASUREMENT_CANCELLED = "cancelled"


class MeasurementError(KvpilotError):
    """The measured dry run did not produce capacity numbers (vLLM failed, timed out or the
    user stopped it).

    ``kind`` is the classified failure kind (``kvpilot.core.base.failures``) when there was one,
    :data:`MEASUREMENT_CANCELLED` for a dry run the user stopped.
    """

    def __init__(self, message: str, *, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind


class SettingsError(KvpilotError):
    """The settings file could not be read or written."""


class SecretsUnavailableError(SettingsError):
    """A secret a profile needs could not be read (a locked keyring). Worth trying again once
    the keyring opens: the command exits with status 1, not 2 (``exit_status``)."""

    exit_status = 1


class FolderError(KvpilotError):
    """One of kvpilot's own folders (data, config, log, cache) cannot be created or written.

    ``path`` is the folder; ``env_var`` the variable that moves it (``KVPILOT_DATA_DIR``, ...).
    """

    def __init__(self, message: str, *, path: str, env_var: str) -> None:
        super().__init__(message)
        self.path = path
        self.env_var = env_var
