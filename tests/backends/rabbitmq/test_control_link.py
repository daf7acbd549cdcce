"""The RabbitMQ control link's side of ``reply_to``, without a broker: which requests it
answers and where, which it drops (counted), and how its probe teaches it its node.

The channel is a fake that records what the link publishes and acks; the addresses are
shaped as RabbitMQ 3.10 shapes them (see test_control_reply_to.py beside it).
"""

from __future__ import annotations

import base64
import logging
import struct
from typing import Any

import pika
import pytest
from pika.spec import Basic
from pika.spec import BasicProperties

from queuey_core.backends.rabbitmq.control import REPLY_QUEUE_PREFIX
from queuey_core.backends.rabbitmq.control import REPLY_TO
from queuey_core.backends.rabbitmq.control import ControlLink
from queuey_core.backends.rabbitmq.nodes import Nodes
from tests.pika_fakes import FakeChannel

KEY = "yQoi2vrIuazzx7RGBNjHmw=="


def direct(node: bytes) -> str:
    raw = b"\x83Xv" + struct.pack(">H", len(node)) + node + struct.pack(">III", 5, 0, 1)
    return f"{REPLY_TO}.{base64.b64encode(raw).decode()}.{KEY}"


class Channel(FakeChannel):
    def __init__(self) -> None:
        super().__init__(answers=True)
        self.published: list[tuple[str, bytes, Any]] = []
        self.acked: list[int] = []

    def basic_publish(self, exchange: str, routing_key: str, body: bytes, props: Any) -> None:
        self.published.append((routing_key, body, props))

    def basic_ack(self, tag: int) -> None:
        self.acked.append(tag)


@pytest.fixture
def link() -> ControlLink:
    """A link never started: the test hands it deliveries as its thread would."""
    url = "amqp://guest:guest@127.0.0.1:1/%2F"
    return ControlLink(
        lambda body: b"reply to " + body,
        nodes=Nodes([url]).picker(pika.URLParameters),
        name="control",
        where=url,
        connect_timeout=1.0,
        recovery_timeout=1.0,
    )


def deliver(link: ControlLink, ch: Channel, props: BasicProperties, body: bytes = b"{}") -> None:
    tag = len(ch.acked) + 1
    link._request(ch, Basic.Deliver(delivery_tag=tag), props, body)
    assert ch.acked[-1] == tag, "every request is acked, answered or not"


def test_a_reply_queue_of_the_control_exchange_is_answered(link: ControlLink) -> None:
    ch = Channel()
    queue = REPLY_QUEUE_PREFIX + "0123abcd"
    deliver(link, ch, BasicProperties(reply_to=queue, correlation_id="c1"))
    [(to, body, props)] = ch.published
    assert (to, body, props.correlation_id) == (queue, b"reply to {}", "c1")
    assert link.refused == 0


def test_a_direct_address_is_answered_only_once_the_probe_taught_the_node(
    link: ControlLink,
) -> None:
    ch = Channel()
    address = direct(b"reply@9248884")
    deliver(link, ch, BasicProperties(reply_to=address, correlation_id="c1"))
    assert ch.published == [], "its node is not known yet"
    probe = BasicProperties(reply_to=address, correlation_id=link._probe)
    deliver(link, ch, probe, b"")
    assert ch.published == [], "the probe is not answered"
    assert link.nodes == {9248884}
    deliver(link, ch, BasicProperties(reply_to=address, correlation_id="c2"))
    assert [to for to, _, _ in ch.published] == [address]
    assert link.refused == 1


@pytest.mark.parametrize(
    "reply_to",
    [
        None,
        "",
        "ctl.jobs",
        "queuey.control.host.1.abc",  # another worker's control queue
        REPLY_QUEUE_PREFIX + "has space",
        REPLY_QUEUE_PREFIX,
        "amq.rabbitmq.reply-to.!!!!.abcd",
        direct(b"evil@nowhere"),
        direct(b"reply@12345"),  # well-formed, but a node this worker never saw
    ],
)
def test_any_other_reply_to_is_dropped_and_counted(link: ControlLink, reply_to: str | None) -> None:
    ch = Channel()
    deliver(
        link,
        ch,
        BasicProperties(reply_to=direct(b"reply@9248884"), correlation_id=link._probe),
        b"",
    )
    deliver(link, ch, BasicProperties(reply_to=reply_to, correlation_id="c"))
    assert ch.published == []
    assert link.refused == 1


def test_a_flood_of_refusals_is_one_warning_and_the_rest_debug(
    link: ControlLink, caplog: pytest.LogCaptureFixture
) -> None:
    ch = Channel()
    with caplog.at_level(logging.DEBUG, logger="queuey_core.backends.rabbitmq.control"):
        for _ in range(100):
            deliver(link, ch, BasicProperties(reply_to=direct(b"reply@1"), correlation_id="c"))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert link.refused == 100
