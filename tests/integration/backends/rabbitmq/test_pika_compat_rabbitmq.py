"""What each of pika's undocumented names does, on the real broker (in the test vhost).

tests/backends/rabbitmq/test_pika_compat.py checks that the names are there; these check
that they still behave as queuey relies on (the frames written by hand:
test_publish_frames_rabbitmq).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest

from queuey_core.backends.rabbitmq import pika_compat
from tests.conftest import require_broker
from tests.harness import AMQP_URL
from tests.integration.broker import delete_queues
from tests.integration.broker import unique

pytestmark = pytest.mark.integration


@pytest.fixture
def conn() -> Iterator[pika.BlockingConnection]:
    require_broker()
    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        yield connection
    finally:
        if connection.is_open:
            connection.close()


class Boom(Exception):
    pass


def test_server_properties_hold_the_brokers_version(conn: pika.BlockingConnection) -> None:
    version = pika_compat.server_properties(conn).get("version")
    assert isinstance(version, bytes | str), (
        f"pika {pika.__version__}: the broker's version is not in the connection's "
        f"server properties ({version!r}); RabbitMQBackend.server_version reads it"
    )
    assert version, "the version is not empty"


def test_connected_params_are_those_of_the_node_that_answered() -> None:
    require_broker()
    down = pika.URLParameters("amqp://guest:guest@127.0.0.1:1/%2F")
    down.connection_attempts, down.socket_timeout = 1, 1
    up = pika.URLParameters(AMQP_URL)
    connection = pika.BlockingConnection([down, up])
    try:
        chosen = pika_compat.connected_params(connection)
        assert (chosen.host, chosen.port) == (up.host, up.port), (
            f"pika {pika.__version__}: the connection's params are not the ones that "
            "answered; nodes.py remembers the node from them"
        )
    finally:
        connection.close()


def test_a_timer_on_the_loop_can_end_a_blocking_wait_by_terminating_the_stream(
    conn: pika.BlockingConnection,
) -> None:
    pika_compat.call_later(conn, 0.2, lambda: pika_compat.terminate_stream(conn, Boom()))
    started = time.monotonic()
    # The error given is raised out of the blocking call (direct.py catches its own).
    with pytest.raises(Boom):
        conn.process_data_events(time_limit=10)
    took = time.monotonic() - started
    assert took < 5, (
        f"pika {pika.__version__}: a timer that terminates the stream did not end a "
        f"blocking wait ({took:.1f}s); a direct publish's deadline relies on it"
    )
    assert not conn.is_open, "the connection is down after terminate_stream"


def test_a_removed_timer_does_not_fire(conn: pika.BlockingConnection) -> None:
    fired: list[bool] = []
    handle = pika_compat.call_later(conn, 0.1, lambda: fired.append(True))
    pika_compat.remove_timeout(conn, handle)
    conn.process_data_events(time_limit=0.4)
    assert fired == [], f"pika {pika.__version__}: remove_timeout did not cancel the timer"


def test_blocked_callbacks_can_be_registered_on_the_async_connection(
    conn: pika.BlockingConnection,
) -> None:
    # Called on an alarm: test_producer_faults raises one on a node of its own.
    pika_compat.on_blocked_now(conn, lambda *_: None, lambda *_: None)
    conn.process_data_events(time_limit=0)
    assert conn.is_open


def test_declares_on_the_nowait_channel_go_out_with_the_next_blocking_call(
    conn: pika.BlockingConnection,
) -> None:
    names = [unique("it.compat") for _ in range(3)]
    ch = conn.channel()
    try:
        nowait = pika_compat.nowait_channel(ch)
        for name in names[:-1]:
            nowait.queue_declare(name, auto_delete=True)
        ch.queue_declare(names[-1], auto_delete=True)
        for name in names:
            frame = ch.queue_declare(name, passive=True)
            assert frame.method.queue == name, (
                f"pika {pika.__version__}: a declare on the nowait channel did not reach "
                "the broker; admin.Declares relies on it"
            )
    finally:
        delete_queues(*names)
