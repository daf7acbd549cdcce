"""The link: one AMQP connection owned by one thread running a pika ``SelectConnection``.

Owns: the I/O thread, connecting and recovering (to the next node of a cluster at once,
then with tenacity's backoff once every node was tried, giving up after
``recovery_timeout``), how long the connection has been down (:meth:`Link.downtime`), and
handing work to that thread from any other (:meth:`Link.submit`, :meth:`Link.call`) with a
one-shot :class:`Result` to wait on.
Must never: let a thread other than the link's own touch its pika connection or a
channel of it; block the link's thread (heartbeats flow only while it loops).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pika
import pika.exceptions
import tenacity
from pika.adapters.select_connection import IOLoop

from queuey_core.backends.rabbitmq import pika_compat
from queuey_core.backends.rabbitmq.errors import connect_error, error_text, root_cause
from queuey_core.backends.rabbitmq.nodes import Picker
from queuey_core.backends.rabbitmq.result import LinkStatus, Result
from queuey_core.errors import BackendError

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: How long a link waits for RabbitMQ to answer the opening of a channel and what sets it
#: up (a consumer's basic.qos and basic.consume, the publisher's confirm.select) before it
#: tries again on a new channel. A broker busy bringing its queues back after a crash has
#: been seen to leave a consumer unanswered, which left a worker connected and idle for
#: good; a publisher left so would fail every publish at its deadline, for good.
ANSWER_TIMEOUT = 15.0


class Link:
    """One AMQP connection, owned by one thread running a pika ``SelectConnection``.

    The IOLoop lives as long as the link, across reconnections, so work can always be
    handed to it. Subclasses react to :meth:`on_open`, :meth:`on_lost`,
    :meth:`on_gave_up` and :meth:`on_closing`, all called on the link's thread.

    A ``patient`` link keeps trying for ``recovery_timeout`` from its very first
    connection, not ``connect_timeout``: for a connection to a broker the backend has
    already reached (so an outage, not a wrong address). Refused credentials still end
    it at once.

    ``nodes`` picks the node of each attempt: after a failed attempt or a lost connection
    the next node is tried at once, and the backoff applies only once every node has been
    tried (with one node, after each attempt).
    """

    def __init__(
        self,
        nodes: Picker,
        *,
        name: str,
        where: str,
        connect_timeout: float,
        recovery_timeout: float,
        patient: bool = False,
    ) -> None:
        self._nodes = nodes
        self._patient = patient
        self._name = name
        self._where = where
        self._connect_timeout = connect_timeout
        self._recovery_timeout = recovery_timeout
        self._ioloop = IOLoop()
        self._conn: pika.SelectConnection | None = None
        self._target = nodes.current()
        self._lock = threading.Lock()
        self._closing = False
        self._dead: BackendError | None = None
        #: What made recovery give up (pika's error), once it has.
        self.gave_up_because: BaseException | None = None
        self._ever_opened = False
        self._reconnects = 0
        self._ready = threading.Event()
        self._requests: collections.deque[Callable[[], None]] = collections.deque()
        self._lost_at: float | None = None
        # Down from birth until the first open; guarded by _lock (read by other threads).
        self._down_since: float | None = time.monotonic()
        self._down_total = 0.0
        self._attempt = 0
        self._wait = tenacity.wait_exponential_jitter(multiplier=0.1, max=3.0, jitter=0.2)
        self._retry_state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})
        self._thread = threading.Thread(target=self._main, name=f"queuey-{name}", daemon=True)
        #: The link's thread's ident once it runs (:meth:`on_own_thread`).
        self._ident: int | None = None

    # -- any thread ------------------------------------------------------------------

    def start(self, *, wait: bool = True) -> None:
        """Connect; raises BackendError if the broker cannot be reached in time.

        With ``wait=False`` it returns at once: work handed over meanwhile waits for the
        connection, and its callers bound how long they wait.
        """
        self._thread.start()
        self._ioloop.add_callback_threadsafe(self._connect)
        if not wait:
            return
        if not self._ready.wait(self._connect_timeout + 10):
            raise BackendError(f"timed out connecting to RabbitMQ at {self._where}")
        if self._dead is not None:
            raise self._dead

    def call(self, fn: Callable[[], T]) -> Result[T]:
        """Run ``fn`` on the link's thread; the result holds its value or exception."""
        result: Result[T] = Result()

        def run() -> None:
            try:
                result.set(fn())
            except BaseException as exc:
                result.fail(exc)

        if self.on_own_thread():
            run()  # already on the link's thread: waiting on ourselves would deadlock
        else:
            self.submit(run)
        return result

    def later(self, delay: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the link's thread in ``delay`` seconds (from the link's thread).

        The IOLoop outlives reconnections, so ``fn`` runs whatever the connection does
        meanwhile; it checks for itself whether it still applies.
        """
        self._ioloop.call_later(delay, fn)

    @property
    def recovery_timeout(self) -> float:
        """How long the link keeps trying to get a lost connection back."""
        return self._recovery_timeout

    def on_own_thread(self) -> bool:
        """Whether the caller is the link's own thread (by its ident: one C call, where
        ``current_thread`` is Python; a job thread asks once a job)."""
        return threading.get_ident() == self._ident

    def submit(self, fn: Callable[[], None]) -> None:
        """Schedule ``fn`` on the link's thread.

        Requests queue up and the thread is woken once per batch, not once per request:
        under load, many settles share one wake-up (one pipe write, one poll). The wake-up
        is written after the lock is let go: the write lets other threads run, and job
        threads handing acks over would otherwise queue on the lock behind it (twice the
        thread switches a job). A request queued just before :meth:`close` still runs
        first: the shutdown runs what is queued before anything else.
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
        self.run_batch(batch)

    def downtime(self) -> float:
        """Seconds this link has spent without an open connection since it was made."""
        with self._lock:
            current = 0.0 if self._down_since is None else time.monotonic() - self._down_since
            return self._down_total + current

    @property
    def is_up(self) -> bool:
        """Whether the connection is open right now."""
        return self._down_since is None

    @property
    def death(self) -> BackendError | None:
        """Why recovery gave up, once it has (None while it has not, or when closed)."""
        return self._dead

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
        self._ident = threading.get_ident()
        try:
            self._ioloop.start()
        finally:
            self._ioloop.close()

    def _connect(self) -> None:
        if self._closing:
            self._ioloop.stop()
            return
        self._target = self._nodes.current()
        self._conn = pika.SelectConnection(
            self._target.params,
            on_open_callback=self._opened,
            on_open_error_callback=self._open_failed,
            on_close_callback=self._closed,
            custom_ioloop=self._ioloop,
        )

    def _opened(self, conn: Any) -> None:
        self._nodes.opened()
        if self._lost_at is not None:
            logger.warning(
                "reconnected to RabbitMQ at %s",
                self._target.where,
                extra={
                    "link": self._name,
                    "node": self._target.where,
                    "after": time.monotonic() - self._lost_at,
                },
            )
        if self._ever_opened:
            self._reconnects += 1
        self._ever_opened = True
        self._lost_at = None
        with self._lock:
            if self._down_since is not None:
                self._down_total += time.monotonic() - self._down_since
                self._down_since = None
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
            "connection to RabbitMQ lost: %s (at %s)",
            error_text(reason),
            self._target.where,
            extra={"link": self._name, "node": self._target.where},
        )
        with self._lock:
            if self._down_since is None:
                self._down_since = time.monotonic()
        self.on_lost(reason)
        self._retry_later(reason)

    def _retry_later(self, error: BaseException) -> None:
        if self._closing:
            self._ioloop.stop()
            return
        now = time.monotonic()
        if self._lost_at is None:
            self._lost_at = now
        patient = self._ever_opened or self._patient
        limit = self._recovery_timeout if patient else self._connect_timeout
        round_over = self._nodes.failed()
        # A first connection tries every node once, even past connect_timeout: a node that
        # hangs (its packets dropped) costs a whole socket timeout, and the next may answer.
        late = now - self._lost_at >= limit and (round_over or patient)
        if (refused_access(error) and not self._ever_opened) or late:
            self._give_up(error)
            return
        if not round_over:
            # Another node of the cluster is still untried in this round: try it now.
            self._ioloop.call_later(0, self._connect)
            return
        self._attempt += 1
        self._retry_state.attempt_number = self._attempt
        delay = min(self._wait(self._retry_state), max(0.0, self._lost_at + limit - now))
        self._ioloop.call_later(delay, self._connect)

    def _give_up(self, error: BaseException) -> None:
        if self._ever_opened:
            dead = BackendError(
                f"lost the connection to RabbitMQ at {self._where} and could not recover "
                f"within {self._recovery_timeout:g}s: {error_text(error)}"
            )
        elif self._patient and not refused_access(error):
            dead = BackendError(
                f"could not reach RabbitMQ at {self._where} for "
                f"{self._recovery_timeout:g}s: {root_cause(error)}"
            )
        else:
            dead = connect_error(error, self._where)
        self.gave_up_because = error
        with self._lock:
            self._dead = dead
        logger.error("%s", dead, extra={"link": self._name})
        try:
            self.on_gave_up(dead)
        finally:
            self._ready.set()
            self._ioloop.stop()

    def _shutdown(self) -> None:
        self._run_requests()  # handed over before close(), whose wake-up may come later
        conn = self._conn
        if conn is not None and not (conn.is_closed or conn.is_closing):
            self.on_closing()
            # One still in its handshake is ended as a lost stream, not closed (see
            # pika_compat.abort_opening): the loop then ends in _open_failed, else in _closed.
            if not pika_compat.abort_opening(conn):
                conn.close()
        else:
            self.on_closing_while_down()
            self._ioloop.stop()

    # -- hooks -------------------------------------------------------------------------

    def run_batch(self, batch: list[Callable[[], None]]) -> None:
        """Run the requests handed over since the last wake-up, in order."""
        for fn in batch:
            fn()

    def on_open(self, conn: Any) -> None:
        """The connection opened (first time or after a recovery)."""

    def on_lost(self, reason: BaseException) -> None:
        """The connection was lost; a reconnection follows."""

    def on_gave_up(self, error: BackendError) -> None:
        """Recovery gave up: the link is dead."""

    def on_closing(self) -> None:
        """The link is being closed on purpose."""

    def on_closing_while_down(self) -> None:
        """The link is being closed on purpose while it has no connection."""

    # -- any thread, read-only ------------------------------------------------------------

    def status(self) -> LinkStatus:
        """The link's state, regained connections and thread, without waiting on it."""
        if self._closing:
            state = "closed"
        elif self._dead is not None:
            state = "dead"
        elif not self._ever_opened:
            state = "connecting"
        elif self._lost_at is not None:
            state = "reconnecting"
        else:
            state = "open"
        return LinkStatus(state, self._reconnects, self._thread.is_alive(), self._target.where)


def refused_access(error: BaseException) -> bool:
    """Whether the broker refused the credentials or the vhost: trying again is futile."""
    return isinstance(
        error,
        pika.exceptions.ProbableAuthenticationError
        | pika.exceptions.AuthenticationError
        | pika.exceptions.ProbableAccessDeniedError,
    )
