"""The publisher's channel: tried again when RabbitMQ leaves it unanswered, and left for
a fresh one after RabbitMQ refuses (nacks) a message on it.

pika's objects are stood in for: the test plays the broker, answering or not, and runs
the link's timers itself (no real time passes, and the link's thread never starts).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pika
from pika.spec import Basic

from queuey_core.backends.rabbitmq.link import ANSWER_TIMEOUT
from queuey_core.backends.rabbitmq.messages import Pub
from queuey_core.backends.rabbitmq.messages import pub_for
from queuey_core.backends.rabbitmq.nodes import Nodes
from queuey_core.backends.rabbitmq.nodes import Picker
from queuey_core.backends.rabbitmq.publisher import PublisherLink
from queuey_core.envelope import Envelope
from queuey_core.errors import NotEnqueuedError
from queuey_core.errors import PublishFailure
from tests import pika_fakes


class FakeChannel(pika_fakes.FakeChannel):
    def __init__(self, number: int, answers: bool) -> None:
        super().__init__(answers)
        self.channel_number = number
        self.confirm_ok: Callable[[Any], None] | None = None
        self.acks: Callable[[Any], None] | None = None

    def add_on_return_callback(self, fn: object) -> None:
        pass

    def confirm_delivery(
        self, ack_nack_callback: Callable[[Any], None], callback: Callable[[Any], None]
    ) -> None:
        self.acks = ack_nack_callback
        self.confirm_ok = callback
        if self.answers:
            callback(None)


class FakeConnection(pika_fakes.FakeConnection):
    def __init__(self) -> None:
        super().__init__()
        self.params = pika.ConnectionParameters()
        self.written: list[bytes] = []

    def add_on_connection_blocked_callback(self, fn: object) -> None:
        pass

    def add_on_connection_unblocked_callback(self, fn: object) -> None:
        pass

    def _output_marshaled_frames(self, frames: list[bytes]) -> None:
        self.written.extend(frames)


class Publisher(pika_fakes.HeldTimers, PublisherLink):
    """The link, its timers kept for the test to fire."""

    def __init__(self) -> None:
        url = "amqp://guest:guest@127.0.0.1:5672/%2F"
        nodes = Nodes([url])
        picker = Picker(nodes, [pika.URLParameters(url)])
        super().__init__(
            picker, name="publisher", where=url, connect_timeout=5, recovery_timeout=60
        )
        self.timers: list[tuple[float, Callable[[], None]]] = []
        self.fake = FakeConnection()
        self._conn = self.fake


def a_pub() -> Pub:
    envelope = Envelope(job_id=uuid.uuid4(), job_type="t.job", queue="q", enqueued_at=0, payload={})
    return pub_for("", "q", envelope)


def test_an_unanswered_channel_open_is_tried_again_and_what_waited_is_sent_on_the_new_one() -> None:
    link = Publisher()
    link.on_open(link.fake)
    assert [d for d, _ in link.timers] == [ANSWER_TIMEOUT]
    link._add([a_pub()])  # handed over while no channel is ready: it waits
    link.fire()  # channel.open never answered
    assert len(link.fake.opening) == 2, "a second channel is asked for"
    link.fake.opening[1](FakeChannel(2, answers=True))
    assert len(link.fake.written) == 1, "the waiting message went out on the new channel"
    link.fire()  # the answered attempt's timer does nothing
    assert len(link.fake.opening) == 2


def test_an_unanswered_confirm_select_is_given_up_and_a_late_answer_is_closed() -> None:
    link = Publisher()
    link.on_open(link.fake)
    silent = FakeChannel(1, answers=False)
    link.fake.opening[0](silent)
    link.fire()
    assert len(link.fake.opening) == 2
    link.fake.opening[1](FakeChannel(2, answers=True))
    # confirm.select-ok for the abandoned channel, late: it is closed, not used.
    assert silent.confirm_ok is not None
    silent.confirm_ok(None)
    assert silent.closed
    link._add([a_pub()])
    assert len(link.fake.written) == 1


def test_no_new_channel_while_the_connection_is_down() -> None:
    link = Publisher()
    link.on_open(link.fake)
    link.fake.is_open = False
    link.fire()
    assert len(link.fake.opening) == 1, "the link opens a channel again on reconnecting"


def answer(ch: FakeChannel, tag: int, ok: bool = True, multiple: bool = False) -> None:
    """The broker's basic.ack (or basic.nack) of ``tag`` on ``ch``."""
    method = Basic.Ack if ok else Basic.Nack
    assert ch.acks is not None
    ch.acks(SimpleNamespace(method=method(delivery_tag=tag, multiple=multiple)))


def ready(link: Publisher, number: int) -> FakeChannel:
    """Answer the link's latest channel.open (and its confirm.select)."""
    ch = FakeChannel(number, answers=True)
    link.fake.opening[-1](ch)
    return ch


def test_after_a_nack_the_next_message_goes_out_on_a_fresh_channel() -> None:
    link = Publisher()
    link.on_open(link.fake)
    first = ready(link, 1)
    refused, after = a_pub(), a_pub()
    link._add([refused])
    answer(first, 1, ok=False)
    error = refused.future.error()
    assert isinstance(error, NotEnqueuedError)
    assert error.reason is PublishFailure.NACKED
    assert first.closed, "the channel that refused is left"
    assert len(link.fake.opening) == 2
    link._add([after])
    assert len(link.fake.written) == 1, "nothing more is sent before the new channel is up"
    second = ready(link, 2)
    assert len(link.fake.written) == 2
    answer(second, 1)
    assert after.future.done
    assert after.future.error() is None
    assert link.renewed_channels == 1


def test_a_nack_waits_for_the_confirms_still_due_on_its_channel() -> None:
    link = Publisher()
    link.on_open(link.fake)
    ch = ready(link, 1)
    refused, pending, held = a_pub(), a_pub(), a_pub()
    link._add([refused, pending])
    answer(ch, 1, ok=False)
    link._add([held])
    assert not ch.closed, "tag 2 may still be confirmed on it"
    assert len(link.fake.written) == 1, "nothing more on a channel that refused"
    answer(ch, 2)
    assert pending.future.done
    assert pending.future.error() is None
    assert ch.closed
    ready(link, 2)
    assert len(link.fake.written) == 2, "what was held back goes out on the new channel"


def test_a_late_confirm_from_a_channel_left_behind_settles_nothing() -> None:
    link = Publisher()
    link.on_open(link.fake)
    old = ready(link, 1)
    link._add([a_pub()])
    answer(old, 1, ok=False)
    new = ready(link, 2)
    pub = a_pub()
    link._add([pub])
    answer(old, 1)  # the old channel's tag 1 is not the new channel's tag 1
    assert not pub.future.done
    answer(new, 1)
    assert pub.future.done
    assert pub.future.error() is None
