"""The guards a hostile message or handler meets, one at a time, without a worker thread.

Envelope validation, the text of a handler's error, the headers of a dead letter,
reading a dead letter back whatever its headers hold, and the redelivery count.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Any

import pytest
from pika.spec import BasicProperties
from pydantic import ValidationError

from queuey_core import DeadLetter
from queuey_core import DecodeError
from queuey_core import Deferred
from queuey_core import Envelope
from queuey_core import Fatal
from queuey_core import ManualClock
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import Retryable
from queuey_core import UndecodableDeadLetter
from queuey_core import limits
from queuey_core.backends.rabbitmq import topology
from queuey_core.backends.rabbitmq.dead_letter_reading import dead_letter_of
from queuey_core.envelope import MAX_COUNT
from queuey_core.handlers import Handler
from queuey_core.worker.dispatch import Dispatcher
from queuey_core.worker.dispatch import Route
from queuey_core.worker.handle import WorkerHandle
from queuey_core.worker.outcome import Kind
from queuey_core.worker.outcome import call_handler
from queuey_core.worker.outcome import handler_error_text
from queuey_core.worker.redelivery import MAX_REDELIVERIES
from queuey_core.worker.redelivery import RedeliveryCounter
from tests.support import ALPHA
from tests.support import Greet


def envelope(**fields: Any) -> Envelope:
    values: dict[str, Any] = {
        "job_id": uuid.uuid4(),
        "job_type": Greet.NAME,
        "queue": ALPHA,
        "enqueued_at": 1_700_000_000_000,
        "payload": {"name": "ada"},
    }
    return Envelope(**{**values, **fields})


# -- the envelope ------------------------------------------------------------------------


def test_every_envelope_is_written_with_its_format_version() -> None:
    assert json.loads(envelope().encode())["v"] == 1


def test_an_envelope_of_another_version_is_refused_whatever_else_it_holds() -> None:
    body = json.dumps({"v": 2, "job_type": 7}).encode()
    with pytest.raises(DecodeError, match=r"unknown envelope version 2$"):
        Envelope.decode(body)


def test_the_job_type_must_fit_an_amqp_short_string() -> None:
    envelope(job_type="é" * 127)  # 254 bytes
    with pytest.raises(ValidationError, match="longer than 255 UTF-8 bytes"):
        envelope(job_type="é" * 128)
    with pytest.raises(ValidationError, match="control character"):
        envelope(job_type="tab\there")


def test_counters_stop_where_a_signed_32_bit_header_does() -> None:
    last = envelope(attempt=MAX_COUNT, deferrals=MAX_COUNT)
    with pytest.raises(ValueError, match="last one"):
        last.next_attempt()
    with pytest.raises(ValueError, match="most an envelope can count"):
        last.deferred(0)
    with pytest.raises(ValidationError, match="attempt"):
        envelope(attempt=MAX_COUNT + 1)


def test_a_decode_error_names_the_field_and_never_echoes_its_value() -> None:
    body = json.dumps({**json.loads(envelope().encode()), "job_type": "secret\x00" * 40})
    with pytest.raises(DecodeError) as err:
        Envelope.decode(body.encode())
    assert str(err.value).startswith("not a queuey envelope: job_type: ")
    assert "secret" not in str(err.value)


# -- a handler's error, as text ---------------------------------------------------------


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


class Weird(str):
    def __str__(self) -> str:
        return "\ud800 weird"


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (Fatal("bad \udc80"), "bad \\udc80"),
        (Unprintable(), "Unprintable: (its message could not be read)"),
        (Retryable(Weird("x")), "\\ud800 weird"),
        (ValueError("x" * 10_000), "ValueError: " + "x" * 1997 + "..."),
        (SystemExit(), "SystemExit"),
    ],
)
def test_describing_a_handler_error_never_raises_and_always_encodes(
    exc: BaseException, text: str
) -> None:
    described = handler_error_text(exc)
    assert described == text
    described.encode("utf-8")


def test_a_deferred_built_around_its_checks_becomes_a_nan_delay() -> None:
    d = Deferred(1)
    del d.delay

    def handle(job: Greet, ctx: Any) -> None:
        raise d

    outcome = call_handler(Handler(Greet, handle), Greet(name="x"), None)  # type: ignore[arg-type]
    assert outcome.kind is Kind.DEFERRED
    assert math.isnan(outcome.delay)


# -- dead-letter headers ----------------------------------------------------------------


def test_dead_letter_headers_are_printable_ascii_and_bounded_whatever_the_reason() -> None:
    reason = "fatal error: \udc80\x00\u2028é" + "x" * 5000
    headers = topology.dead_letter_headers(reason, queue="q", dead_at=1, attempt=3)
    text = headers[topology.REASON_HEADER]
    assert text.isascii()
    assert text.isprintable()
    assert text.startswith("fatal error: \\udc80\\x00\\u2028\\xe9")
    assert len(text) == topology.MAX_REASON
    BasicProperties(headers=headers).encode()  # pika can put them on the wire


def test_an_attempt_a_header_cannot_carry_is_left_out() -> None:
    headers = topology.dead_letter_headers("r", queue="q", dead_at=1, attempt=2**63)
    assert topology.ATTEMPT_HEADER not in headers


def test_the_worker_checks_delays_against_what_the_ladder_holds() -> None:
    assert limits.MAX_DELAY_MS == topology.MAX_DELAY_MS == 2**topology.DELAY_LEVELS - 1


# -- reading a dead letter back ---------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {topology.DEAD_AT_HEADER: "abc", topology.REASON_HEADER: 42},
        {topology.DEAD_AT_HEADER: 2**80, topology.REASON_HEADER: None},
        {topology.DEAD_AT_HEADER: True, "x-death": "not a list"},
        {topology.DEAD_AT_HEADER: -5, "x-death": [{"reason": 7}]},
        {topology.DEAD_AT_HEADER: [1, 2], "x-death": [b"not a table"]},
    ],
)
def test_unreadable_dead_letter_headers_show_as_unknown(headers: dict[str, Any]) -> None:
    env = envelope()
    dead = dead_letter_of(BasicProperties(headers=headers), env.encode(), 1)
    assert dead == DeadLetter(env, "unknown", None, str(env.job_id))


def test_a_reason_in_bytes_or_from_rabbitmq_is_read() -> None:
    env = envelope()
    ours = BasicProperties(headers={topology.REASON_HEADER: b"fatal \xff", "x-death": []})
    assert dead_letter_of(ours, env.encode(), 1).reason == "fatal \\ufffd"
    theirs = BasicProperties(headers={"x-death": [{"reason": b"expired"}]})
    assert dead_letter_of(theirs, env.encode(), 1).reason == "dead-lettered by RabbitMQ (expired)"


def test_a_body_that_is_not_an_envelope_is_read_back_with_a_preview_and_a_handle() -> None:
    body = b"\x00" + b"y" * 300
    by_id = dead_letter_of(BasicProperties(message_id="m-7"), body, 4)
    by_position = dead_letter_of(BasicProperties(message_id="#sneaky", headers=None), body, 4)
    assert isinstance(by_id, UndecodableDeadLetter)
    assert by_id.handle == "m-7"
    assert by_position.handle == "#4", "an id that looks like a position is not used"
    assert by_id.preview == "\\x00" + "y" * 113 + "... (301 bytes)"
    assert by_id.error.startswith("not a queuey envelope: Invalid JSON")
    assert (by_id.reason, by_id.dead_at) == ("unknown", None)


# -- redeliveries -----------------------------------------------------------------------


def test_the_redelivery_count_is_bounded_and_restarts_on_a_fresh_delivery() -> None:
    counter = RedeliveryCounter(remembered=3)
    assert [counter.note("a", True) for _ in range(3)] == [1, 2, 3]
    assert counter.note("a", False) == 0, "published afresh: counted from zero"
    for key in "bcde":
        counter.note(key, True)
    assert len(counter) == 3, "the least recently seen are forgotten"
    assert counter.note("b", True) == 1


class Unsettled:
    """A delivery whose every settle is lost, as on a channel that keeps dying."""

    def __init__(self, env: Envelope, log: list[str]) -> None:
        self.envelope = env
        self.queue = ALPHA
        self.redelivered = True
        self._log = log

    def is_stale(self) -> bool:
        return False

    def ack(self) -> None:
        self._log.append("ack")
        raise OSError("connection reset")

    def dead_letter(self, reason: str) -> None:
        self._log.append(f"dead: {reason}")

    def retry(self, next_envelope: Envelope, delay: float) -> None:
        raise AssertionError("not expected")

    def defer(self, next_envelope: Envelope, delay: float) -> None:
        raise AssertionError("not expected")


def test_a_message_redelivered_again_and_again_is_dead_lettered_unrun() -> None:
    runs: list[str] = []
    log: list[str] = []
    queues = QueueSet([QueueConfig(ALPHA)])
    handle = WorkerHandle()
    dispatcher = Dispatcher(
        {
            Greet.NAME: Route(
                Handler(Greet, lambda j, c: runs.append(j.name)),
                Greet,
                queues[ALPHA],
                queues[ALPHA].retry,
            )
        },
        handle=handle,
        clock=ManualClock(),
        job_timeout=None,
        timeout_grace=1,
    )
    env = envelope()
    for _ in range(MAX_REDELIVERIES):
        dispatcher.dispatch(Unsettled(env, log))
    assert len(runs) == MAX_REDELIVERIES - 1, "it ran until the count ran out"
    assert log[-1] == f"dead: redelivered {MAX_REDELIVERIES} times without being settled"
    assert handle.settle_failures() == MAX_REDELIVERIES - 1
