"""Throughput and CPU cost of kvpilot's downloader against a local Hub stand-in (127.0.0.1).

Serves one safetensors-named file of ``--mb`` megabytes from tests/fakes/fake_hub.py and fetches
it three ways into fresh caches: plain ``hf_hub_download``, kvpilot's :class:`Downloader` with
progress events, and the same resumed from a half-written partial file. The server runs in a
child process, so the CPU seconds per GB are the client's alone. Loopback only: the rate is
bounded by the pure-Python server, not by the client.

    .venv/bin/python benchmarks/download_throughput.py [--mb 256]
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.connection
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))


def _isolate(root: Path, endpoint: str) -> Path:
    from huggingface_hub import constants

    cache = root / "hub"
    os.environ.update(
        HF_HUB_CACHE=str(cache),
        HF_HOME=str(root),
        HF_ENDPOINT=endpoint,
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )
    constants.HF_HUB_CACHE = str(cache)
    constants.HF_HOME = str(root)
    constants.HF_TOKEN_PATH = str(root / "token")
    return cache


def _serve(megabytes: int, conn: multiprocessing.connection.Connection) -> None:
    """Child process: run the stand-in Hub until told to stop; accept ("drop", n) commands."""
    from fakes.fake_hub import FakeHub

    payload = os.urandom(1_000_000) * megabytes
    with FakeHub() as hub:
        hub.add_repo("bench/model", {"config.json": b"{}", "model.safetensors": payload})
        conn.send(hub.endpoint)
        while True:
            command, value = conn.recv()
            if command == "stop":
                return
            hub.drop_after["model.safetensors"] = value
            conn.send("ok")


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256, help="file size in MB (default 256)")
    args = parser.parse_args()

    from huggingface_hub import hf_hub_download

    from kvpilot.core.hub.download import Downloader, DownloadProgress, plan_download

    size = args.mb * 1_000_000
    rows: list[tuple[str, float, float, int]] = []
    parent, child = multiprocessing.Pipe()
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(args.mb, child))
    server.start()
    try:
        endpoint = parent.recv()
        with tempfile.TemporaryDirectory() as tmp:
            _isolate(Path(tmp) / "a", endpoint)
            wall, cpu = _timed(
                lambda: hf_hub_download("bench/model", "model.safetensors", endpoint=endpoint)
            )
            rows.append(("hf_hub_download", wall, cpu, 0))

            events: list[DownloadProgress] = []
            cache = _isolate(Path(tmp) / "b", endpoint)
            plan = plan_download("bench/model", cache_dir=cache)
            wall, cpu = _timed(lambda: Downloader(plan, events.append).run())
            rows.append(("kvpilot Downloader", wall, cpu, len(events)))

            cache = _isolate(Path(tmp) / "c", endpoint)
            parent.send(("drop", size // 2))
            parent.recv()
            first = plan_download("bench/model", cache_dir=cache)
            try:
                Downloader(first, lambda _e: None, max_retries=0).run()
            except Exception as exc:  # noqa: BLE001 - the cut is the point of this step
                print(f"(first half cut as planned: {type(exc).__name__})")
            resumed: list[DownloadProgress] = []
            plan = plan_download("bench/model", cache_dir=cache)
            wall, cpu = _timed(lambda: Downloader(plan, resumed.append).run())
            rows.append(("kvpilot resume of 2nd half", wall, cpu, len(resumed)))
            resumed_bytes = resumed[-1].bytes_fetched
    finally:
        parent.send(("stop", 0))
        server.join(timeout=10)

    print(f"file: {args.mb} MB over 127.0.0.1")
    print(f"{'method':28} {'MB/s':>8} {'CPU s/GB':>9} {'events':>7}")
    for name, wall, cpu, n_events in rows:
        moved = resumed_bytes if name.startswith("kvpilot resume") else size
        print(f"{name:28} {moved / wall / 1e6:8.0f} {cpu / (moved / 1e9):9.2f} {n_events:7d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
