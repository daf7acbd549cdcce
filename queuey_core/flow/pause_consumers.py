"""A worker's consumers, one per queue, stopped while their queue is paused.

The worker (:mod:`queuey_core.worker.runner`) starts them through :class:`Consumers`,
which reads the paused queues first (a :class:`~queuey_core.flow.pause.PauseWatch`) and
consumes only the others. When a queue is paused, its consumer is cancelled
(``basic.cancel`` on RabbitMQ): no new delivery comes, the deliveries already pulled
still run and are settled as ever (at most the queue's prefetch), and no attempt is
spent. When it is resumed, a new consumer starts. A cancelled consumer is closed (which
gives back whatever it still holds) only once nothing of this worker is in flight, or
when the worker stops, never while one of its jobs runs.

Owns: which queues this worker consumes now, and saying when it is idle because every
queue it consumes is paused. Must never: start a consumer after :meth:`Consumers.stop`,
or close a consumer whose deliveries may still be running.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from queuey_core.backends.base import Backend, Sink, Subscription
from queuey_core.errors import QueueyError
from queuey_core.flow.pause import PauseWatch, SupportsPause
from queuey_core.queues import QueueConfig

logger = logging.getLogger(__name__)


class Consumers:
    """The consumers of ``queues`` on ``backend``, pushing to ``sink``.

    ``in_flight`` tells how many deliveries of this worker are not settled yet (the
    worker handle's count): a cancelled consumer is closed when it reads 0.
    """

    def __init__(
        self,
        backend: Backend,
        queues: Sequence[QueueConfig],
        sink: Sink,
        *,
        in_flight: Callable[[], int],
    ) -> None:
        self._backend = backend
        self._queues = {q.name: q for q in queues}
        self._sink = sink
        self._in_flight = in_flight
        self._lock = threading.Lock()
        self._active: dict[str, Subscription] = {}
        self._retired: list[Subscription] = []
        self._paused: frozenset[str] = frozenset()
        self._stopped = False
        self._watch: PauseWatch | None = None

    @property
    def paused(self) -> tuple[str, ...]:
        """This worker's queues that are paused now, sorted."""
        return tuple(sorted(self._paused))

    def look_now(self) -> None:
        """Read the paused queues at once (a notice on the control channel)."""
        if self._watch is not None:
            self._watch.look_now()

    def start(self, stopping: threading.Event) -> None:
        """Read the paused queues, then consume every queue that is not paused, until
        ``stopping`` is set.

        Raises:
            BackendError: the paused queues could not be read, or a consumer could not
                be started (those started already are left for :meth:`close`).
        """
        if isinstance(self._backend, SupportsPause):
            self._watch = PauseWatch(self._backend, list(self._queues), self._apply)
            self._paused = self._watch.start()
        for name in self._paused:
            logger.warning("queue paused: its jobs wait until it is resumed", extra={"queue": name})
        for name, config in self._queues.items():
            if stopping.is_set():
                return
            if name not in self._paused:
                with self._lock:
                    try:
                        self._active[name] = self._backend.consume(config, self._sink)
                    except QueueyError:
                        logger.error(
                            "failed to start consumer", extra={"queue": name}, exc_info=True
                        )
                        raise
        self._say_if_idle()

    def _apply(self, paused: frozenset[str]) -> None:
        """The watch read ``paused``: stop the newly paused queues' consumers, start the
        resumed ones' (and any whose start failed before). Called on the watch's thread."""
        with self._lock:
            if self._stopped:
                return
            changed, self._paused = paused != self._paused, paused
            for name in sorted(paused & self._active.keys()):
                sub = self._active.pop(name)
                _cancel(sub)
                self._retired.append(sub)
                logger.warning(
                    "queue paused: taking none of its jobs until it is resumed",
                    extra={"queue": name},
                )
            for name, config in self._queues.items():
                if name in paused or name in self._active:
                    continue
                try:
                    self._active[name] = self._backend.consume(config, self._sink)
                except QueueyError:
                    # Tried again at the next change or look: the queue is not paused,
                    # so the worker must consume it as soon as it can.
                    logger.error(
                        "queue resumed, but its consumer could not start",
                        extra={"queue": name},
                        exc_info=True,
                    )
                    continue
                logger.info("queue resumed: taking its jobs again", extra={"queue": name})
            self._close_retired_if_idle()
        if changed:
            self._say_if_idle()

    def _close_retired_if_idle(self) -> None:
        """Close cancelled consumers once nothing of this worker is in flight: none of
        their deliveries can be running then (called with the lock held)."""
        if not self._retired or self._in_flight() != 0:
            return
        retired, self._retired = self._retired, []
        for sub in retired:
            _close(sub)

    def _say_if_idle(self) -> None:
        if self._queues and not self._active and self._paused >= self._queues.keys():
            logger.warning(
                "every queue this worker consumes is paused: idle until one is resumed",
                extra={"paused": sorted(self._paused)},
            )

    def stop(self) -> None:
        """Stop watching and cancel every consumer: nothing more reaches the sink."""
        if self._watch is not None:
            self._watch.close()
        with self._lock:
            self._stopped = True
            active = list(self._active.values())
        for sub in active:
            _cancel(sub)

    def close(self) -> None:
        """Close every consumer, cancelled ones too: whatever was never processed goes
        back to the broker. Only once the worker's jobs have ended."""
        if self._watch is not None:
            self._watch.close()
        with self._lock:
            self._stopped = True
            subs = [*self._active.values(), *self._retired]
            self._active.clear()
            self._retired.clear()
        for sub in subs:
            _close(sub)


def _cancel(sub: Subscription) -> None:
    """Cancel ``sub``; a failure is logged (the worker goes on without that consumer)."""
    try:
        sub.cancel()
    except QueueyError:
        logger.warning("failed to cancel consumer", extra={"queue": sub.queue})


def _close(sub: Subscription) -> None:
    """Close ``sub``, giving back what it holds; a failure is logged."""
    try:
        sub.close()
    except QueueyError:
        logger.warning("failed to close consumer", extra={"queue": sub.queue})
