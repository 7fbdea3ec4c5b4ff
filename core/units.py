"""Byte units, defined once: binary, as vLLM and nvidia-smi print them (``GiB`` = 2**30)."""

from __future__ import annotations

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
