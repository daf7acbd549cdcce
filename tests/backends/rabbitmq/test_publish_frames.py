"""The publisher link writes a batch's frames itself: byte for byte what pika would write.

``enqueue_many``'s hot path skips pika's generic marshalling (and its BasicProperties):
these tests hold its frames and properties to pika's own, for any message.
"""

from __future__ import annotations

import uuid
from typing import Any

import pika.connection
from hypothesis import given
from hypothesis import strategies as st
from pika import frame
from pika.spec import Basic
from pika.spec import BasicProperties

from queuey_core.backends.rabbitmq.frames import FRAME_OVERHEAD
from queuey_core.backends.rabbitmq.frames import encoded_properties
from queuey_core.backends.rabbitmq.frames import publish_frames
from queuey_core.backends.rabbitmq.frames import publish_method
from queuey_core.backends.rabbitmq.messages import Pub
from queuey_core.backends.rabbitmq.messages import properties
from queuey_core.backends.rabbitmq.messages import pub_for
from queuey_core.envelope import EncodedEnvelope


class _Recorder:
    """Just enough of a pika connection for its ``_send_message`` to run."""

    def __init__(self, body_max: int) -> None:
        self._body_max_length = body_max
        self.written: list[bytes] = []

    def _output_marshaled_frames(self, frames: list[bytes]) -> None:
        self.written.extend(frames)


def pika_frames(number: int, body_max: int, pub: Pub, props: BasicProperties) -> bytes:
    """What pika's own basic_publish (mandatory) writes for ``pub``."""
    recorder = _Recorder(body_max)
    method = Basic.Publish(exchange=pub.exchange, routing_key=pub.routing_key, mandatory=True)
    send: Any = pika.connection.Connection._send_message
    send(recorder, number, method, (props, pub.body))
    return b"".join(recorder.written)


def method_of(number: int, pub: Pub) -> bytes:
    publish = Basic.Publish(exchange=pub.exchange, routing_key=pub.routing_key, mandatory=True)
    marshalled: bytes = frame.Method(number, publish).marshal()
    return marshalled


def our_frames(number: int, body_max: int, pub: Pub) -> bytes:
    """What the publisher link writes for ``pub`` (its method as :func:`publish_method`)."""
    method = publish_method(number, pub.exchange, pub.routing_key)
    assert method == method_of(number, pub), "the publish method differs from pika's"
    return publish_frames(number, body_max, method, pub.body, props=pub.props, header=pub.header)


names = st.text(max_size=60).filter(lambda s: len(s.encode()) <= 255)
encoded_envelopes = st.builds(
    EncodedEnvelope,
    job_id=st.uuids(),
    job_type=names.filter(bool),
    queue=names.filter(bool),
    priority=st.integers(min_value=0, max_value=255),
    enqueued_at=st.integers(min_value=0, max_value=2**63 - 1),
    body=st.binary(max_size=64),
)


@given(encoded_envelopes)
def test_encoded_properties_are_what_pika_encodes_for_the_envelope(
    envelope: EncodedEnvelope,
) -> None:
    expected = b"".join(properties(envelope).encode())
    assert encoded_properties(envelope) == expected, "the hot path's properties differ"


@given(
    envelope=encoded_envelopes,
    body=st.binary(max_size=300),
    number=st.integers(min_value=1, max_value=65535),
    body_max=st.integers(min_value=1, max_value=120),
    exchange=names,
    routing_key=names,
)
def test_the_frames_of_an_encoded_message_are_pikas(
    envelope: EncodedEnvelope,
    body: bytes,
    number: int,
    body_max: int,
    exchange: str,
    routing_key: str,
) -> None:
    envelope = EncodedEnvelope(
        envelope.job_id,
        envelope.job_type,
        envelope.queue,
        envelope.priority,
        envelope.enqueued_at,
        body,
    )
    pub = pub_for(exchange, routing_key, envelope)
    assert pub.props is None, "the hot path builds no pika properties"
    assert pub.header is not None, "the hot path encodes its properties up front"
    assert pub.message_id == str(envelope.job_id), "returns are matched by message id"
    ours = our_frames(number, body_max, pub)
    assert ours == pika_frames(number, body_max, pub, properties(envelope)), (
        f"the frames of a {len(body)}-byte body split at {body_max} differ from pika's"
    )


@given(
    body=st.binary(max_size=300),
    body_max=st.integers(min_value=1, max_value=120),
    headers=st.none() | st.dictionaries(st.text(max_size=10), st.text(max_size=10)),
    message_id=st.none() | st.text(max_size=20),
)
def test_the_frames_of_a_message_with_pika_properties_are_pikas(
    body: bytes, body_max: int, headers: dict[str, str] | None, message_id: str | None
) -> None:
    props = BasicProperties(delivery_mode=2, message_id=message_id, headers=headers)
    pub = Pub("", "q.dlq", body, props, uuid.uuid4())
    ours = our_frames(7, body_max, pub)
    assert ours == pika_frames(7, body_max, pub, props)


def test_a_body_is_split_as_pika_splits_it_under_the_default_frame_max() -> None:
    body_max = 131072 - FRAME_OVERHEAD  # RabbitMQ's default frame_max
    envelope = EncodedEnvelope(uuid.uuid4(), "big", "q", 0, 1_700_000_000_000, b"x" * 300_000)
    pub = pub_for("", "q", envelope)
    ours = our_frames(1, body_max, pub)
    assert ours == pika_frames(1, body_max, pub, properties(envelope))
    assert ours.count(b"\x03\x00\x01") >= 3, "a 300 kB body takes three body frames"


def test_an_encoded_envelope_amqp_cannot_label_falls_back_to_pika_properties() -> None:
    # The producer's checks rule this out; if one came, the link must fail it alone.
    envelope = EncodedEnvelope(uuid.uuid4(), "t" * 300, "q", 0, 0, b"{}")
    pub = pub_for("", "q", envelope)
    assert pub.header is None, "no spliced properties for a type over 255 bytes"
    assert pub.props is not None
    assert pub.message_id == str(envelope.job_id)


def test_pika_still_has_the_output_the_publisher_link_writes_through() -> None:
    # The link writes its frames through this private method of pika's (pinned below
    # pika 2 in pyproject.toml): a pika without it must fail here, not in production.
    assert callable(getattr(pika.connection.Connection, "_output_marshaled_frames", None))
