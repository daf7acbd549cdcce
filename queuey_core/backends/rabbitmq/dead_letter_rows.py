"""RabbitMQ dead letters as rows of the job store's dead-letter table, and back.

A dead letter is the same message whichever way it reaches the table: written there by
the worker (the :class:`~.messages.Pub` it would have published to ``<queue>.dlq``), or
imported from ``<queue>.dlq`` (the same publish, when the store was down; RabbitMQ's own
dead-lettering; an older version's). So both go through :func:`row_of`, whose digest of
the body, the headers and the message id is the row's key: a message written *and*
published (a store that answered after its bound) is one row, and so is a message an
import cut before its acks reads twice.

Owns: :func:`row_of` and :func:`letter_of`. Reading a dead letter back is
:func:`~.dead_letter_reading.letter_from`'s, as on the scan path: the same reason, time, trace
context and handle, whichever path holds it.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import hashlib
import json
from typing import Any

from pika.spec import BasicProperties

from queuey_core.backends.capabilities import AnyDeadLetter, DeadLetter
from queuey_core.backends.rabbitmq.dead_letter_reading import dead_letter_of, letter_from
from queuey_core.results.dead_letter_sql import Row, Stored
from queuey_core.text import message_handle


def row_of(queue: str, props: BasicProperties, body: bytes) -> Row:
    """The row of a message of the dead-letter queue of ``queue`` (or of the publish
    that would have put it there)."""
    headers = props.headers if isinstance(props.headers, dict) else {}
    plain = _plain(headers)
    key = json.dumps({"h": plain, "id": _plain(props.message_id)}, sort_keys=True).encode()
    digest = hashlib.sha256(key + b"\0" + bytes(body)).hexdigest()
    letter = dead_letter_of(props, body, 0)
    kept = {k: v for k, v in plain.items() if k != "x-death"}  # its time and reason are read
    if isinstance(letter, DeadLetter):
        envelope = letter.envelope
        handle: str | None = letter.handle
        job_type: str | None = envelope.job_type
        attempt: int | None = envelope.attempt
    else:
        handle, job_type, attempt = message_handle(props.message_id), None, None
    return Row(
        queue,
        handle,
        job_type,
        letter.reason,
        letter.dead_at or 0,
        attempt,
        digest,
        bytes(body),
        json.dumps(kept, sort_keys=True),
    )


def letter_of(stored: Stored) -> AnyDeadLetter:
    """The dead letter a row of the table is (``#<seq>`` for a body that is not an
    envelope and has no printable message id)."""
    row = stored.row
    try:
        headers = json.loads(row.headers)
    except ValueError:
        headers = {}
    if not isinstance(headers, dict):
        headers = {}
    return letter_from(
        row.body, headers, row.reason, row.dead_at or None, row.handle or f"#{stored.seq}"
    )


def _plain(value: Any) -> Any:
    """``value`` (a header as pika read it) as JSON can hold it, the same every time."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if value is None or isinstance(value, str | bool | float):
        return value
    if isinstance(value, int):
        return int(value)  # pika's own int subclass for 64-bit values
    return str(value)
