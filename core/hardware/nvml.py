"""The one place where kvpilot talks to NVML (NVIDIA's management library).

Every NVML call goes through :meth:`Nvml.call`, the single choke point:

* a field that this GPU or driver cannot report (``NotSupported``, ``NoPermission``,
  ``FunctionNotFound``, ``NotFound``, ``NoData``...) becomes ``None`` and is logged once per
  function and error, never a crash and never a made-up 0;
* ``GPU is lost`` / ``reset required`` raise :class:`GpuLostError`, so a caller can say so;
* a driver that went away mid-session (``DriverNotLoaded``, ``Uninitialized``, a library /
  driver version mismatch after an upgrade) raises :class:`NvmlInitError`: every later call
  would fail the same way, so the session must be reopened, not read as empty fields;
* failures to start NVML (no driver, kernel module missing, version mismatch, no permission)
  raise :class:`NvmlInitError` carrying a :class:`~kvpilot.core.hardware.problems.HardwareProblem`.

The NVML module itself is injectable: production code uses NVIDIA's ``pynvml`` (the
``nvidia-ml-py`` package), tests and demos pass a
:class:`~kvpilot.core.hardware.recorded_nvml.RecordedNvml`.
Setting the environment variable ``KVPILOT_FAKE_NVML`` to a snapshot file or shipped snapshot
name makes :func:`default_module` return such a replay for the whole process.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from kvpilot.core.base.errors import HardwareError
from kvpilot.core.hardware.problems import HardwareProblem, ProblemKind
from kvpilot.core.hardware.recorded_nvml import RecordedNvml, load_recorded

log = logging.getLogger("kvpilot.hardware")

#: environment variable: a snapshot file or shipped snapshot name to replay instead of the driver
FAKE_ENV = "KVPILOT_FAKE_NVML"

# NVML return codes (stable ABI of nvml.h); read from the module when it has them
_CODE = {
    "UNINITIALIZED": 1,
    "INVALID_ARGUMENT": 2,
    "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4,
    "NOT_FOUND": 6,
    "DRIVER_NOT_LOADED": 9,
    "TIMEOUT": 10,
    "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13,
    "GPU_IS_LOST": 15,
    "RESET_REQUIRED": 16,
    "OPERATING_SYSTEM": 17,
    "LIB_RM_VERSION_MISMATCH": 18,
    "IN_USE": 19,
    "MEMORY": 20,
    "NO_DATA": 21,
    "ARGUMENT_VERSION_MISMATCH": 25,
    "NOT_READY": 27,
    "GPU_NOT_FOUND": 28,
    "UNKNOWN": 999,
}

_INIT_PROBLEMS = {
    "LIBRARY_NOT_FOUND": ProblemKind.LIBRARY_NOT_FOUND,
    "DRIVER_NOT_LOADED": ProblemKind.DRIVER_NOT_LOADED,
    "LIB_RM_VERSION_MISMATCH": ProblemKind.VERSION_MISMATCH,
    "NO_PERMISSION": ProblemKind.NO_PERMISSION,
    "GPU_IS_LOST": ProblemKind.GPU_LOST,
    "RESET_REQUIRED": ProblemKind.GPU_LOST,
    "GPU_NOT_FOUND": ProblemKind.NO_DEVICES,
}

_LOST = ("GPU_IS_LOST", "RESET_REQUIRED")
#: errors of a session whose driver went away (unloaded, upgraded): the session must be reopened
_SESSION_GONE = ("DRIVER_NOT_LOADED", "UNINITIALIZED", "LIB_RM_VERSION_MISMATCH")

_logged_once: set[tuple[str, str]] = set()
_logged_lock = threading.Lock()
_fake_cache: dict[str, RecordedNvml] = {}
_fake_lock = threading.Lock()


class NvmlInitError(HardwareError):
    """NVML cannot be used at all; ``problem`` says why and what to do."""

    def __init__(self, problem: HardwareProblem) -> None:
        super().__init__(problem.one_line())
        self.problem = problem


class GpuLostError(HardwareError):
    """The GPU stopped answering (NVML ``GPU is lost`` or ``reset required``)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.problem = HardwareProblem.of(ProblemKind.GPU_LOST, detail)


def import_pynvml() -> Any:
    """Import NVIDIA's ``pynvml`` module (package ``nvidia-ml-py``).

    Raises:
        NvmlInitError: kind ``BINDINGS_BROKEN`` when the module is missing or is the unrelated
            ``pynvml`` package that shadows NVIDIA's bindings.
    """
    try:
        import pynvml  # the only import of pynvml in kvpilot
    except ImportError as exc:
        raise NvmlInitError(HardwareProblem.of(ProblemKind.BINDINGS_BROKEN, str(exc))) from exc
    if not callable(getattr(pynvml, "nvmlInitWithFlags", None)):
        raise NvmlInitError(
            HardwareProblem.of(ProblemKind.BINDINGS_BROKEN, f"{pynvml.__file__} lacks nvmlInit")
        )
    return pynvml


def default_module() -> Any:
    """The NVML module to use when none is injected.

    The replay named by ``$KVPILOT_FAKE_NVML`` when set (one shared instance per value, so a
    probe and a sampler see the same replayed machine), else NVIDIA's ``pynvml``.

    Raises:
        NvmlInitError: ``pynvml`` cannot be imported (kind ``BINDINGS_BROKEN``).
        HardwareError: ``$KVPILOT_FAKE_NVML`` names no readable snapshot.
    """
    fake = os.environ.get(FAKE_ENV)
    if fake:
        with _fake_lock:
            if fake not in _fake_cache:
                _fake_cache[fake] = load_recorded(fake)
            return _fake_cache[fake]
    return import_pynvml()


def option_replay(fake_nvml: str | None) -> RecordedNvml | None:
    """The replay a command's ``--fake-nvml`` names, else ``$KVPILOT_FAKE_NVML``'s, else None.

    Raises:
        HardwareError: the snapshot named cannot be read.
    """
    fake = fake_nvml or os.environ.get(FAKE_ENV)
    return load_recorded(fake) if fake else None


def resolve_module(nvml_module: Any | None) -> Any:
    """``nvml_module`` itself, or :func:`default_module` when it is None."""
    return default_module() if nvml_module is None else nvml_module


def is_fake(module: Any) -> bool:
    """True when ``module`` replays a snapshot rather than asking a driver."""
    return isinstance(module, RecordedNvml)


def describe_source(module: Any) -> str:
    """``"nvml"`` for the real library, ``"replay of <snapshot>"`` for a fake."""
    if isinstance(module, RecordedNvml):
        return f"replay of {Path(module.source).name}"
    return "nvml"


def error_name(module: Any, exc: BaseException) -> str:
    """The NVML_ERROR_* suffix of ``exc`` (``"NOT_SUPPORTED"``...), or its class name."""
    value = getattr(exc, "value", None)
    if isinstance(value, int):
        for name, default in _CODE.items():
            if getattr(module, f"NVML_ERROR_{name}", default) == value:
                return name
        return f"CODE_{value}"
    return type(exc).__name__


def problem_from_error(module: Any, exc: BaseException) -> HardwareProblem:
    """Map an exception raised while starting NVML to a :class:`HardwareProblem`."""
    name = error_name(module, exc)
    kind = _INIT_PROBLEMS.get(name, ProblemKind.UNKNOWN)
    if isinstance(exc, OSError):  # some bindings surface dlopen failures directly
        kind = ProblemKind.LIBRARY_NOT_FOUND
    return HardwareProblem.of(kind, f"{name}: {exc}")


def _log_once(field: str, reason: str, detail: str) -> None:
    key = (field, reason)
    with _logged_lock:
        if key in _logged_once:
            return
        _logged_once.add(key)
    log.info("NVML cannot report %s (%s); shown as not available", field, detail)


def decode_text(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


class Nvml:
    """One NVML session (``nvmlInit`` ... ``nvmlShutdown``) on a given module.

    Use as a context manager or call :meth:`open` / :meth:`close`. NVML counts its own
    initialisations, so several sessions (a probe and a sampler) may be open at once.
    """

    def __init__(self, module: Any | None = None) -> None:
        self.module = resolve_module(module)
        self._open = False
        #: whether the v2 memory query works here (None: not tried yet)
        self.memory_v2: bool | None = None
        #: the clock-event reason function that answered here (None: not found yet)
        self.throttle_function: str | None = None
        self._error_type: type[BaseException] = getattr(self.module, "NVMLError", Exception)
        self._mismatch_type: type[BaseException] = getattr(
            self.module, "NVMLLibraryMismatchError", LookupError
        )

    # ---------------------------------------------------------------- lifecycle
    def open(self) -> Nvml:
        """Start NVML.

        Raises:
            NvmlInitError: the driver, library or permissions prevent it (``problem.kind`` says
                which).
        """
        if self._open:
            return self
        try:
            self.module.nvmlInit()
        except (self._error_type, OSError) as exc:
            raise NvmlInitError(problem_from_error(self.module, exc)) from exc
        self._open = True
        return self

    def close(self) -> None:
        """Shut the session down; errors while doing so are ignored (the GPU may be gone)."""
        if not self._open:
            return
        self._open = False
        try:
            self.module.nvmlShutdown()
        except self._error_type as exc:
            log.debug("nvmlShutdown failed: %s", exc)

    def __enter__(self) -> Nvml:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ---------------------------------------------------------------- devices
    def device_count(self) -> int:
        """Number of GPUs NVML sees.

        Raises:
            NvmlInitError: NVML answered with an error (driver trouble).
        """
        try:
            return int(self.module.nvmlDeviceGetCount())
        except self._error_type as exc:
            raise NvmlInitError(problem_from_error(self.module, exc)) from exc

    def handle(self, index: int) -> Any:
        """The NVML handle of GPU ``index``.

        Raises:
            GpuLostError: the GPU does not answer.
            NvmlInitError: any other NVML error.
        """
        try:
            return self.module.nvmlDeviceGetHandleByIndex(index)
        except self._error_type as exc:
            name = error_name(self.module, exc)
            if name in _LOST:
                raise GpuLostError(f"GPU {index}: {exc}") from exc
            raise NvmlInitError(problem_from_error(self.module, exc)) from exc

    def constant(self, name: str, default: int) -> int:
        """An ``NVML_*`` constant of the module, ``default`` when the module lacks it."""
        return int(getattr(self.module, name, default))

    # ---------------------------------------------------------------- the choke point
    def call(
        self, function: str, *args: Any, field: str | None = None, missing: list[str] | None = None
    ) -> Any:
        """Call ``module.<function>(*args)``; None when the value cannot be read.

        ``field`` names the value for the log line and is appended to ``missing`` when the
        value is not available. Byte strings are decoded.

        Raises:
            GpuLostError: NVML says the GPU is lost or needs a reset.
        """
        label = field or function
        fn = getattr(self.module, function, None)
        if fn is None:
            _log_once(label, "absent", f"{function} not in this NVML binding")
            if missing is not None:
                missing.append(label)
            return None
        try:
            return decode_text(fn(*args))
        except self._error_type as exc:
            name = error_name(self.module, exc)
            if name in _LOST:
                raise GpuLostError(f"{function}: {exc}") from exc
            if name in _SESSION_GONE:
                raise NvmlInitError(problem_from_error(self.module, exc)) from exc
            _log_once(label, name, f"{function}: {exc}")
        except self._mismatch_type as exc:  # unversioned symbol missing from an older driver
            _log_once(label, "mismatch", f"{function}: {exc}")
        if missing is not None:
            missing.append(label)
        return None

    def error_name(self, exc: BaseException) -> str:
        """See :func:`error_name`."""
        return error_name(self.module, exc)


# -------------------------------------------------------------------------------- topology
#: NVML_TOPOLOGY_* levels (nvml.h) -> the short names ``nvidia-smi topo -m`` prints
TOPOLOGY_NAMES = {0: "internal", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
P2P_STATUS_OK = 0
#: NVML_P2P_STATUS_* (nvml.h) -> words
P2P_STATUS_WORDS = {
    0: "supported",
    1: "not supported by the chipset",
    2: "not supported by the GPU",
    3: "not supported by the PCIe topology",
    4: "disabled by a registry key",
    5: "not supported",
    6: "unknown",
}
P2P_CAPS = {"read": 0, "write": 1, "nvlink": 2}


def topology_level(nv: Nvml, handle_a: Any, handle_b: Any) -> int | None:
    """NVML's common-ancestor level of two GPUs (``NVML_TOPOLOGY_*``), None when unknown.

    Raises:
        GpuLostError: a GPU does not answer.
    """
    value = nv.call("nvmlDeviceGetTopologyCommonAncestor", handle_a, handle_b, field="topology")
    return None if value is None else int(value)


def p2p_status(nv: Nvml, handle_a: Any, handle_b: Any, capability: str) -> int | None:
    """NVML's P2P status (``NVML_P2P_STATUS_*``; 0 = OK) for ``capability`` (``read``,
    ``write`` or ``nvlink``) between two GPUs; None when NVML cannot say.

    Raises:
        KeyError: an unknown capability name.
        GpuLostError: a GPU does not answer.
    """
    index = nv.constant(f"NVML_P2P_CAPS_INDEX_{capability.upper()}", P2P_CAPS[capability])
    value = nv.call(
        "nvmlDeviceGetP2PStatus", handle_a, handle_b, index, field=f"p2p_{capability}"
    )
    return None if value is None else int(value)

