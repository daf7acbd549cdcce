"""Dead letters as the capabilities see them: what a dead-letter queue holds, a page of
it, and :class:`DeadLetterTools`, the capability of listing, paging, finding,
requeueing, deleting and purging them (``queuey dlq``, the dashboard).

Part of :mod:`queuey_core.backends.capabilities`, which re-exports every name here;
kept in a module of its own so that neither outgrows the size a reader takes in at once.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from queuey_core.envelope import Envelope


class DeadLetter(NamedTuple):
    """A dead-lettered envelope with why and when (ms since the epoch) it died.

    ``reason`` is "unknown" and ``dead_at`` None when the message carries no readable
    header for them. ``handle`` reaches it in :meth:`DeadLetterTools.delete_dead_letters`:
    its job id.
    """

    envelope: Envelope
    reason: str
    dead_at: int | None
    handle: str

    @classmethod
    def of(cls, envelope: Envelope, reason: str, dead_at: int | None, handle: str) -> DeadLetter:
        """The dead letter of ``envelope``, its ``dead_at`` never before its ``enqueued_at``.

        Every backend makes its dead letters here. The two times come from different
        clocks: ``enqueued_at`` from the producer's, ``dead_at`` from the worker's, or on
        RabbitMQ from ``x-death`` in whole seconds of the broker's, so a job that reaches
        ``queuey.unroutable`` within the second it was enqueued would read as dead before
        it was enqueued. It died at the earliest when it was.
        """
        if dead_at is not None and dead_at < envelope.enqueued_at:
            dead_at = envelope.enqueued_at
        return cls(envelope, reason, dead_at, handle)


class UndecodableDeadLetter(NamedTuple):
    """A message of a dead-letter queue that is not a queuey envelope.

    It can be listed and deleted, never requeued (it would be refused again).
    ``preview`` is the start of its body, escaped to printable ASCII; ``error`` says why
    it is not an envelope. ``handle`` is its message id when it has a printable one,
    else ``#N``, its position in the dead-letter queue (1 for the oldest) when listed.
    """

    preview: str
    error: str
    reason: str
    dead_at: int | None
    handle: str


#: Anything a dead-letter queue holds.
AnyDeadLetter = DeadLetter | UndecodableDeadLetter


class DeadLetterPage(NamedTuple):
    """One page of a dead-letter queue, oldest first, as a filter sees it.

    ``total`` is how many dead letters match the filter (all of them without one);
    ``next_offset`` is the offset of the next page, None on the last one.
    """

    letters: list[AnyDeadLetter]
    total: int
    next_offset: int | None


def next_offset(offset: int, limit: int | None, total: int) -> int | None:
    """Where the page after the one at ``offset``, ``limit`` long, starts; None: none."""
    following = None if limit is None else offset + limit
    return following if following is not None and following < total else None


class DeadLetterWindow:
    """The dead letters a filter keeps from ``offset`` on (``limit`` of them, or all),
    oldest first, handed out as the backend reads them: the whole of a listing of any
    size without holding more than a few.

    Iterate it once. ``total`` (how many the filter keeps) and ``next_offset`` are known
    once it is exhausted; :meth:`close` lets go of what the backend holds for it (a
    RabbitMQ pass, its lock) when the caller stops early. Nothing is removed or reordered.
    """

    def __init__(
        self, letters: Generator[AnyDeadLetter, None, int], *, offset: int, limit: int | None
    ) -> None:
        # ``letters`` returns the total when exhausted: counted as it walked, or known.
        self._letters = letters
        self.offset = offset
        self.limit = limit
        self.total: int | None = None

    def __iter__(self) -> Iterator[AnyDeadLetter]:
        total = yield from self._letters
        if total is not None:  # None: a second iteration, of a spent generator
            self.total = total

    def close(self) -> None:
        """Stop early: the backend lets go of the pass or the read it holds."""
        self._letters.close()

    @property
    def next_offset(self) -> int | None:
        """The offset of the next window, None on the last one (or before the end)."""
        return None if self.total is None else next_offset(self.offset, self.limit, self.total)

    def page(self) -> DeadLetterPage:
        """The whole window as a page, in memory: for a bounded ``limit`` only."""
        try:
            letters = list(self)
        finally:
            self.close()
        return DeadLetterPage(letters, self.total or 0, self.next_offset)


@runtime_checkable
class DeadLetterTools(Protocol):
    """A backend whose dead-letter queues can be listed and worked on (``queuey dlq``)."""

    def list_dead_letters(self, queue: str, *, limit: int | None = None) -> list[AnyDeadLetter]:
        """Every dead letter of ``queue``, undecodable ones too, oldest first.

        Nothing is removed or reordered.
        """

    def requeue_dead_letters(
        self,
        queue: str,
        job_ids: Sequence[str] | None = None,
        *,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Send dead letters (all, or those ids) back to ``queue`` at attempt 1; how many.

        Undecodable ones are never requeued: they stay where they are. ``progress``,
        when given, is called with how many moved so far, now and then. Interrupted
        (:class:`~queuey_core.errors.DeadLetterMoveError`), it says how many moved.
        """

    def delete_dead_letters(self, queue: str, handles: Sequence[str]) -> int:
        """Delete the dead letters of ``queue`` with those handles; how many.

        The others stay, in order. A position handle (``#N``) means the position at the
        time of the call.
        """

    def purge_dead_letters(
        self, queue: str, *, progress: Callable[[int], None] | None = None
    ) -> int:
        """Delete every dead letter of ``queue``; how many.

        ``progress``, when given, is called with how many went so far, now and then.
        """

    def dead_letter_page(
        self,
        queue: str,
        *,
        offset: int = 0,
        limit: int = 100,
        job_type: str | None = None,
        reason: str | None = None,
    ) -> DeadLetterPage:
        """The ``limit`` dead letters after the first ``offset`` of those matching.

        ``job_type`` keeps envelopes of that job type only (undecodable ones have none);
        ``reason`` keeps those whose reason contains it, ignoring ASCII case. Offsets
        count matching dead letters, oldest first, at the time of the call. Nothing is
        removed or reordered.
        """

    def dead_letter_window(
        self,
        queue: str,
        *,
        offset: int = 0,
        limit: int | None = None,
        job_type: str | None = None,
        reason: str | None = None,
    ) -> DeadLetterWindow:
        """:meth:`dead_letter_page` as a stream: the page's letters as they are read,
        its ``total`` and ``next_offset`` at the end; ``limit`` None: all from ``offset``.
        What ``queuey dlq list`` writes, in bounded memory whatever the ``limit``.
        """

    def get_dead_letter(self, queue: str, handle: str) -> AnyDeadLetter | None:
        """The dead letter of ``queue`` with that handle (job id, message id or ``#N``)."""

    def iter_dead_letters(
        self, queue: str, *, job_type: str | None = None, reason: str | None = None
    ) -> Generator[AnyDeadLetter, None, None]:
        """Every matching dead letter, oldest first, a few at a time (constant memory).

        Filters as in :meth:`dead_letter_page`. Close the iterator (or exhaust it) to
        let go of what the backend holds for it; nothing is removed or reordered.
        """


@runtime_checkable
class KeepsDeadLettersInStore(Protocol):
    """A backend that can keep its dead letters in the job store's table (RabbitMQ):
    then they are rows, paged and found by index (see ``docs/dead-letters.md``)."""

    def keep_dead_letters_in(self, table: Any) -> None:
        """Keep dead letters as rows of ``table`` (a
        :class:`~queuey_core.results.dead_letter_table.DeadLetterTable`) from now on."""

    def has_dead_letter_store(self) -> bool:
        """Whether a table is attached (else dead letters stay in the dead-letter queues)."""

    def with_stored_dead_letters(self, inspection: Any) -> Any:
        """``inspection`` (an :class:`~queuey_core.backends.capabilities.Inspection`) with
        each queue's dead letters counting the table's rows too (what ``queuey queues``,
        ``dlq`` and the dashboard show; the broker's counts alone are cheaper).

        Raises:
            JobStoreError: the store cannot be reached.
        """

    @property
    def dead_letter_fallbacks(self) -> int:
        """Dead letters published to their dead-letter queue because the table's store
        failed or was slow, since this backend was opened."""

    def import_dead_letters(
        self, queue: str, *, progress: Callable[[int], None] | None = None
    ) -> int | None:
        """Move what the dead-letter queue of ``queue`` holds into the table; how many
        (every dead-letter command does it first). None: no table is attached.

        ``progress``, when given, is called with how many so far, now and then.
        """

    def stored_dead_letters(self) -> dict[str, int]:
        """How many dead letters each queue has in the table (empty without one).

        Raises:
            JobStoreError: the store cannot be reached.
        """

    def unimported_dead_letters(self, queue: str) -> int:
        """How many messages the dead-letter queue of ``queue`` holds (0 if it does not
        exist): what the next import takes, or, without a table, every dead letter."""
