"""A link closed while its connection is still in the AMQP handshake ends its thread
cleanly (no exception out of the I/O loop), and promptly.

pika 1.4 reports a close during the handshake to its own connection workflow as the
*class* ``AMQPConnectionWorkflowAborted`` rather than an instance, and then asserts; the
link aborts the workflow instead (pika_compat.abort_opening). The broker here is a
socket that accepts and never answers, so the handshake never ends by itself.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pika
import pytest

from queuey_core.backends.rabbitmq.link import Link
from queuey_core.backends.rabbitmq.nodes import Nodes
from queuey_core.backends.rabbitmq.nodes import Picker


@pytest.fixture
def silent_broker() -> Iterator[tuple[int, list[bytes]]]:
    """A port that accepts connections and never says a word; what it was sent."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []
    heard: list[bytes] = []

    def accept() -> None:
        try:
            while True:
                conn, _ = server.accept()
                accepted.append(conn)
                heard.append(conn.recv(64))
        except OSError:
            return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], heard
    server.close()
    for conn in accepted:
        conn.close()


@pytest.fixture
def thread_errors(monkeypatch: pytest.MonkeyPatch) -> list[BaseException | None]:
    """Exceptions that escaped any thread during the test."""
    seen: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_value))
    return seen


def test_a_link_closed_during_the_handshake_stops_cleanly(
    silent_broker: tuple[int, list[bytes]],
    thread_errors: list[BaseException | None],
) -> None:
    port, heard = silent_broker
    url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    link = Link(
        Picker(Nodes([url]), [pika.URLParameters(url)]),
        name="handshake",
        where=url,
        connect_timeout=30,
        recovery_timeout=60,
    )
    link.start(wait=False)
    deadline = time.monotonic() + 10
    while not heard:  # pika sent its protocol header and waits for Connection.Start
        assert time.monotonic() < deadline, "the link never began its handshake"
        time.sleep(0.005)
    assert heard[0].startswith(b"AMQP")
    link.close(timeout=5)
    assert not link._thread.is_alive(), "the link's thread is still running"
    assert thread_errors == []
