"""The front as a running server: uvicorn serving :func:`~kvpilot.core.front.proxy.build_app`.

:class:`FrontServer` runs in the foreground (``kvpilot front``: SIGINT and SIGTERM stop it
cleanly, every profile's server with it) or in a thread (the window: :meth:`FrontServer.start`
and :meth:`FrontServer.stop`). Either way the pool's servers are stopped, each confirmed gone,
before :meth:`run` returns.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import uvicorn

from kvpilot.core.front.proxy import build_app

if TYPE_CHECKING:
    from types import FrameType

    from kvpilot.core.front.pool import Pool

#: seconds the window waits for the front's thread to stop every server
STOP_WAIT_S = 120.0


class _Server(uvicorn.Server):
    """uvicorn's server, stopped by SIGINT/SIGTERM without raising the signal again after the
    shutdown (uvicorn's own handling would end the process by the signal's default action
    once the servers are stopped, which a service manager reads as a crash)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handle(_sig: int, _frame: FrameType | None) -> None:
            self.should_exit = True

        old = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)


class FrontServer:
    """One front on ``host``:``port`` for ``pool`` (``api_key`` guards it; None: none)."""

    def __init__(self, pool: Pool, host: str, port: int, *, api_key: str | None = None,
                 log_level: str = "warning") -> None:
        self.pool = pool
        self.host = host
        self.port = port
        self.app = build_app(pool, api_key=api_key)
        config = uvicorn.Config(self.app, host=host, port=port, log_level=log_level,
                                lifespan="on", access_log=False, timeout_graceful_shutdown=30)
        self._server = _Server(config)
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the front (IPv6 in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def started(self) -> bool:
        """The front listens."""
        return bool(self._server.started)

    def run(self) -> None:
        """Serve until SIGINT/SIGTERM or :meth:`stop` (blocking); the servers are stopped."""
        self._server.run()

    def start(self) -> None:
        """Serve from a thread (returns at once; see :attr:`started`)."""

        def serve() -> None:
            try:
                self._server.run()
            except BaseException as exc:  # noqa: BLE001 - kept for the window to show
                self.error = exc

        self._thread = threading.Thread(target=serve, name="kvpilot-front", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = STOP_WAIT_S) -> bool:
        """Ask the front to stop and wait (True when its thread ended in ``timeout_s``)."""
        self._server.should_exit = True
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def status(self) -> dict[str, Any]:
        """The pool's status plus where the front listens."""
        return {**self.pool.status(), "base_url": self.base_url, "running": self.started}
