"""What can stop kvpilot from reading the GPU, as typed values with a fix a user can apply.

A :class:`HardwareProblem` is returned (never raised) by :func:`kvpilot.core.hardware.probe.probe`
and carried by sampler samples; :meth:`HardwareProblem.to_error` turns it into the
:class:`~kvpilot.core.base.errors.HardwareError` that the CLI prints as one line.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kvpilot.core.base.errors import HardwareError


class ProblemKind(str, enum.Enum):
    """Why NVML gave no (or no more) answers."""

    LIBRARY_NOT_FOUND = "library_not_found"  # libnvidia-ml.so.1 / nvml.dll missing: no driver
    DRIVER_NOT_LOADED = "driver_not_loaded"  # user-space library present, kernel module absent
    VERSION_MISMATCH = "version_mismatch"  # NVML library and kernel module from different drivers
    NO_PERMISSION = "no_permission"  # /dev/nvidia* not accessible to this user
    NO_DEVICES = "no_devices"  # NVML works but sees no GPU
    BINDINGS_BROKEN = "bindings_broken"  # the Python package named pynvml is not nvidia-ml-py
    GPU_LOST = "gpu_lost"  # the GPU fell off the bus (Xid 79) or needs a reset
    UNKNOWN = "unknown"  # any other NVML failure, with its text


_TEXT: dict[ProblemKind, tuple[str, str]] = {
    ProblemKind.LIBRARY_NOT_FOUND: (
        "no NVIDIA driver found (the NVML library libnvidia-ml could not be loaded)",
        "install the NVIDIA driver (it ships libnvidia-ml); under WSL2 install the Windows "
        "NVIDIA driver and keep /usr/lib/wsl/lib on the library path; without a GPU, pick one "
        "in planner mode",
    ),
    ProblemKind.DRIVER_NOT_LOADED: (
        "the NVIDIA kernel driver is not loaded",
        "load it ('sudo modprobe nvidia') or reboot after installing the driver, then check "
        "that 'nvidia-smi' works",
    ),
    ProblemKind.VERSION_MISMATCH: (
        "the NVML library and the loaded NVIDIA kernel driver have different versions "
        "(usually a driver update without a reboot)",
        "reboot, or unload and reload the nvidia kernel modules",
    ),
    ProblemKind.NO_PERMISSION: (
        "no permission to open the NVIDIA device files (/dev/nvidia*)",
        "add your user to the group that owns /dev/nvidia* (often 'video'), or pass the GPU "
        "into the container (--gpus all)",
    ),
    ProblemKind.NO_DEVICES: (
        "the NVIDIA driver is running but reports no GPU",
        "check 'nvidia-smi -L'; in a container pass the GPU in (--gpus all); without a GPU, "
        "pick one in planner mode",
    ),
    ProblemKind.BINDINGS_BROKEN: (
        "the installed Python module 'pynvml' is not NVIDIA's nvidia-ml-py",
        "run 'pip uninstall pynvml' and 'pip install nvidia-ml-py'",
    ),
    ProblemKind.GPU_LOST: (
        "the GPU stopped answering (fallen off the bus or needs a reset)",
        "save your work and reboot; check the power cables and 'sudo dmesg' for Xid 79",
    ),
    ProblemKind.UNKNOWN: (
        "NVML failed",
        "check that 'nvidia-smi' works; reinstalling the driver may help",
    ),
}


@dataclass(frozen=True)
class HardwareProblem:
    """A reason NVML cannot be used, with what to do about it.

    ``message`` says what is wrong, ``action`` what the user can do; ``detail`` keeps the raw
    NVML text (for logs and bug reports).
    """

    kind: ProblemKind
    message: str
    action: str
    detail: str | None = None

    @classmethod
    def of(cls, kind: ProblemKind, detail: str | None = None) -> HardwareProblem:
        """Build the standard problem for ``kind``; ``detail`` is the library's own text."""
        message, action = _TEXT[kind]
        if kind is ProblemKind.UNKNOWN and detail:
            message = f"NVML failed: {detail}"
        return cls(kind=kind, message=message, action=action, detail=detail)

    def one_line(self) -> str:
        """``"<message>: <action>"``, the line the CLI prints."""
        return f"{self.message}: {self.action}"

    def to_error(self) -> HardwareError:
        """The exception form, for callers that must stop (``kvpilot gpu``, ``kvpilot serve``)."""
        return HardwareError(self.one_line())
