"""vLLM releases as comparable values, and the release kvpilot assumes when none is known.

A version string as vLLM reports it (``vllm --version``, ``/version``, a wheel name) can carry
a pre-release (``0.10.2rc1``), a development suffix (``0.29.1rc1.dev17``) and a local part: a
build variant (``+cpu``, ``+cu128``, ``+rocm``) or a git hash (``+gd2d649e67.d20260913``).
:class:`Release` keeps the comparable release number and the build variant apart, so that
``0.32.0+cpu`` and ``0.32.0`` are the same release of different builds: memory accounting,
flags and log formats follow the release, the device follows the variant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

#: the newest release whose code kvpilot's memory model and log formats were checked against;
#: plans for an unknown or newer vLLM use its rules
NEWEST_KNOWN = "0.33.0"

_VARIANT = re.compile(r"^(cpu|rocm\d*|cu\d+|xpu|tpu|hpu|neuron)$")
_LEADING = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")


@dataclass(frozen=True)
class Release:
    """A vLLM release number (``(0, 32, 0)``) and its build variant (``"cpu"`` or None).

    A pre-release counts as its final release (kvpilot's tables change only at final
    releases); compare with :meth:`at_least`.
    """

    parts: tuple[int, ...]
    variant: str | None = None

    @classmethod
    def parse(cls, text: str | None) -> Release:
        """``0.33.0``, ``v0.11.0+cpu``, ``0.10.2rc1``, ``0.29.1rc1.dev17+gabc.d2026``.

        Unknown or unparsable text gives :data:`NEWEST_KNOWN` (no variant).
        """
        if not text or not text.strip():
            return cls.parse(NEWEST_KNOWN)
        raw = text.strip().lstrip("v")
        variant = None
        try:
            parsed = Version(raw)
            parts = tuple(parsed.release)
            if parsed.local:
                for piece in parsed.local.split("."):
                    if _VARIANT.match(piece):
                        variant = piece
                        break
        except InvalidVersion:
            m = _LEADING.match(raw)
            if m is None:
                return cls.parse(NEWEST_KNOWN)
            parts = tuple(int(p) for p in m.group(1).split("."))
            local = raw.partition("+")[2]
            variant = local if _VARIANT.match(local) else None
        while len(parts) > 3 and parts[-1] == 0:
            parts = parts[:-1]
        return cls(parts, variant)

    @property
    def number(self) -> str:
        """The release number alone, ``0.32.0`` (always at least three parts)."""
        parts = self.parts + (0,) * max(0, 3 - len(self.parts))
        return ".".join(str(p) for p in parts)

    @property
    def is_cpu_build(self) -> bool:
        """True for vLLM's CPU build (``+cpu``)."""
        return self.variant == "cpu"

    def at_least(self, other: str) -> bool:
        """True when this release is ``other`` or newer (``other`` like ``0.20`` or ``0.10.2``)."""
        return self.parts >= Release.parse(other).parts

    def __str__(self) -> str:
        return self.number + (f"+{self.variant}" if self.variant else "")


def release_number(text: str | None) -> str:
    """The normalised release number of a version string (``0.32.0+cpu`` -> ``0.32.0``)."""
    return Release.parse(text).number
