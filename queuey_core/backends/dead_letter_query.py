"""The dead-letter reads that are the same on every backend, above the seam.

Owns: the meaning of the dead-letter filters every backend offers (a job type matched
exactly, a reason matched as a substring ignoring ASCII case); :func:`cut`, the window
of an ordered stream of dead letters; and :class:`DeadLetterToolsBase`, the read half of
:class:`DeadLetterTools` written once (checking the arguments, building the filter, a
page, a listing, an iteration and a lookup out of one window), so that a backend
answers only what differs: how it streams a window (:meth:`DeadLetterToolsBase._window`),
and, where it has a quicker way, a page or a lookup. Must never: hold more than a page
of what it walks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass

from queuey_core.backends.capabilities import (
    AnyDeadLetter,
    DeadLetter,
    DeadLetterPage,
    DeadLetterTools,
    DeadLetterWindow,
)


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    """What a listing keeps: every dead letter when both are None."""

    job_type: str | None = None
    reason: str | None = None

    @property
    def everything(self) -> bool:
        """Whether it keeps every dead letter."""
        return self.job_type is None and self.reason is None

    def keeps(self, dead: AnyDeadLetter) -> bool:
        """Whether ``dead`` matches: its job type is the one asked (an undecodable dead
        letter has none), and its reason contains the text asked, ignoring ASCII case."""
        if self.job_type is not None and (
            not isinstance(dead, DeadLetter) or dead.envelope.job_type != self.job_type
        ):
            return False
        return self.reason is None or ascii_lower(self.reason) in ascii_lower(dead.reason)


#: The filter that keeps everything.
EVERYTHING = DeadLetterFilter()

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(text: str) -> str:
    """``text`` with A-Z folded to a-z and nothing else changed (as SQLite's lower())."""
    return text.translate(_ASCII_LOWER)


def check_page(offset: int, limit: int) -> None:
    """Refuse a negative offset or a limit below 1 (ValueError): a caller's bug."""
    if offset < 0:
        raise ValueError(f"offset must be 0 or more, not {offset}")
    if limit < 1:
        raise ValueError(f"limit must be 1 or more, not {limit}")


def check_window(offset: int, limit: int | None) -> None:
    """As :func:`check_page`, with ``limit`` None for "all from ``offset``"."""
    check_page(offset, 1 if limit is None else limit)


def cut(
    matching: Iterable[AnyDeadLetter],
    offset: int,
    limit: int | None,
    *,
    total: int | None = None,
    skipped: int = 0,
) -> Generator[AnyDeadLetter, None, int]:
    """The window of ``matching`` (what a filter keeps, in order, from its ``skipped``-th
    on: a backend that seeks skips those without reading them) at ``offset``, ``limit``
    long (None: to the end); returns the total, as a :class:`DeadLetterWindow` wants.

    ``total`` None: not known, so the whole stream is walked to count it (holding one at
    a time); known: the walk stops after the window. ``matching`` is closed either way.
    """
    end = None if limit is None else offset + limit
    position = skipped
    stream = iter(matching)
    try:
        for dead in stream:
            if position >= offset and (end is None or position < end):
                yield dead
            position += 1
            if end is not None and total is not None and position >= end:
                break
    finally:
        if isinstance(stream, Generator):  # what it holds (a pass, a read) goes now
            stream.close()
    return position if total is None else total


def page_of(letters: Iterable[AnyDeadLetter], offset: int, limit: int) -> DeadLetterPage:
    """The page at ``offset`` of ``letters`` (already filtered, in order), counting all.

    Walks the whole stream to count it, keeping only the page.
    """
    check_page(offset, limit)
    return DeadLetterWindow(cut(letters, offset, limit), offset=offset, limit=limit).page()


class DeadLetterToolsBase(DeadLetterTools):
    """:class:`DeadLetterTools` once for every backend: the reads out of its
    :meth:`_window`, the moves through :meth:`_requeue`, :meth:`_delete` and
    :meth:`_purge`, which are each backend's own."""

    def _requeue(
        self, queue: str, job_ids: list[str] | None, progress: Callable[[int], None] | None
    ) -> int:
        """Requeue those ids (distinct, sorted; None: all). The backend's."""
        raise NotImplementedError

    def _delete(self, queue: str, handles: list[str]) -> int:
        """Delete those handles (distinct, sorted). The backend's."""
        raise NotImplementedError

    def _purge(self, queue: str) -> int:
        """Delete them all; how many. The backend's."""
        raise NotImplementedError

    def requeue_dead_letters(
        self,
        queue: str,
        job_ids: Sequence[str] | None = None,
        *,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """See :meth:`DeadLetterTools.requeue_dead_letters`."""
        return self._requeue(queue, None if job_ids is None else sorted(set(job_ids)), progress)

    def delete_dead_letters(self, queue: str, handles: Sequence[str]) -> int:
        """See :meth:`DeadLetterTools.delete_dead_letters`."""
        return self._delete(queue, sorted(set(handles)))

    def purge_dead_letters(
        self, queue: str, *, progress: Callable[[int], None] | None = None
    ) -> int:
        """See :meth:`DeadLetterTools.purge_dead_letters`: the progress once, at the end."""
        purged = self._purge(queue)
        if progress is not None:
            progress(purged)
        return purged

    def _window(
        self, queue: str, wanted: DeadLetterFilter, offset: int, limit: int | None
    ) -> DeadLetterWindow:
        """What ``wanted`` keeps of ``queue``, from ``offset``, ``limit`` long (None: all),
        as read (arguments checked). The backend's: how it walks its dead letters."""
        raise NotImplementedError

    def _page(
        self, queue: str, wanted: DeadLetterFilter, offset: int, limit: int | None
    ) -> DeadLetterPage:
        """The same, in memory (arguments checked). A backend with a quicker way to a
        page, or a retry to wrap it in, answers this too."""
        return self._window(queue, wanted, offset, limit).page()

    def dead_letter_window(
        self,
        queue: str,
        *,
        offset: int = 0,
        limit: int | None = None,
        job_type: str | None = None,
        reason: str | None = None,
    ) -> DeadLetterWindow:
        """See :meth:`DeadLetterTools.dead_letter_window`."""
        check_window(offset, limit)
        return self._window(queue, DeadLetterFilter(job_type, reason), offset, limit)

    def dead_letter_page(
        self,
        queue: str,
        *,
        offset: int = 0,
        limit: int = 100,
        job_type: str | None = None,
        reason: str | None = None,
    ) -> DeadLetterPage:
        """See :meth:`DeadLetterTools.dead_letter_page`."""
        check_page(offset, limit)
        return self._page(queue, DeadLetterFilter(job_type, reason), offset, limit)

    def list_dead_letters(self, queue: str, *, limit: int | None = None) -> list[AnyDeadLetter]:
        """See :meth:`DeadLetterTools.list_dead_letters`."""
        check_window(0, limit)
        return self._page(queue, EVERYTHING, 0, limit).letters

    def iter_dead_letters(
        self, queue: str, *, job_type: str | None = None, reason: str | None = None
    ) -> Generator[AnyDeadLetter, None, None]:
        """See :meth:`DeadLetterTools.iter_dead_letters`: the window of all of them."""
        window = self._window(queue, DeadLetterFilter(job_type, reason), 0, None)
        try:
            yield from window
        finally:
            window.close()

    def get_dead_letter(self, queue: str, handle: str) -> AnyDeadLetter | None:
        """See :meth:`DeadLetterTools.get_dead_letter`: a walk that stops at it (a
        backend with an index answers this with a lookup)."""
        with contextlib.closing(self.iter_dead_letters(queue)) as letters:
            return next((d for d in letters if d.handle == handle), None)
