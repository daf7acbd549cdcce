"""RabbitMQ through pika: the only module that imports pika.

Three connections, each with one owner (pika is not thread-safe):

* the **consumer link** and the **publisher link** each run a ``SelectConnection`` on
  a thread of their own, so heartbeats flow while jobs run for minutes. Other threads
  hand them work with ``add_callback_threadsafe`` and wait on a future for the outcome.
  Both recover a lost connection with tenacity's backoff: consumers re-subscribe, the
  publisher republishes what the broker had not confirmed. Consuming and publishing are
  apart so that flow control on publishes never stalls a consumer's acks.
* the **admin** connection (a ``BlockingConnection`` behind a lock) declares the
  topology and lists, requeues and purges dead letters.

Every publish is persistent, ``mandatory`` and confirmed: an unroutable or refused
publish raises, nothing is dropped silently. A retry, deferral or dead letter is
confirmed on its new queue before the original is acked (a crash in between duplicates,
never loses). A settle for a delivery whose channel has died is refused, never sent on a
new channel: the broker redelivers that message.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Generic, TypeVar

import pika
import pika.exceptions
import tenacity
from pika.adapters.blocking_connection import BlockingChannel
from pika.adapters.select_connection import IOLoop
from pika.channel import Channel
from pika.spec import Basic, BasicProperties

from queuey_core.backends import topology
from queuey_core.backends.base import ConsumerEnded, DeadLetter, Sink
from queuey_core.envelope import Envelope
from queuey_core.errors import (
    BackendError,
    ConfigError,
    ConsumerStoppedError,
    DecodeError,
    QueueyError,
    UnknownQueueError,
    UnroutableError,
)
from queuey_core.queues import QueueConfig, QueueKind
from queuey_core.urls import redact

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"

#: Messages handed to the publisher's thread at a time by publish_many.
_CHUNK = 200


def _describe(exc: BaseException) -> str:
    text = str(exc) or repr(exc)
    return f"{type(exc).__name__}: {text}"


class _Result(Generic[T]):
    """A one-shot result handed from the link's thread to a waiting thread.

    A bare lock instead of a ``concurrent.futures.Future`` (a Condition and a list of
    callbacks): settles and publishes wait on one of these for every message.
    """

    __slots__ = ("_error", "_lock", "_value", "done")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._value: T | None = None
        self._error: BaseException | None = None
        self.done = False

    def set(self, value: T) -> None:
        if not self.done:
            self.done = True
            self._value = value
            self._lock.release()

    def fail(self, error: BaseException) -> None:
        if not self.done:
            self.done = True
            self._error = error
            self._lock.release()

    def result(self, timeout: float) -> T:
        """The value, the error raised, or FutureTimeout after ``timeout`` seconds."""
        if not self._lock.acquire(timeout=max(timeout, 0.0)):
            raise FutureTimeout
        self._lock.release()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


class _Link:
    """One AMQP connection, owned by one thread running a pika ``SelectConnection``.

    The IOLoop lives as long as the link, across reconnections, so work can always be
    handed to it. Subclasses react to :meth:`on_open`, :meth:`on_lost` and
    :meth:`on_gave_up`, all called on the link's thread.
    """

    def __init__(
        self,
        params: pika.ConnectionParameters,
        *,
        name: str,
        where: str,
        connect_timeout: float,
        recovery_timeout: float,
    ) -> None:
        self._params = params
        self._name = name
        self._where = where
        self._connect_timeout = connect_timeout
        self._recovery_timeout = recovery_timeout
        self._ioloop = IOLoop()
        self._conn: pika.SelectConnection | None = None
        self._lock = threading.Lock()
        self._closing = False
        self._dead: BackendError | None = None
        self._ever_opened = False
        self._ready = threading.Event()
        self._requests: collections.deque[Callable[[], None]] = collections.deque()
        self._lost_at: float | None = None
        self._attempt = 0
        self._wait = tenacity.wait_exponential_jitter(multiplier=0.1, max=3.0, jitter=0.2)
        self._retry_state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})
        self._thread = threading.Thread(target=self._main, name=f"queuey-{name}", daemon=True)

    # -- any thread ------------------------------------------------------------------

    def start(self) -> None:
        """Connect; raises BackendError if the broker cannot be reached in time."""
        self._thread.start()
        self._ioloop.add_callback_threadsafe(self._connect)
        if not self._ready.wait(self._connect_timeout + 10):
            raise BackendError(f"timed out connecting to RabbitMQ at {self._where}")
        if self._dead is not None:
            raise self._dead

    def call(self, fn: Callable[[], T]) -> _Result[T]:
        """Run ``fn`` on the link's thread; the result holds its value or exception."""
        result: _Result[T] = _Result()

        def run() -> None:
            try:
                result.set(fn())
            except BaseException as exc:
                result.fail(exc)

        if threading.current_thread() is self._thread:
            run()  # already on the link's thread: waiting on ourselves would deadlock
        else:
            self.submit(run)
        return result

    def submit(self, fn: Callable[[], None]) -> None:
        """Schedule ``fn`` on the link's thread.

        Requests queue up and the thread is woken once per batch, not once per request:
        under load, many settles share one wake-up (one pipe write, one poll).
        """
        with self._lock:
            if self._dead is not None:
                raise self._dead
            if self._closing:
                raise BackendError("the RabbitMQ backend is closed")
            wake = not self._requests
            self._requests.append(fn)
            if wake:
                self._ioloop.add_callback_threadsafe(self._run_requests)

    def _run_requests(self) -> None:
        with self._lock:
            batch = list(self._requests)
            self._requests.clear()
        for fn in batch:
            fn()

    @property
    def is_dead(self) -> bool:
        """Whether recovery gave up (or the link was closed)."""
        return self._dead is not None or self._closing

    def close(self, timeout: float = 10.0) -> None:
        """Close the connection and stop the thread."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            alive = self._thread.is_alive()
            if alive:
                self._ioloop.add_callback_threadsafe(self._shutdown)
        if alive:
            self._thread.join(timeout)

    # -- the link's thread -------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._ioloop.start()
        finally:
            self._ioloop.close()

    def _connect(self) -> None:
        if self._closing:
            self._ioloop.stop()
            return
        self._conn = pika.SelectConnection(
            self._params,
            on_open_callback=self._opened,
            on_open_error_callback=self._open_failed,
            on_close_callback=self._closed,
            custom_ioloop=self._ioloop,
        )

    def _opened(self, conn: Any) -> None:
        if self._lost_at is not None:
            logger.warning(
                "reconnected to RabbitMQ",
                extra={"link": self._name, "after": time.monotonic() - self._lost_at},
            )
        self._ever_opened = True
        self._lost_at = None
        self._attempt = 0
        self.on_open(conn)
        self._ready.set()

    def _open_failed(self, conn: Any, error: BaseException) -> None:
        self._retry_later(error)

    def _closed(self, conn: Any, reason: BaseException) -> None:
        if self._closing:
            self._ioloop.stop()
            return
        logger.warning(
            "connection to RabbitMQ lost: %s", _describe(reason), extra={"link": self._name}
        )
        self.on_lost(reason)
        self._retry_later(reason)

    def _retry_later(self, error: BaseException) -> None:
        if self._closing:
            self._ioloop.stop()
            return
        now = time.monotonic()
        if self._lost_at is None:
            self._lost_at = now
        limit = self._recovery_timeout if self._ever_opened else self._connect_timeout
        if now - self._lost_at >= limit:
            self._give_up(error)
            return
        self._attempt += 1
        self._retry_state.attempt_number = self._attempt
        delay = min(self._wait(self._retry_state), max(0.0, self._lost_at + limit - now))
        self._ioloop.call_later(delay, self._connect)

    def _give_up(self, error: BaseException) -> None:
        if self._ever_opened:
            dead = BackendError(
                f"lost the connection to RabbitMQ at {self._where} and could not recover "
                f"within {self._recovery_timeout:g}s: {_describe(error)}"
            )
        else:
            dead = _connect_error(error, self._where)
        with self._lock:
            self._dead = dead
        logger.error("%s", dead, extra={"link": self._name})
        try:
            self.on_gave_up(dead)
        finally:
            self._ready.set()
            self._ioloop.stop()

    def _shutdown(self) -> None:
        conn = self._conn
        if conn is not None and not (conn.is_closed or conn.is_closing):
            self.on_closing()
            conn.close()
        else:
            self._ioloop.stop()

    # -- hooks -------------------------------------------------------------------------

    def on_open(self, conn: Any) -> None:
        """The connection opened (first time or after a recovery)."""

    def on_lost(self, reason: BaseException) -> None:
        """The connection was lost; a reconnection follows."""

    def on_gave_up(self, error: BackendError) -> None:
        """Recovery gave up: the link is dead."""

    def on_closing(self) -> None:
        """The link is being closed on purpose."""


def _connect_error(error: BaseException, where: str) -> BackendError:
    if isinstance(
        error, pika.exceptions.ProbableAuthenticationError | pika.exceptions.AuthenticationError
    ):
        return BackendError(f"RabbitMQ at {where} refused the credentials")
    if isinstance(error, pika.exceptions.ProbableAccessDeniedError):
        return BackendError(f"RabbitMQ at {where} denied access to the virtual host")
    return BackendError(f"cannot reach RabbitMQ at {where}: {_root_cause(error)}")


def _root_cause(error: BaseException) -> str:
    """The innermost error pika wrapped (it nests them several deep), as a short phrase."""
    for _ in range(10):
        attempts = getattr(error, "exceptions", None)  # a connection workflow's attempts
        phase = getattr(error, "exception", None)  # a connector phase's error
        if (
            isinstance(attempts, list | tuple)
            and attempts
            and isinstance(attempts[-1], BaseException)
        ):
            error = attempts[-1]
        elif isinstance(phase, BaseException):
            error = phase
        elif error.args and isinstance(error.args[0], BaseException):
            error = error.args[0]
        else:
            break
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror.lower()} ({type(error).__name__})"
    return _describe(error)


class _Pub:
    """One message on its way to the broker, and the future its sender waits on."""

    __slots__ = ("body", "exchange", "future", "props", "returned", "routing_key")

    def __init__(
        self, exchange: str, routing_key: str, body: bytes, props: BasicProperties
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.body = body
        self.props = props
        self.future: _Result[None] = _Result()
        self.returned: str | None = None

    def fail(self, error: BaseException) -> None:
        self.future.fail(error)


class _PublisherLink(_Link):
    """Publishes with a window of outstanding confirms; republishes after a recovery."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._channel: Channel | None = None
        self._unsent: collections.deque[_Pub] = collections.deque()
        # In tag order; an OrderedDict keeps taking from the front O(1) (a dict's
        # iteration would skip every slot freed before it).
        self._pending: collections.OrderedDict[int, _Pub] = collections.OrderedDict()
        self._next_tag = 1

    def publish(self, pubs: list[_Pub]) -> None:
        """Queue ``pubs`` for publishing (any thread); their futures tell the outcome."""
        self.submit(lambda: self._add(pubs))

    def _add(self, pubs: list[_Pub]) -> None:
        self._unsent.extend(pubs)
        self._flush()

    def _flush(self) -> None:
        ch = self._channel
        if ch is None or not ch.is_open:
            return
        while self._unsent:
            pub = self._unsent.popleft()
            tag = self._next_tag
            self._next_tag += 1
            self._pending[tag] = pub
            ch.basic_publish(pub.exchange, pub.routing_key, pub.body, pub.props, mandatory=True)

    def on_open(self, conn: Any) -> None:
        conn.channel(on_open_callback=self._channel_opened)

    def _channel_opened(self, ch: Channel) -> None:
        ch.add_on_close_callback(self._channel_closed)
        ch.add_on_return_callback(self._returned)
        ch.confirm_delivery(
            ack_nack_callback=self._confirmed, callback=lambda _f: self._channel_ready(ch)
        )

    def _channel_ready(self, ch: Channel) -> None:
        self._channel = ch
        self._next_tag = 1
        self._flush()

    def _channel_closed(self, ch: Channel, reason: BaseException) -> None:
        if ch is not self._channel:
            return
        self._channel = None
        unconfirmed = list(self._pending.values())
        self._pending.clear()
        if isinstance(reason, pika.exceptions.ChannelClosedByBroker):
            # The broker refused something on this channel: republishing would be refused
            # again, so tell the senders, and open a fresh channel for what comes next.
            error = BackendError(f"RabbitMQ closed the publishing channel: {reason}")
            for pub in unconfirmed:
                pub.fail(error)
            conn = self._conn
            if conn is not None and conn.is_open:
                conn.channel(on_open_callback=self._channel_opened)
            return
        # The connection is going away: republish what was not confirmed, in order, once
        # it is back. The broker may have taken some of it: duplicates, never losses.
        self._unsent.extendleft(reversed(unconfirmed))

    def _returned(
        self, ch: Channel, method: Basic.Return, props: BasicProperties, body: bytes
    ) -> None:
        for pub in self._pending.values():
            if pub.returned is None and pub.props.message_id == props.message_id:
                pub.returned = f"{method.reply_code} {method.reply_text}"
                return

    def _confirmed(self, frame: Any) -> None:
        method = frame.method
        ok = isinstance(method, Basic.Ack)
        if method.multiple:
            # Pending is in tag order: take from the front, never scan the whole window.
            done = []
            while self._pending:
                first = next(iter(self._pending))
                if first > method.delivery_tag:
                    break
                done.append(self._pending.pop(first))
        else:
            one = self._pending.pop(method.delivery_tag, None)
            done = [one] if one is not None else []
        for pub in done:
            if pub.future.done:
                continue
            if not ok:
                pub.fail(BackendError("RabbitMQ refused the message (nack)"))
            elif pub.returned is not None:
                pub.fail(
                    UnroutableError(
                        f"RabbitMQ could not route the message to {pub.routing_key!r} "
                        f"on exchange {pub.exchange!r}: {pub.returned}"
                    )
                )
            else:
                pub.future.set(None)

    def _fail_all(self, error: BackendError) -> None:
        for pub in [*self._pending.values(), *self._unsent]:
            pub.fail(error)
        self._pending.clear()
        self._unsent.clear()

    def on_gave_up(self, error: BackendError) -> None:
        self._fail_all(error)

    def on_closing(self) -> None:
        self._fail_all(BackendError("the RabbitMQ backend was closed before the broker confirmed"))


class _ConsumerLink(_Link):
    """Owns every consumer channel; re-subscribes them after a recovery."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.subscriptions: list[_RabbitSubscription] = []

    @property
    def connection(self) -> Any:
        return self._conn

    def on_open(self, conn: Any) -> None:
        for sub in list(self.subscriptions):
            if sub.active:
                sub.open_channel(conn)

    def on_lost(self, reason: BaseException) -> None:
        for sub in self.subscriptions:
            sub.channel = None  # settles for its deliveries are refused from now on

    def on_gave_up(self, error: BackendError) -> None:
        for sub in list(self.subscriptions):
            sub.end(ConsumerStoppedError(sub.queue, str(error)))

    def on_closing(self) -> None:
        for sub in list(self.subscriptions):
            sub.end(ConsumerStoppedError(sub.queue, "the backend was closed"))


class _RabbitSubscription:
    """A consumer of one queue on a channel of its own (prefetch is per consumer)."""

    def __init__(
        self, backend: RabbitMQBackend, link: _ConsumerLink, config: QueueConfig, sink: Sink
    ) -> None:
        self.backend = backend
        self.link = link
        self.config = config
        self.sink = sink
        self.channel: Channel | None = None
        self.consumer_tag: str | None = None
        self.active = True
        self.started = threading.Event()
        self.start_error: QueueyError | None = None
        self._stopped = threading.Event()

    @property
    def queue(self) -> str:
        """See :class:`Subscription`."""
        return self.config.name

    # -- the link's thread -------------------------------------------------------------

    def open_channel(self, conn: Any) -> None:
        conn.channel(on_open_callback=self._channel_opened)

    def _channel_opened(self, ch: Channel) -> None:
        if not self.active:
            ch.close()
            return
        self.channel = ch
        ch.add_on_close_callback(self._channel_closed)
        ch.add_on_cancel_callback(self._cancelled_by_broker)
        ch.basic_qos(prefetch_count=self.config.prefetch, callback=lambda _f: self._start(ch))

    def _is_current(self, ch: Channel) -> bool:
        return ch is self.channel

    def _start(self, ch: Channel) -> None:
        if not self._is_current(ch) or not self.active:
            return
        self.consumer_tag = ch.basic_consume(
            self.config.name, self._message, callback=lambda _f: self.started.set()
        )

    def _message(
        self, ch: Channel, method: Basic.Deliver, props: BasicProperties, body: bytes
    ) -> None:
        if not self._is_current(ch):
            return
        try:
            envelope = Envelope.decode(body)
        except DecodeError as exc:
            # Not one of ours: reject it outright, and the queue's dead-letter settings
            # move it to the dead-letter queue with an x-death header saying so.
            logger.error("undecodable message dead-lettered: %s", exc, extra={"queue": self.queue})
            ch.basic_reject(method.delivery_tag, requeue=False)
            return
        self.sink(_RabbitDelivery(self, ch, method.delivery_tag, envelope))

    def _channel_closed(self, ch: Channel, reason: BaseException) -> None:
        if ch is not self.channel:
            return
        self.channel = None
        self._stopped.set()
        if not self.active:
            return
        if isinstance(reason, pika.exceptions.ChannelClosedByBroker):
            if reason.reply_code == 404:
                error = ConsumerStoppedError(self.queue, f"the queue does not exist ({reason})")
                self.start_error = error
                self.end(error)
                self.started.set()
                return
            # Unacked deliveries of that channel go back to the queue; consume afresh.
            logger.warning(
                "RabbitMQ closed a consumer channel (%s); reopening",
                reason,
                extra={"queue": self.queue},
            )
            conn = self.link.connection
            if conn is not None and conn.is_open:
                self.open_channel(conn)

    def _cancelled_by_broker(self, frame: Any) -> None:
        self.end(
            ConsumerStoppedError(
                self.queue, "RabbitMQ cancelled the consumer (was the queue deleted?)"
            )
        )
        ch = self.channel
        if ch is not None and ch.is_open:
            ch.close()

    def end(self, error: ConsumerStoppedError) -> None:
        """Stop for good and tell the sink, once."""
        if self.active:
            self.active = False
            self._stopped.set()
            self.sink(ConsumerEnded(self.queue, error))

    # -- any thread --------------------------------------------------------------------

    def cancel(self) -> None:
        """See :class:`Subscription`: returns once RabbitMQ confirmed the cancel."""

        def request() -> None:
            self.active = False
            ch, tag = self.channel, self.consumer_tag
            self.consumer_tag = None  # cancel once: close() calls this again
            if ch is None or not ch.is_open or tag is None:
                self._stopped.set()
                return
            ch.basic_cancel(tag, callback=lambda _f: self._stopped.set())

        try:
            self.link.submit(request)
        except BackendError:
            return
        if not self._stopped.wait(self.backend.settle_timeout):
            logger.warning(
                "RabbitMQ did not confirm a consumer cancel", extra={"queue": self.queue}
            )

    def close(self) -> None:
        """See :class:`Subscription`: unacked deliveries go back to the queue."""
        self.cancel()

        def release() -> None:
            self.active = False
            ch, self.channel = self.channel, None
            if self in self.link.subscriptions:
                self.link.subscriptions.remove(self)
            if ch is not None and ch.is_open:
                ch.close()

        with contextlib.suppress(BackendError):
            self.backend.wait(self.link.call(release), "closing a consumer")


class _RabbitDelivery:
    """A message delivered on one channel; settled on that channel or not at all."""

    __slots__ = ("_channel", "_envelope", "_settled", "_sub", "_tag")

    def __init__(
        self, sub: _RabbitSubscription, channel: Channel, tag: int, envelope: Envelope
    ) -> None:
        self._sub = sub
        self._channel = channel
        self._tag = tag
        self._envelope = envelope
        self._settled = False

    @property
    def envelope(self) -> Envelope:
        """See :class:`Delivery`."""
        return self._envelope

    def ack(self) -> None:
        """See :class:`Delivery`."""
        self._claim()
        self._on_channel(lambda ch: ch.basic_ack(self._tag))

    def dead_letter(self, reason: str) -> None:
        """See :class:`Delivery`."""
        self._claim()
        self._replace(lambda: self._sub.backend.publish_dead_letter(self._envelope, reason))

    def retry(self, next_envelope: Envelope, delay: float) -> None:
        """See :class:`Delivery`."""
        self._claim()
        self._replace(lambda: self._sub.backend.publish(next_envelope, delay=delay))

    def defer(self, next_envelope: Envelope, delay: float) -> None:
        """See :class:`Delivery`."""
        self.retry(next_envelope, delay)

    def _claim(self) -> None:
        if self._settled:
            raise BackendError("delivery was already settled")
        self._settled = True

    def _on_channel(self, op: Callable[[Channel], None]) -> None:
        def run() -> None:
            ch = self._channel
            if not self._sub._is_current(ch) or not ch.is_open:
                raise BackendError(
                    "the delivery's channel is gone (connection lost or consumer closed); "
                    "RabbitMQ will redeliver the message"
                )
            op(ch)

        self._sub.backend.wait(self._sub.link.call(run), "settle")

    def _replace(self, publish: Callable[[], None]) -> None:
        # Check the channel first: publishing a replacement for a delivery that will be
        # redelivered anyway would run the job twice.
        self._on_channel(lambda ch: None)
        try:
            publish()
        except QueueyError:
            # Not confirmed: give the original back now rather than let it hold a
            # prefetch slot until the channel closes.
            with contextlib.suppress(QueueyError):
                self._on_channel(lambda ch: ch.basic_nack(self._tag, requeue=True))
            raise
        self._on_channel(lambda ch: ch.basic_ack(self._tag))


class _Admin:
    """A BlockingConnection for topology and dead-letter work, one caller at a time."""

    def __init__(self, params: pika.ConnectionParameters, where: str) -> None:
        self._params = params
        self._where = where
        self._lock = threading.Lock()
        self._conn: pika.BlockingConnection | None = None
        self.server_version = ""

    def run(self, work: Callable[[BlockingChannel], T]) -> T:
        """Run ``work`` on a fresh channel, reconnecting once if the connection went stale."""
        with self._lock:
            for attempt in (1, 2):
                conn = self._connection()
                try:
                    ch = conn.channel()
                    try:
                        return work(ch)
                    finally:
                        if ch.is_open:
                            ch.close()
                except pika.exceptions.ChannelClosedByBroker as exc:
                    raise _refused(exc) from exc
                except (
                    pika.exceptions.AMQPConnectionError,
                    pika.exceptions.ConnectionWrongStateError,
                ) as exc:
                    self._drop()
                    if attempt == 2:
                        raise BackendError(
                            f"lost the connection to RabbitMQ at {self._where}: {_describe(exc)}"
                        ) from exc
            raise AssertionError("unreachable")

    def _connection(self) -> pika.BlockingConnection:
        if self._conn is None or not self._conn.is_open:
            try:
                self._conn = pika.BlockingConnection(self._params)
            except (pika.exceptions.AMQPError, OSError) as exc:  # OSError: DNS, for one
                raise _connect_error(exc, self._where) from exc
            version = self._conn._impl.server_properties.get("version", b"")
            self.server_version = version.decode() if isinstance(version, bytes) else str(version)
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and conn.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError):
                conn.close()

    def close(self) -> None:
        with self._lock:
            self._drop()


class _DirectPublisher:
    """Publishes one message in the caller's own thread, for a caller who waits anyway.

    A single ``enqueue()`` that hops to the publisher link's thread and back pays two
    thread switches per confirm (about 1.4x raw pika's confirmed publish, measured).
    Here the caller publishes on a BlockingConnection itself, as raw pika would; it
    takes that connection only when nobody else holds it, so concurrent publishers
    still pipeline through the link, and any connection trouble also falls back to the
    link, which owns reconnecting and republishing.
    """

    def __init__(self, params: pika.ConnectionParameters, heartbeat: int) -> None:
        self._params = params
        # An idle BlockingConnection sends no heartbeats: reconnect rather than trust one
        # idle for more than half the interval the broker allows.
        self._max_idle = heartbeat / 2 if heartbeat else float("inf")
        self._lock = threading.Lock()
        self._conn: pika.BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        self._last_used = 0.0

    def try_publish(self, pub: _Pub) -> bool:
        """Publish and wait for the confirm; False if the link should do it instead.

        Raises:
            UnroutableError: the broker could not route it.
            BackendError: the broker refused it (nack).
        """
        if not self._lock.acquire(blocking=False):
            return False
        try:
            channel = self._ready_channel()
            if channel is None:
                return False
            try:
                channel.basic_publish(
                    pub.exchange, pub.routing_key, pub.body, pub.props, mandatory=True
                )
            except pika.exceptions.UnroutableError as exc:
                raise UnroutableError(
                    f"RabbitMQ could not route the message to {pub.routing_key!r} "
                    f"on exchange {pub.exchange!r}"
                ) from exc
            except pika.exceptions.NackError as exc:
                raise BackendError("RabbitMQ refused the message (nack)") from exc
            except (pika.exceptions.AMQPError, OSError):
                # Lost on the way: the broker may or may not have it. The link publishes
                # it again (a duplicate at worst, never a loss).
                self._drop()
                return False
            self._last_used = time.monotonic()
            return True
        finally:
            self._lock.release()

    def _ready_channel(self) -> BlockingChannel | None:
        if self._channel is not None and time.monotonic() - self._last_used > self._max_idle:
            self._drop()
        if self._channel is None or not self._channel.is_open:
            try:
                self._conn = pika.BlockingConnection(self._params)
                self._channel = self._conn.channel()
                self._channel.confirm_delivery()
            except (pika.exceptions.AMQPError, OSError):
                self._drop()
                return None
        return self._channel

    def _drop(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        if conn is not None and conn.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                conn.close()

    def close(self) -> None:
        with self._lock:
            self._drop()


def _refused(exc: pika.exceptions.ChannelClosedByBroker) -> QueueyError:
    text = exc.reply_text
    if exc.reply_code == 406:
        return ConfigError(f"RabbitMQ refused the declaration: {text}")
    if exc.reply_code == 404:
        return BackendError(f"RabbitMQ: {text}")
    if exc.reply_code == 403:
        return BackendError(f"RabbitMQ denied access: {text}")
    return BackendError(f"RabbitMQ closed the channel: {exc.reply_code} {text}")


def _properties(envelope: Envelope, headers: dict[str, Any] | None = None) -> BasicProperties:
    return BasicProperties(
        content_type="application/json",
        delivery_mode=2,  # persistent
        priority=envelope.priority or None,
        message_id=str(envelope.job_id),
        type=envelope.job_type,
        timestamp=envelope.enqueued_at // 1000,
        headers=headers,
    )


class RabbitMQBackend:
    """The production backend. See the module docstring for how it uses the broker.

    Args:
        url: ``amqp://user:password@host:port/vhost``; the password never reaches a log.
        heartbeat: seconds between AMQP heartbeats.
        connect_timeout: how long to keep trying to reach the broker at first.
        recovery_timeout: how long to keep trying to get a lost connection back before
            consumers end (:class:`ConsumerStoppedError`) and publishes fail.
        publish_timeout: how long a publish waits for the broker's confirm.
        settle_timeout: how long an ack (or the like) waits for the connection's thread.

    Raises:
        BackendError: the broker cannot be reached or refused the credentials.
        ConfigError: the URL is not a valid AMQP URL.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        heartbeat: int = 30,
        connect_timeout: float = 5.0,
        recovery_timeout: float = 60.0,
        publish_timeout: float = 30.0,
        settle_timeout: float = 30.0,
    ) -> None:
        self.where = redact(url)
        self._url = url
        self._heartbeat = heartbeat
        self._connect_timeout = connect_timeout
        self._recovery_timeout = recovery_timeout
        self.publish_timeout = publish_timeout
        self.settle_timeout = settle_timeout
        self._params_for("admin")  # a bad URL fails here, before any connection
        self._lock = threading.Lock()
        self._publisher: _PublisherLink | None = None
        self._consumer: _ConsumerLink | None = None
        self._declared: dict[str, QueueConfig] = {}
        self._ladder_declared = False
        self._closed = False
        self._admin = _Admin(self._params_for("admin"), self.where)
        self._direct = _DirectPublisher(self._params_for("direct publisher"), heartbeat)
        self._admin.run(lambda ch: None)  # fail fast: unreachable broker, wrong credentials

    @property
    def server_version(self) -> str:
        """The broker's version, as it announced it."""
        return self._admin.server_version

    # -- Backend -----------------------------------------------------------------------

    def declare(self, queues: Sequence[QueueConfig]) -> None:
        """See :meth:`Backend.declare`."""
        major = int(self.server_version.split(".")[0] or 0) if self.server_version else 0
        for q in queues:
            if q.kind is QueueKind.QUORUM and q.max_priority is not None and 0 < major < 4:
                raise ConfigError(
                    f"queue {q.name!r}: quorum queues on RabbitMQ {self.server_version} do "
                    'not support priorities; drop max_priority or use kind = "classic"'
                )

        def work(ch: BlockingChannel) -> None:
            if not self._ladder_declared:
                _declare_ladder(ch)
            for q in queues:
                ch.queue_declare(
                    q.dead_letter_queue,
                    durable=True,
                    arguments=topology.dead_letter_queue_arguments(),
                )
                ch.queue_declare(q.name, durable=True, arguments=topology.queue_arguments(q))
                ch.queue_bind(q.name, topology.DELIVER_EXCHANGE, topology.deliver_binding(q.name))

        try:
            self._admin.run(work)
        except ConfigError as exc:
            names = ", ".join(q.name for q in queues)
            raise ConfigError(
                f"{exc} (declaring {names}: a queue exists with other settings?)"
            ) from exc
        self._ladder_declared = True
        for q in queues:
            self._declared[q.name] = q

    def publish(self, envelope: Envelope, *, delay: float | None = None) -> None:
        """See :meth:`Backend.publish`."""
        exchange, routing_key = self._route(envelope.queue, delay)
        self._send([_Pub(exchange, routing_key, envelope.encode(), _properties(envelope))])

    def publish_many(self, items: Sequence[tuple[Envelope, float | None]]) -> None:
        """See :meth:`Backend.publish_many`: one batch, a window of confirms."""
        routes = [self._route(envelope.queue, delay) for envelope, delay in items]
        link = self._publisher_link()
        pubs: list[_Pub] = []
        # Hand them over in chunks as they are encoded, so encoding overlaps the broker's
        # confirms; wait for every confirm only at the end.
        for start in range(0, len(items), _CHUNK):
            chunk = [
                _Pub(exchange, routing_key, envelope.encode(), _properties(envelope))
                for (envelope, _), (exchange, routing_key) in zip(
                    items[start : start + _CHUNK], routes[start : start + _CHUNK], strict=True
                )
            ]
            link.publish(chunk)
            pubs.extend(chunk)
        self._wait_all(pubs)

    def defer(self, envelope: Envelope, delay: float) -> None:
        """See :meth:`Backend.defer`."""
        self.publish(envelope, delay=delay)

    def publish_dead_letter(self, envelope: Envelope, reason: str) -> None:
        """Publish ``envelope`` to its queue's dead-letter queue, with why, when and attempt."""
        headers = {
            topology.REASON_HEADER: reason[:4000],
            topology.DEAD_AT_HEADER: int(time.time() * 1000),
            topology.ATTEMPT_HEADER: envelope.attempt,
            topology.QUEUE_HEADER: envelope.queue,
        }
        dlq = f"{envelope.queue}.dlq"
        self._send([_Pub("", dlq, envelope.encode(), _properties(envelope, headers))])

    def consume(self, queue: QueueConfig, sink: Sink) -> _RabbitSubscription:
        """See :meth:`Backend.consume`: returns once RabbitMQ registered the consumer."""
        link = self._consumer_link()
        sub = _RabbitSubscription(self, link, queue, sink)

        def register() -> None:
            link.subscriptions.append(sub)
            conn = link.connection
            if conn is not None and conn.is_open:
                sub.open_channel(conn)

        self.wait(link.call(register), "starting a consumer")
        if not sub.started.wait(self.settle_timeout):
            raise BackendError(f"RabbitMQ did not confirm the consumer of {queue.name!r}")
        if sub.start_error is not None:
            raise sub.start_error
        return sub

    def list_dead_letters(self, queue: str, *, limit: int | None = None) -> list[DeadLetter]:
        """See :meth:`Backend.list_dead_letters`.

        Takes the messages unacked, then gives them all back with one multiple nack, so
        nothing is lost or reordered. Messages that are not queuey envelopes stay in the
        queue and are left out of the list.
        """

        def work(ch: BlockingChannel) -> list[DeadLetter]:
            found = [d for _, d in _get_all(ch, f"{queue}.dlq", limit) if d is not None]
            return found

        return self._admin.run(work)

    def requeue_dead_letters(self, queue: str, job_ids: Sequence[str] | None = None) -> int:
        """See :meth:`Backend.requeue_dead_letters`: confirmed on ``queue`` before removal."""
        wanted = None if job_ids is None else set(job_ids)

        def work(ch: BlockingChannel) -> int:
            ch.confirm_delivery()
            chosen = [
                (tag, d)
                for tag, d in _get_all(ch, f"{queue}.dlq", None, give_back=False)
                if d is not None and (wanted is None or str(d.envelope.job_id) in wanted)
            ]
            for _, dead in chosen:
                fresh = dead.envelope.fresh()
                ch.basic_publish("", queue, fresh.encode(), _properties(fresh), mandatory=True)
            for tag, _ in chosen:
                ch.basic_ack(tag)
            ch.basic_recover(requeue=True)  # everything else back, in order
            return len(chosen)

        try:
            return self._admin.run(work)
        except pika.exceptions.UnroutableError as exc:
            raise UnknownQueueError(queue) from exc

    def purge_dead_letters(self, queue: str) -> int:
        """See :meth:`Backend.purge_dead_letters`."""
        frame = self._admin.run(lambda ch: ch.queue_purge(f"{queue}.dlq"))
        return int(frame.method.message_count)

    def queue_counts(self, queue: str) -> tuple[int, int]:
        """``(ready messages, consumers)`` of ``queue``, as RabbitMQ reports them."""
        frame = self._admin.run(lambda ch: ch.queue_declare(queue, passive=True))
        return int(frame.method.message_count), int(frame.method.consumer_count)

    def held_count(self) -> int:
        """Messages waiting in the delay ladder, for every queue together."""

        def work(ch: BlockingChannel) -> int:
            return sum(
                int(ch.queue_declare(topology.delay_name(k), passive=True).method.message_count)
                for k in range(topology.DELAY_LEVELS)
            )

        return self._admin.run(work)

    def is_closed(self) -> bool:
        """Whether :meth:`close` was called."""
        with self._lock:
            return self._closed

    def close(self) -> None:
        """See :meth:`Backend.close`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            links = [link for link in (self._consumer, self._publisher) if link is not None]
        for link in links:
            link.close()
        self._direct.close()
        self._admin.close()

    # -- internals ---------------------------------------------------------------------

    def wait(self, future: _Result[T], what: str) -> T:
        """The future's result, as a BackendError if it takes too long."""
        try:
            return future.result(self.publish_timeout)
        except FutureTimeout:
            raise BackendError(
                f"{what}: RabbitMQ did not answer within {self.publish_timeout:g}s"
            ) from None

    def _send(self, pubs: list[_Pub]) -> None:
        if self.is_closed():
            raise BackendError("the RabbitMQ backend is closed")
        if len(pubs) == 1 and self._direct.try_publish(pubs[0]):
            return
        self._publisher_link().publish(pubs)
        self._wait_all(pubs)

    def _wait_all(self, pubs: list[_Pub]) -> None:
        deadline = time.monotonic() + self.publish_timeout
        for pub in pubs:
            try:
                pub.future.result(max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                raise BackendError(
                    f"RabbitMQ did not confirm a publish within {self.publish_timeout:g}s "
                    "(is it blocking publishers for lack of memory or disk?)"
                ) from None

    def _route(self, queue: str, delay: float | None) -> tuple[str, str]:
        ms = topology.delay_ms(delay) if delay else 0
        if ms == 0:
            return "", queue
        if queue not in self._declared:
            raise UnroutableError(
                f"queue {queue!r} was not declared through this backend: a delayed message "
                "could not be routed to it"
            )
        return topology.TOP_EXCHANGE, topology.delay_routing_key(ms, queue)

    def _params_for(self, role: str) -> pika.ConnectionParameters:
        try:
            params = pika.URLParameters(self._url)
        except Exception as exc:
            # The message of a URL error may quote the URL: keep the password out.
            raise ConfigError(f"invalid broker URL {self.where!r}") from exc
        params.heartbeat = self._heartbeat
        params.blocked_connection_timeout = max(self.publish_timeout, 30.0)
        params.connection_attempts = 1
        params.socket_timeout = self._connect_timeout
        params.client_properties = {"connection_name": f"queuey {role}"}
        return params

    def _publisher_link(self) -> _PublisherLink:
        with self._lock:
            if self._closed:
                raise BackendError("the RabbitMQ backend is closed")
            if self._publisher is None or self._publisher.is_dead:
                self._publisher = _PublisherLink(**self._link_args("publisher"))
                self._publisher.start()
            return self._publisher

    def _consumer_link(self) -> _ConsumerLink:
        with self._lock:
            if self._closed:
                raise BackendError("the RabbitMQ backend is closed")
            if self._consumer is None or self._consumer.is_dead:
                self._consumer = _ConsumerLink(**self._link_args("consumer"))
                self._consumer.start()
            return self._consumer

    def _link_args(self, role: str) -> dict[str, Any]:
        return {
            "params": self._params_for(role),
            "name": role,
            "where": self.where,
            "connect_timeout": self._connect_timeout,
            "recovery_timeout": self._recovery_timeout,
        }


def _declare_ladder(ch: BlockingChannel) -> None:
    ch.exchange_declare(topology.DELIVER_EXCHANGE, "topic", durable=True)
    for level in range(topology.DELAY_LEVELS):
        name = topology.delay_name(level)
        ch.exchange_declare(name, "topic", durable=True)
        ch.queue_declare(name, durable=True, arguments=topology.delay_queue_arguments(level))
    for level in range(topology.DELAY_LEVELS):
        name = topology.delay_name(level)
        ch.queue_bind(name, name, topology.level_binding(level, "1"))
        ch.exchange_bind(topology.next_hop(level), name, topology.level_binding(level, "0"))


def _get_all(
    ch: BlockingChannel, dlq: str, limit: int | None, *, give_back: bool = True
) -> list[tuple[int, DeadLetter | None]]:
    """Every message of ``dlq`` (up to ``limit``), held unacked; given back unless told not."""
    got: list[tuple[int, DeadLetter | None]] = []
    last_tag: int | None = None
    while limit is None or len(got) < limit:
        method, props, body = ch.basic_get(dlq, auto_ack=False)
        if method is None:
            break
        last_tag = method.delivery_tag
        got.append((method.delivery_tag, _dead_letter(props, body)))
    if give_back and last_tag is not None:
        ch.basic_nack(last_tag, multiple=True, requeue=True)
    return got


def _dead_letter(props: BasicProperties, body: bytes) -> DeadLetter | None:
    try:
        envelope = Envelope.decode(body)
    except DecodeError:
        return None
    headers = props.headers or {}
    reason = headers.get(topology.REASON_HEADER)
    if isinstance(reason, bytes):
        reason = reason.decode(errors="replace")
    if reason is None:
        deaths = headers.get("x-death") or [{}]
        reason = f"dead-lettered by RabbitMQ ({deaths[0].get('reason', 'unknown')})"
    dead_at = headers.get(topology.DEAD_AT_HEADER)
    return DeadLetter(envelope, str(reason), int(dead_at) if dead_at is not None else 0)
