"""Helpers of the GUI tests: open and close a main window on a recorded GPU (the fixtures and
the GUI benchmarks use the same), and wait on the signals the window listens to, not on polled
state.

pytest-qt's ``waitSignal`` disconnects its slot when the block ends; with PySide6 6.11 a queued
emission still pending for that slot (the supervisor emits log lines from its threads all the
time) is then delivered to a freed object and crashes. So the waiter here connects once per
bridge and stays connected for the bridge's life.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

from PySide6.QtCore import QEventLoop, QTimer


def open_window(
    fake_gpu: str = "rtx4090-desktop",
    *,
    store: Any = None,
    confirm_stop: Callable[[], bool] = lambda: True,
    **services: Any,
) -> Any:
    """A main window on the recorded GPU ``fake_gpu`` (NVML replayed), shown, not yet loaded;
    ``services`` are set on its :class:`AppServices` before the window is built."""
    from kvpilot.gui import app as gui_app
    from kvpilot.gui.bridge import CoreBridge
    from kvpilot.gui.services import AppServices

    app_services = AppServices(CoreBridge(), fake_gpu=fake_gpu)
    for key, value in services.items():
        setattr(app_services, key, value)
    window = gui_app.build_window(store=store, services=app_services, confirm_stop=confirm_stop)
    window.show()
    return window


def close_windows(windows: Iterable[Any]) -> None:
    """Stop every window's background work, wait for the thread pool, then dispose them."""
    from kvpilot.gui import app as gui_app
    from kvpilot.gui.workers import wait_for_pool

    windows = list(windows)
    for w in windows:
        w.services.shutdown()
    wait_for_pool(30_000)
    for w in windows:
        gui_app.dispose(w)


_waiters: weakref.WeakKeyDictionary[Any, _StateWaiter] = weakref.WeakKeyDictionary()


class _StateWaiter:
    def __init__(self, bridge: Any) -> None:
        self.wanted: tuple[str, ...] = ()
        self.loop: QEventLoop | None = None
        self.seen: list[str] = []
        bridge.server_event.connect(self._on_event)

    def _on_event(self, ev: Any) -> None:
        from kvpilot.core.vllm import supervisor as sv

        if isinstance(ev, sv.StateEvent):
            self.seen.append(ev.state)
            if self.loop is not None and ev.state in self.wanted:
                self.loop.quit()


def wait_for_state(qtbot: Any, window: Any, *states: str, timeout: int = 30_000) -> str:
    """Wait on the bridge's ``server_event`` signal until the server enters one of ``states``.

    The window handles each event before this waiter sees it (it connected first), so the
    panel shows the state when this returns. Returns the state reached.

    Raises:
        TimeoutError: none of ``states`` within ``timeout`` ms.
    """
    bridge = window.services.bridge
    waiter = _waiters.get(bridge)
    if waiter is None:
        waiter = _waiters[bridge] = _StateWaiter(bridge)
    if window.server_panel.state in states:
        return str(window.server_panel.state)
    loop = QEventLoop()
    timer = QTimer()
    timer.setSingleShot(True)
    timer.timeout.connect(loop.quit)
    waiter.wanted, waiter.loop = states, loop
    timer.start(timeout)
    try:
        loop.exec()
    finally:
        timer.stop()
        waiter.wanted, waiter.loop = (), None
    if window.server_panel.state not in states:
        raise TimeoutError(
            f"the server did not reach {states} within {timeout} ms "
            f"(states seen: {waiter.seen}, panel: {window.server_panel.state})"
        )
    return str(window.server_panel.state)


def plan_tiny_model(qtbot: Any, window: Any, model: Any) -> None:
    """Plan the tiny test model in the window as a user would (1,024-token context, 4 users,
    eager) and wait for the ranked plans of that goal."""
    gen = window.plan_control.plan_generation
    window.planner.context.setEditText("1,024")
    window.planner.users.setValue(4)
    window.planner.enforce_eager.setChecked(True)
    window.planner.set_model_ref(str(model))
    window.planner._debounce.stop()
    window.planner.goal_changed.emit(window.planner.request())
    qtbot.waitUntil(
        lambda: window.plan_control.plan_generation > gen
        and "1,024 context" in window.planner.heading.text(),
        timeout=30_000,
    )
