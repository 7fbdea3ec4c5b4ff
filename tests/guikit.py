"""Helpers of the GUI tests: wait on the signals the window listens to, not on polled state.

pytest-qt's ``waitSignal`` disconnects its slot when the block ends; with PySide6 6.11 a queued
emission still pending for that slot (the supervisor emits log lines from its threads all the
time) is then delivered to a freed object and crashes. So the waiter here connects once per
bridge and stays connected for the bridge's life.
"""

from __future__ import annotations

import weakref
from typing import Any

from PySide6.QtCore import QEventLoop, QTimer

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
