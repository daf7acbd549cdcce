"""The worker's dead letters into the job store's table, with ``<queue>.dlq`` behind it.

With a store configured, a dead letter is a committed row before its delivery is acked
(:meth:`DeadLetterWriter.write`); a store that fails, or does not answer within
:data:`BOUND` seconds, makes the caller publish to ``<queue>.dlq`` exactly as without a
store (the next ``queuey dlq`` command imports it). A write that answers after its bound
may commit all the same: the message is then in both places, and the import's key
makes them one row. Nothing here runs unless a job is dead-lettered.

Owns: the writer thread (one, so that a hung store holds no job thread past the bound),
the count of fallbacks (:attr:`DeadLetterWriter.fallbacks`), and logging each episode
of them once. Must never: report a row written that was not committed.
"""

from __future__ import annotations

import logging
import queue as queues
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from pika.spec import BasicProperties

from queuey_core.backends.rabbitmq.dead_letter_rows import row_of
from queuey_core.results.dead_letter_table import DeadLetterTable
from queuey_core.text import ascii_error_text

logger = logging.getLogger(__name__)

#: Seconds a dead letter waits for the store before it goes to ``<queue>.dlq`` instead.
BOUND = 3.0


class DeadLetterWriter:
    """Writes dead letters as rows, off the job threads, each within :data:`BOUND`."""

    def __init__(self, table: DeadLetterTable, *, bound: float = BOUND) -> None:
        self._table = table
        self._bound = bound
        self._lock = threading.Lock()
        self._jobs: queues.SimpleQueue[tuple[Callable[[], None], Future[None]] | None] = (
            queues.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._stuck: Future[None] | None = None
        self._episode = 0
        #: Dead letters that went to ``<queue>.dlq`` because the store failed or was slow.
        self.fallbacks = 0

    def write(self, queue: str, props: BasicProperties, body: bytes) -> bool:
        """Whether the dead letter of ``queue`` is a committed row; False: publish it."""
        with self._lock:
            if self._stuck is not None and not self._stuck.done():
                return self._fell_back(queue, "an earlier write to it has not answered yet")
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="queuey-dead-letter-writer", daemon=True
                )
                self._thread.start()
            done: Future[None] = Future()
            try:
                rows = [row_of(queue, props, body)]
            except Exception as exc:  # a bug: the publish path does not depend on it
                return self._fell_back(queue, ascii_error_text(exc))
            self._jobs.put((lambda: self._table.insert(rows), done))
        try:
            done.result(self._bound)
        except FutureTimeout:
            with self._lock:
                self._stuck = done
                return self._fell_back(queue, f"no answer within {self._bound:g}s")
        except Exception as exc:
            with self._lock:
                return self._fell_back(queue, ascii_error_text(exc))
        with self._lock:
            if self._episode:
                logger.warning(
                    "dead letters go to the job store again, after %d went to the "
                    "dead-letter queues (the next queuey dlq command imports them)",
                    self._episode,
                )
                self._episode = 0
        return True

    def _fell_back(self, queue: str, why: str) -> bool:
        """Count a fallback; log the first of an episode. Called holding the lock."""
        self.fallbacks += 1
        self._episode += 1
        if self._episode == 1:
            logger.warning(
                "the job store cannot take dead letters (%s): they go to the dead-letter "
                "queue until it can",
                why,
                extra={"queue": queue},
            )
        return False

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            work, done = job
            if not done.set_running_or_notify_cancel():
                continue
            try:
                work()
            except BaseException as exc:
                done.set_exception(exc)
            else:
                done.set_result(None)

    def close(self) -> None:
        """Stop the writer thread once it is done with what it has."""
        self._jobs.put(None)
