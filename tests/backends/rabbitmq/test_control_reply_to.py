"""Which ``reply_to`` a worker's RabbitMQ control link replies to (no broker needed).

RabbitMQ 3.10 crashes the replying channel, and closes the worker's whole control
connection, when a reply is published to a direct reply-to address whose pid does not
decode or names a node hash outside the cluster. :func:`reply_node` accepts only the
shape RabbitMQ makes; the link then also requires the node hash to be one it learned.
The addresses below were read from the broker on our machines (3.10.8).
"""

from __future__ import annotations

import base64
import struct

import pytest

from queuey_core.backends.rabbitmq.control import REPLY_QUEUE_PREFIX
from queuey_core.backends.rabbitmq.control import REPLY_TO
from queuey_core.backends.rabbitmq.control import reply_node

#: A real one: NEW_PID_EXT of node ``reply@9248884``, then the 16-byte key.
REAL = "amq.rabbitmq.reply-to.g1h2AA1yZXBseUA5MjQ4ODg0AAAVpgAAAAhrD22z.yQoi2vrIuazzx7RGBNjHmw=="
KEY = "yQoi2vrIuazzx7RGBNjHmw=="


def address(raw: bytes, key: str = KEY) -> str:
    return f"{REPLY_TO}.{base64.b64encode(raw).decode()}.{key}"


def new_pid(node: bytes, tag: int = 118) -> bytes:
    size = struct.pack(">H", len(node)) if tag in (118, 100) else bytes([len(node)])
    return b"\x83X" + bytes([tag]) + size + node + struct.pack(">III", 5, 0, 1)


def test_a_real_direct_reply_to_address_names_its_node() -> None:
    assert reply_node(REAL) == 9248884


@pytest.mark.parametrize("tag", [118, 119, 100, 115])
def test_every_atom_encoding_of_the_node_is_read(tag: int) -> None:
    assert reply_node(address(new_pid(b"reply@42", tag))) == 42


def test_the_older_pid_encoding_is_read() -> None:
    raw = b"\x83gv" + struct.pack(">H", 8) + b"reply@42" + struct.pack(">IIB", 5, 0, 1)
    assert reply_node(address(raw)) == 42


@pytest.mark.parametrize(
    "forged",
    [
        "amq.rabbitmq.reply-to.forged",
        "amq.rabbitmq.reply-to.",
        "amq.rabbitmq.reply-to.!!!!.abcd",  # not base64: RabbitMQ's decoder crashes
        address(b"hello"),  # not an Erlang term
        address(b"\x83d\x00\x03foo"),  # a term, not a pid
        address(new_pid(b"evil@nowhere")),  # not a reply@<hash> node: crashes
        address(new_pid(b"reply@")),  # no hash: crashes
        address(new_pid(b"reply@42")[:-1]),  # cut short: crashes
        address(new_pid(b"reply@42") + b"\x00"),  # trailing bytes
        address(new_pid(b"reply@42"), key="a.b"),  # three parts
        address(new_pid(b"reply@42"), key=""),
        REAL + ".",
        REAL.replace(".yQ", "..yQ"),
        "ctl.jobs",
        REPLY_QUEUE_PREFIX + "abc",  # a reply queue is not a direct address
        "amq.rabbitmq.reply-to.g1h2" + "A" * 300 + "." + KEY,
    ],
)
def test_anything_else_is_not_a_direct_reply_to_address(forged: str) -> None:
    assert reply_node(forged) is None
