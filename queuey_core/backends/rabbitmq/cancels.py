"""Cancels on RabbitMQ without a job store: a stream every worker reads from its start.

``queuey.cancels`` is a stream (``x-queue-type: stream``) with ``x-max-age`` of
:data:`MAX_AGE`: the broker drops segments past it, so no process cleans up. A cancel
is one persistent message, its body the job id, published with confirms on the admin
connection. Each worker reads the stream from its first retained offset on a
connection of its own (streams need ``basic.qos`` and manual acks, and
``x-stream-offset`` on consume); to know it has read every cancel made before it started,
it first publishes a marker of its own and waits until it reads it back.

Owns: :class:`StreamCancels`, the
:class:`~queuey_core.backends.capabilities.SupportsCancellation` side of
:class:`~queuey_core.backends.rabbitmq.RabbitMQBackend` (a mixin). Must never: stop a
worker because the stream cannot be read (the watch reconnects with a backoff, and says
so), or treat a body that is not a job id as one.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Sequence

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import Basic, BasicProperties

from queuey_core.backends.capabilities import CancelListener, SupportsCancellation
from queuey_core.backends.rabbitmq.admin import Admin
from queuey_core.backends.rabbitmq.connection import ConnectionPlan
from queuey_core.backends.rabbitmq.errors import error_text
from queuey_core.backends.rabbitmq.nodes import Picker
from queuey_core.errors import BackendError

logger = logging.getLogger(__name__)

#: The stream of cancels, and how long the broker keeps them.
STREAM = "queuey.cancels"
MAX_AGE = "7D"
_ARGUMENTS = {"x-queue-type": "stream", "x-max-age": MAX_AGE}
_MARKER = b"queuey-sync:"
#: Seconds a worker waits, at its start, to have read every cancel made before it.
CATCH_UP = 15.0
_PERSISTENT = BasicProperties(delivery_mode=2, content_type="text/plain")


def declare_stream(ch: BlockingChannel) -> None:
    """Declare the stream (idempotent)."""
    ch.queue_declare(STREAM, durable=True, arguments=_ARGUMENTS)


class StreamCancels(SupportsCancellation):
    """Cancels of a RabbitMQBackend (which provides ``_admin`` and ``_plan``)."""

    _admin: Admin
    _plan: ConnectionPlan

    def cancel_jobs(self, job_ids: Sequence[uuid.UUID]) -> None:
        """See :meth:`SupportsCancellation.cancel_jobs`."""

        def publish(ch: BlockingChannel) -> None:
            declare_stream(ch)
            ch.confirm_delivery()
            for job_id in job_ids:
                try:
                    ch.basic_publish("", STREAM, str(job_id).encode(), _PERSISTENT, mandatory=True)
                except (pika.exceptions.UnroutableError, pika.exceptions.NackError) as exc:
                    raise BackendError(
                        f"RabbitMQ did not take the cancel of {job_id}: {error_text(exc)}"
                    ) from exc

        self._admin.run(publish)

    def watch_cancels(self, listener: CancelListener) -> _StreamWatch:
        """See :meth:`SupportsCancellation.watch_cancels`: waits up to :data:`CATCH_UP`
        seconds to have read the stream up to now; a worker that cannot yet goes on, and
        applies the cancels as they arrive."""
        watch = _StreamWatch(self._plan.picker("cancels"), listener)
        watch.start()
        if not watch.caught_up.wait(CATCH_UP):
            logger.warning(
                "cancels not read within %gs of start (%s); applying them as they arrive",
                CATCH_UP,
                watch.problem or "the stream is slow",
            )
        return watch


class _StreamWatch:
    """One worker's reader of the stream, on a thread and connection of its own."""

    def __init__(self, nodes: Picker, listener: CancelListener) -> None:
        self._nodes = nodes
        self._listener = listener
        self._closed = threading.Event()
        self.caught_up = threading.Event()
        self.problem = ""
        self._marker = _MARKER + uuid.uuid4().hex.encode()
        self._conn: pika.BlockingConnection | None = None
        self._thread = threading.Thread(target=self._run, name="queuey-cancels", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop reading; idempotent (the thread closes its connection)."""
        self._closed.set()

    def _run(self) -> None:
        pause = 0.5
        told = False  # one warning an outage; the retries after it are debug lines
        while not self._closed.is_set():
            try:
                self._read()
                pause, told = 0.5, False
            except Exception as exc:  # the watch must outlive anything pika raises
                self.problem = f"cannot read {STREAM}: {error_text(exc)}"
                if isinstance(exc, pika.exceptions.ChannelClosedByBroker):
                    # Refused (no stream support, no permission): waiting cannot help
                    # the worker's start; it retries slowly in the background.
                    self.caught_up.set()
                    pause = max(pause, 30.0)
                level = logging.DEBUG if told else logging.WARNING
                logger.log(level, "%s; trying again in %gs", self.problem, pause)
                told = True
            finally:
                self._close_connection()
            if self._closed.wait(pause):
                return
            pause = min(pause * 2, 300.0)

    def _read(self) -> None:
        self._conn = conn = self._nodes.blocking_connection()
        ch = conn.channel()
        declare_stream(ch)
        ch.confirm_delivery()
        ch.basic_publish("", STREAM, self._marker, _PERSISTENT, mandatory=True)
        ch.basic_qos(prefetch_count=500)
        ch.basic_consume(
            STREAM, self._on_message, auto_ack=False, arguments={"x-stream-offset": "first"}
        )
        self.problem = ""
        while not self._closed.is_set():
            conn.process_data_events(time_limit=0.25)

    def _on_message(
        self, ch: BlockingChannel, method: Basic.Deliver, _props: BasicProperties, body: bytes
    ) -> None:
        ch.basic_ack(method.delivery_tag)
        if body == self._marker:
            self.caught_up.set()
            return
        if body.startswith(_MARKER):
            return  # another worker's marker
        try:
            job_id = uuid.UUID(body.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            logger.warning("ignoring a message of %s that is not a job id", STREAM)
            return
        self._listener([job_id])

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and conn.is_open:
            try:
                conn.close()
            except Exception as exc:  # closing a broken connection: nothing left to do
                logger.debug("closing the cancels connection: %s", exc)
