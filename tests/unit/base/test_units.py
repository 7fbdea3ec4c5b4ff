"""One way to write a byte count for a reader: GiB for memory, decimal units for sizes."""

from __future__ import annotations

import pytest

from kvpilot.core.base.units import GiB, MiB, gib_text, size_text


@pytest.mark.parametrize(
    ("n", "decimals", "width", "text"),
    [
        (int(14.02 * GiB), 2, 0, "14.02 GiB"),
        (GiB // 2, 1, 0, "0.5 GiB"),
        (3 * GiB, 2, 8, "    3.00 GiB"),
        (-(GiB // 4), 2, 0, "-0.25 GiB"),
        (512 * MiB, 2, 0, "0.50 GiB"),
    ],
)
def test_gib_text(n: int, decimals: int, width: int, text: str) -> None:
    assert gib_text(n, decimals, width=width) == text


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.0 kB"),
        (2_500_000_000, "2.5 GB"),
        (17_400_000, "17.4 MB"),
        (1_500_000, "1.5 MB"),
        (3_500_000_000, "3.5 GB"),
        (3_200_000_000_000, "3.2 TB"),
        (5_000_000_000_000_000, "5000.0 TB"),
    ],
)
def test_size_text(n: int, text: str) -> None:
    assert size_text(n) == text
