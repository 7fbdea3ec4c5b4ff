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


@dataclass(frozen=True)
class Feature:
    """A behaviour of vLLM that kvpilot depends on, the release it first appeared in, and the
    place in vLLM's code or documentation that shows it."""

    name: str
    since: str
    source: str


#: one row per behaviour; everything that asks "does this release do X" reads this table
FEATURES: dict[str, Feature] = {
    f.name: f
    for f in (
        Feature("default_utilization_0_92", "0.20.0",
                "engine/arg_utils.py: gpu_memory_utilization default 0.92 (0.9 before)"),
        Feature("max_model_len_auto", "0.14.0",
                "config: --max-model-len auto / -1 fits the context to memory"),
        Feature("cudagraph_in_budget", "0.20.0",
                "v1/worker/gpu_worker.py determine_available_memory subtracts the CUDA-graph "
                "estimate before the KV cache"),
        Feature("cache_config_tokens_metric", "0.25.0",
                "v1/metrics: vllm:cache_config_info gains kv_cache_size_tokens and "
                "kv_cache_max_concurrency labels"),
        Feature("cache_config_info_metric", "0.25.0",
                "v1/metrics/loggers.py: cache_config_info read after ready for capacity"),
        Feature("limit_mm_per_prompt_json", "0.8.0",
                "engine/arg_utils.py: --limit-mm-per-prompt parses JSON (only 'image=N' "
                "pairs through 0.7; pairs deprecated in 0.8-0.9, removed in 0.10)"),
    )
}


def supports(feature: str, version: str | Release | None) -> bool:
    """True when ``version`` (a string or :class:`Release`; None = :data:`NEWEST_KNOWN`) has
    ``feature`` (a key of :data:`FEATURES`).

    Raises:
        KeyError: ``feature`` is not in the table.
    """
    release = version if isinstance(version, Release) else Release.parse(version)
    return release.at_least(FEATURES[feature].since)


def release_number(text: str | None) -> str:
    """The normalised release number of a version string (``0.32.0+cpu`` -> ``0.32.0``)."""
    return Release.parse(text).number
