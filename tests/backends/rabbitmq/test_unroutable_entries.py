"""An entry of ``queuey.unroutable`` is read from what RabbitMQ leaves on it: its reason
names the queue that did not exist, and its time is the last ``x-death``'s.

The headers are those RabbitMQ 3.10 put on a message delayed 1,100 ms for a missing
queue (levels 10, 6, 3 and 2 of the ladder), as pika reads them.
"""

from __future__ import annotations

import datetime
import uuid
from pathlib import Path
from typing import Any

import pytest
from pika.spec import BasicProperties

from queuey_core import DeadLetter
from queuey_core import Envelope
from queuey_core.backends.rabbitmq import topology
from queuey_core.backends.rabbitmq.dead_letter_reading import dead_letter_of
from queuey_core.backends.rabbitmq.dead_letter_rows import letter_of
from queuey_core.backends.rabbitmq.dead_letter_rows import row_of
from queuey_core.results.dead_letter_sql import Stored

KEY = topology.delay_routing_key(1100, "pc.nosuch")
LEFT_THE_LADDER = datetime.datetime(2026, 12, 2, 1, 26, 1, tzinfo=datetime.UTC)
EARLIER = LEFT_THE_LADDER - datetime.timedelta(seconds=1)


def death(level: int, exchange: int, when: datetime.datetime) -> dict[str, Any]:
    return {
        "count": 1,
        "exchange": f"queuey.delay.{exchange}",
        "queue": f"queuey.delay.{level}",
        "reason": "expired",
        "routing-keys": [KEY],
        "time": when,
    }


#: Not in order of time: RabbitMQ moves only a queue dead-lettering again to the front.
HEADERS = {
    "x-death": [
        death(6, 9, EARLIER),
        death(2, 2, LEFT_THE_LADDER),
        death(10, 35, EARLIER),
        death(3, 5, EARLIER),
    ],
    "x-first-death-exchange": "queuey.delay.35",
    "x-first-death-queue": "queuey.delay.10",
    "x-first-death-reason": "expired",
}


def envelope() -> Envelope:
    return Envelope(
        job_id=uuid.uuid4(), job_type="greet", queue="pc.nosuch", enqueued_at=1, payload={}
    )


def test_an_unroutable_entry_names_its_missing_queue_and_when_it_left_the_ladder() -> None:
    env = envelope()
    dead = dead_letter_of(BasicProperties(headers=HEADERS), env.encode(), 1, KEY)
    assert dead == DeadLetter(
        env,
        "unroutable: queue 'pc.nosuch' did not exist (or was not bound to "
        "queuey.delay.deliver) when its delay ended",
        int(LEFT_THE_LADDER.timestamp()) * 1000,
        str(env.job_id),
    )


def test_an_unroutable_entry_that_took_no_delay_names_its_routing_key() -> None:
    dead = dead_letter_of(BasicProperties(), b"not json", 1, "no.such.key")
    assert dead.reason == (
        "unroutable: no queue is bound to queuey.delay.deliver for routing key 'no.such.key'"
    )
    assert dead.dead_at is None, "no x-death: no time to give"


def test_a_rejected_dead_letter_takes_its_time_from_x_death_too() -> None:
    env = envelope()
    rejected = {"x-death": [{**death(0, 0, LEFT_THE_LADDER), "reason": "rejected"}]}
    dead = dead_letter_of(BasicProperties(headers=rejected), env.encode(), 1)
    assert dead.reason == "dead-lettered by RabbitMQ (rejected)"
    assert dead.dead_at == int(LEFT_THE_LADDER.timestamp()) * 1000


def test_an_entry_that_left_the_ladder_within_its_enqueue_second_is_not_dead_before_it() -> None:
    # x-death's time is whole seconds: a job enqueued at 01:26:01.700 with a delay of
    # 100 ms leaves the ladder at 01:26:01.8, which x-death says is 01:26:01.000.
    enqueued_at = int(LEFT_THE_LADDER.timestamp()) * 1000 + 700
    env = envelope().model_copy(update={"enqueued_at": enqueued_at})
    dead = dead_letter_of(BasicProperties(headers=HEADERS), env.encode(), 1, KEY)
    assert dead.dead_at == enqueued_at, "dead_at never precedes enqueued_at"
    row = row_of(topology.UNROUTABLE, BasicProperties(headers=HEADERS), env.encode())
    assert row.dead_at == enqueued_at, "nor in a row of the job store's table"
    stored_earlier = Stored(1, row._replace(dead_at=enqueued_at - 700))
    assert letter_of(stored_earlier).dead_at == enqueued_at, "nor read from an older row"


def test_queueys_own_headers_win_over_what_the_broker_left() -> None:
    env = envelope()
    ours = {**HEADERS, topology.REASON_HEADER: "fatal error: x", topology.DEAD_AT_HEADER: 5}
    dead = dead_letter_of(BasicProperties(headers=ours), env.encode(), 1, KEY)
    assert (dead.reason, dead.dead_at) == ("fatal error: x", 5)


@pytest.mark.parametrize(
    ("key", "queue"),
    [
        (topology.delay_routing_key(1, "a.b.c"), "a.b.c"),
        (topology.delay_routing_key(2**36 - 1, "q"), "q"),
        ("no.such.key", None),
        ("0." * 35 + "0", None),
        ("0." * 36, None),
        ("0." * 35 + "2.q", None),
    ],
)
def test_the_queue_of_a_delay_routing_key(key: str, queue: str | None) -> None:
    assert topology.queue_of_delay_key(key) == queue


def test_protocol_md_shows_the_reason_the_code_gives() -> None:
    doc = " ".join(
        (Path(__file__).resolve().parents[3] / "docs" / "protocol.md").read_text().split()
    )
    reason = dead_letter_of(BasicProperties(), b"{}", 1, topology.delay_routing_key(5, "nosuch"))
    assert f"`{reason.reason}`" in doc
    assert "no `x-queuey-*` header" in doc
