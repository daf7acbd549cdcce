"""The clocks' timers."""

from __future__ import annotations

import gc
import threading
import weakref

from queuey_core import ManualClock
from queuey_core import SystemClock


class _Payload:
    pass


def test_a_cancelled_timer_lets_go_of_its_callback_at_once() -> None:
    clock = SystemClock()
    payload = _Payload()
    ref = weakref.ref(payload)
    timer = clock.call_later(3600, lambda p=payload: None)  # type: ignore[misc]
    del payload
    timer.cancel()
    gc.collect()
    assert ref() is None, "a finished job's timeout must not keep its context for an hour"


def test_cancelled_timers_do_not_pile_up() -> None:
    clock = SystemClock()
    for _ in range(5000):
        clock.call_later(3600, lambda: None).cancel()
    assert len(clock._heap) < 1000
    assert clock.pending_timers() == 0


def test_system_timers_fire_in_order() -> None:
    clock = SystemClock()
    fired: list[int] = []
    done = threading.Event()
    clock.call_later(0.05, lambda: fired.append(2))
    clock.call_later(0.01, lambda: fired.append(1))
    clock.call_later(0.1, done.set)
    assert done.wait(5)
    assert fired == [1, 2]


def test_manual_timers_fire_when_time_is_advanced_past_them() -> None:
    clock = ManualClock()
    fired: list[str] = []
    clock.call_later(2, lambda: fired.append("b"))
    clock.call_later(1, lambda: fired.append("a"))
    cancelled = clock.call_later(1.5, lambda: fired.append("never"))
    cancelled.cancel()
    clock.advance(1.9)
    assert fired == ["a"]
    clock.advance(0.1)
    assert fired == ["a", "b"]
    assert clock.monotonic() == 2.0
