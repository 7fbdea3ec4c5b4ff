"""release_free_heap gives freed pages back on glibc; HeapReleaser does it on its own thread."""

from __future__ import annotations

import threading
import time

import psutil
import pytest

from kvpilot.core.app import heap

needs_glibc = pytest.mark.skipif(not heap.can_release(), reason="no malloc_trim (not glibc)")


def _fragmented_free_mb(total_mb: int = 64) -> list[bytearray]:
    """Allocate ``total_mb`` in 4 KiB blocks from malloc's heap, free all but one block in 64:
    the freed pages sit between live blocks, where free() alone cannot give them back."""
    blocks = [bytearray(4096) for _ in range(total_mb * 256)]
    keep = blocks[::64]
    del blocks
    return keep


@needs_glibc
def test_freed_pages_between_live_blocks_go_back_to_the_system() -> None:
    keep = _fragmented_free_mb(64)
    rss_kept = psutil.Process().memory_info().rss
    done = heap.release_free_heap()
    assert done is not None
    assert done.rss_before_bytes >= rss_kept - (8 << 20)
    # of the ~63 MB freed, most is whole pages: at least 32 MB leave the process
    assert done.released_bytes > 32 << 20, done
    assert done.rss_after_bytes == done.rss_before_bytes - done.released_bytes
    assert 0 <= done.took_s < 5
    assert len(keep) == 64 * 4  # the live blocks are untouched
    assert all(len(b) == 4096 for b in keep)


@needs_glibc
def test_the_releaser_runs_every_period_on_its_thread_and_stops() -> None:
    releaser = heap.HeapReleaser(period_s=0.02)
    releaser.start()
    assert releaser.running
    assert any(t.name == "kvpilot-heap-release" for t in threading.enumerate())
    deadline = time.monotonic() + 10
    while releaser.releases < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    releaser.stop()
    assert releaser.releases >= 3
    assert releaser.last is not None and 0 <= releaser.last.took_s <= releaser.longest_s
    assert releaser.released_bytes >= 0
    assert not releaser.running


def test_without_malloc_trim_nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "_malloc_trim", lambda: None)
    assert not heap.can_release()
    assert heap.release_free_heap() is None
    releaser = heap.HeapReleaser(period_s=0.01)
    releaser.start()
    assert not releaser.running and releaser.releases == 0


@pytest.mark.parametrize("period_s", [0.0, -1.0, float("nan")])
def test_a_period_that_is_not_positive_is_refused(period_s: float) -> None:
    with pytest.raises(ValueError, match="period_s must be positive"):
        heap.HeapReleaser(period_s=period_s)
