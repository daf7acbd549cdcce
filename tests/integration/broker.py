"""Helpers that reach around queuey to look at or poke the real broker."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import pika

from tests.conftest import require_broker
from tests.harness import AMQP_URL
from tests.harness import VHOST

#: ``host:port`` of the test broker, for URLs the tests make up (other vhosts, users).
HOSTPORT: str = f"{urlsplit(AMQP_URL).hostname}:{urlsplit(AMQP_URL).port or 5672}"


def rabbitmqctl(*args: str) -> str:
    """Run rabbitmqctl and return what it printed."""
    done = subprocess.run(
        ["rabbitmqctl", *args], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


def list_json(kind: str, *fields: str) -> list[dict[str, Any]]:
    """``rabbitmqctl list_<kind>`` as a list of dicts (of the test vhost, where that
    applies: connections are listed for every vhost)."""
    scope = [] if kind == "connections" else ["-p", VHOST]
    out = rabbitmqctl(f"list_{kind}", *scope, "--formatter", "json", *fields)
    rows: list[dict[str, Any]] = json.loads(out)
    for row in rows:
        # Arguments come as [name, type, value] triples.
        if isinstance(row.get("arguments"), list):
            row["arguments"] = {name: value for name, _type, value in row["arguments"]}
    return rows


@contextmanager
def channel(url: str = AMQP_URL) -> Iterator[Any]:
    """A raw pika channel, for what queuey would not do."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        yield conn.channel()
    finally:
        if conn.is_open:
            conn.close()


def close_all_connections(why: str) -> None:
    """Close every connection of the tests' virtual host (never the whole shared broker)."""
    rabbitmqctl("close_all_connections", "-p", VHOST, why)


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:8]}"


def delete_queues(*names: str) -> None:
    with channel() as ch:
        for name in names:
            ch.queue_delete(name)
            ch.queue_delete(f"{name}.dlq")


def take_job_ids(queue: str, url: str = AMQP_URL) -> list[uuid.UUID]:
    """Take every message off ``queue``: their job ids, duplicates included."""
    ids: list[uuid.UUID] = []
    with channel(url) as ch:
        left = int(ch.queue_declare(queue, passive=True).method.message_count)
        if left == 0:
            return ids
        ch.basic_qos(prefetch_count=1000)
        for method, props, _ in ch.consume(queue, auto_ack=True, inactivity_timeout=2):
            if method is None:
                break
            ids.append(uuid.UUID(props.message_id))
            left -= 1
            if left == 0:
                break
        ch.cancel()
    return ids


def add_vhost(name: str) -> None:
    """Make virtual host ``name`` (if it is not there) and let guest do anything in it."""
    rabbitmqctl("add_vhost", name)
    rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")


@contextmanager
def own_vhost(name: str) -> Iterator[str]:
    """A virtual host of the test's own (the broker must answer), deleted afterwards."""
    require_broker()
    add_vhost(name)
    try:
        yield name
    finally:
        rabbitmqctl("delete_vhost", name)


@contextmanager
def scratch_queue(prefix: str) -> Iterator[str]:
    """A queue name of the test's own (the broker must answer); the queue and its
    dead-letter queue are deleted afterwards."""
    require_broker()
    name = unique(prefix)
    try:
        yield name
    finally:
        delete_queues(name)


@contextmanager
def clean_queues(*names: str) -> Iterator[None]:
    """The broker must answer; ``names`` and their dead-letter queues are deleted before
    the block and after it."""
    require_broker()
    delete_queues(*names)
    try:
        yield
    finally:
        delete_queues(*names)


def take_all(queue: str) -> list[tuple[Any, bytes]]:
    """Every message on ``queue`` as (properties, body), taken off it."""
    found: list[tuple[Any, bytes]] = []
    with channel() as ch:
        while True:
            method, props, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                return found
            found.append((props, body))
