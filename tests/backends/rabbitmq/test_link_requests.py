"""Work handed to a link's thread: one wake-up per batch, and nothing handed over before
a close is left behind by it.

The link is never started: its I/O loop's wake-ups are recorded instead of run, and the
test runs what the link's thread would.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import pika
import pytest

from queuey_core.backends.rabbitmq.link import Link
from queuey_core.backends.rabbitmq.nodes import Nodes
from queuey_core.backends.rabbitmq.nodes import Picker
from queuey_core.errors import BackendError


class _Link(Link):
    """A link whose I/O loop only records the callbacks it is asked to run."""

    def __init__(self) -> None:
        url = "amqp://guest:guest@127.0.0.1:5672/%2F"
        super().__init__(
            Picker(Nodes([url]), [pika.URLParameters(url)]),
            name="test",
            where=url,
            connect_timeout=5,
            recovery_timeout=60,
        )
        self.woken: list[Callable[[], None]] = []
        self._ioloop.add_callback_threadsafe = self.woken.append
        self._ioloop.stop = lambda: None


def test_requests_handed_over_together_share_one_wake_up_and_run_in_order() -> None:
    link = _Link()
    ran: list[int] = []
    for i in range(3):
        link.submit(functools.partial(ran.append, i))
    assert len(link.woken) == 1, "one wake-up for the batch"
    link.woken[0]()
    assert ran == [0, 1, 2]
    link.submit(lambda: ran.append(3))
    assert len(link.woken) == 2, "the next batch wakes the thread again"


def test_the_wake_up_is_written_with_the_lock_let_go() -> None:
    link = _Link()
    held: list[bool] = []

    def wake(fn: Callable[[], None]) -> None:
        # Another thread can hand work over meanwhile: the lock is free.
        held.append(not link._lock.acquire(blocking=False))
        if not held[-1]:
            link._lock.release()

    link._ioloop.add_callback_threadsafe = wake
    link.submit(lambda: None)
    assert held == [False]


def test_a_request_handed_over_before_close_runs_before_the_shutdown() -> None:
    link = _Link()
    ran: list[str] = []
    link.submit(lambda: ran.append("ack"))
    link._thread = threading.Thread(target=lambda: None)  # "alive": close() wakes it
    link._thread.is_alive = lambda: True  # type: ignore[method-assign]
    link._thread.join = lambda timeout=None: None  # type: ignore[method-assign]
    link.close()
    with pytest.raises(BackendError, match="closed"):
        link.submit(lambda: ran.append("late"))
    shutdown = link.woken[-1]
    shutdown()  # the close's wake-up, even were it to run before the request's own
    assert ran == ["ack"]
    link.woken[0]()  # the request's own wake-up, later: nothing left to run twice
    assert ran == ["ack"]
