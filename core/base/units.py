"""Byte units, defined once: binary, as vLLM and nvidia-smi print them (``GiB`` = 2**30), and the
two ways kvpilot writes a byte count for a reader: memory in GiB (:func:`gib_text`) and sizes on
disk or on the network in decimal units (:func:`size_text`)."""

from __future__ import annotations

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


def gib_text(n_bytes: float, decimals: int = 2, *, width: int = 0) -> str:
    """``14.02 GiB``: memory as vLLM prints it (binary GiB, ``decimals`` places; ``width`` pads
    the number on the left, for aligned columns)."""
    spec = f"{width}.{decimals}f" if width else f".{decimals}f"
    return f"{n_bytes / GiB:{spec}} GiB"


def size_text(n_bytes: float) -> str:
    """``2500000000`` -> ``2.5 GB``: a download or disk size in decimal units, as disk tools,
    file managers and the Hugging Face Hub print them (whole bytes below 1 kB)."""
    value = float(n_bytes)
    for unit in ("B", "kB", "MB", "GB"):
        if abs(value) < 1000:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"
