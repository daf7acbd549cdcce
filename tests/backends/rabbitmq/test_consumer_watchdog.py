"""A subscription whose channel, qos or consume RabbitMQ never answers tries again.

pika's objects are stood in for: the test plays the broker, answering or not, and runs
the link's timers itself (no real time passes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from queuey_core.backends.rabbitmq.link import ANSWER_TIMEOUT
from queuey_core.backends.rabbitmq.subscription import RabbitSubscription
from queuey_core.queues import QueueConfig
from tests import pika_fakes


class FakeChannel(pika_fakes.FakeChannel):
    def __init__(self, answers: bool) -> None:
        super().__init__(answers)
        self.consume_ok: Callable[[Any], None] | None = None

    def add_on_cancel_callback(self, fn: object) -> None:
        pass

    def basic_qos(self, prefetch_count: int, callback: Callable[[Any], None]) -> None:
        callback(None)

    def basic_consume(self, queue: str, on_message: object, callback: Callable[[Any], None]) -> str:
        self.consume_ok = callback
        if self.answers:
            callback(None)
        return "ctag"


class FakeLink(pika_fakes.HeldTimers):
    def __init__(self) -> None:
        self.connection = pika_fakes.FakeConnection()
        self.timers: list[tuple[float, Callable[[], None]]] = []
        self.subscriptions: list[RabbitSubscription] = []
        self.recovery_timeout = 60.0
        self.reader = None  # no socket: pika (the fakes) would read every delivery


def subscription() -> tuple[RabbitSubscription, FakeLink]:
    link = FakeLink()
    sub = RabbitSubscription(object(), link, QueueConfig("q"), lambda item: None)  # type: ignore[arg-type]
    return sub, link


def test_a_channel_never_opened_is_asked_for_again_after_the_answer_timeout() -> None:
    sub, link = subscription()
    sub.open_channel(link.connection)
    assert [d for d, _ in link.timers] == [ANSWER_TIMEOUT]
    link.fire()  # no answer to channel.open
    assert len(link.connection.opening) == 2, "a second channel is asked for"
    ch = FakeChannel(answers=True)
    link.connection.opening[1](ch)
    assert sub.started.is_set()
    link.fire()  # the timer of the answered attempt does nothing
    assert len(link.connection.opening) == 2


def test_an_unanswered_consume_is_tried_on_a_new_channel_and_the_old_one_closed() -> None:
    sub, link = subscription()
    sub.open_channel(link.connection)
    silent = FakeChannel(answers=False)
    link.connection.opening[0](silent)
    assert not sub.started.is_set()
    assert not sub.consuming, "an unanswered consume is not consuming"
    link.fire()
    assert silent.closed
    assert len(link.connection.opening) == 2
    link.connection.opening[1](FakeChannel(answers=True))
    assert sub.started.is_set()
    assert sub.consuming
    assert sub.channel is not silent
    # A late consume-ok for the abandoned channel changes nothing.
    assert silent.consume_ok is not None
    silent.consume_ok(None)
    assert sub.channel is not silent


def test_no_new_channel_while_the_connection_is_down() -> None:
    sub, link = subscription()
    sub.open_channel(link.connection)
    link.connection.is_open = False
    link.fire()
    assert len(link.connection.opening) == 1, "the link reopens everything on reconnecting"
