"""A batch of jobs handed to the backend and not yet confirmed: :class:`PendingBatch`.

:meth:`Producer.begin_enqueue_many <queuey_core.producer.Producer.begin_enqueue_many>`
checks a batch and hands it over; :meth:`PendingBatch.result` waits for the broker and
says what became of it, as :meth:`~queuey_core.producer.Producer.enqueue_many` does in
one call. Must never: report a batch confirmed before every job of it is, or record a
job as enqueued (``recorder.enqueued``) before the broker confirmed it; the jobs a
failed batch's error lists as confirmed are on the broker, and are recorded.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from queuey_core.envelope import EncodedEnvelope, Envelope
from queuey_core.errors import DuplicateJobError, EnqueueUnknownError, NotEnqueuedError

if TYPE_CHECKING:
    from queuey_core.results.producing import QueuedRecorder

#: What a publish can end with, besides its return: see :mod:`queuey_core.producer`.
PublishError = NotEnqueuedError | EnqueueUnknownError


class PendingBatch:
    """Jobs handed to the backend by ``begin_enqueue_many``; :meth:`result` waits for them.

    Args:
        envelopes: the batch's envelopes, in order (their ids are read once handed over:
            an encoded one without an id of its own gets it then).
        wait: what waits for the broker's confirms (None: the publish is over).
        error: the publish's error, when it already failed.
        recorder: told of the batch once it is confirmed (of the jobs confirmed, when
            only some were).
        settle: told of the publish's outcome once (the error, or None): what keeps or
            gives back the jobs' unique keys.
        duplicates: jobs left out of the batch as duplicates: their id -> the holder's.
    """

    def __init__(
        self,
        envelopes: Sequence[Envelope | EncodedEnvelope],
        *,
        wait: Callable[[], None] | None = None,
        error: PublishError | None = None,
        recorder: QueuedRecorder | None = None,
        settle: Callable[[PublishError | None], None] | None = None,
        duplicates: dict[uuid.UUID, uuid.UUID] | None = None,
    ) -> None:
        self._envelopes = envelopes
        self._settle = settle
        self._duplicates = duplicates or {}
        self._wait = wait
        self._error = error
        self._recorder = recorder
        self._ids: list[uuid.UUID] | None = None

    @property
    def failed(self) -> bool:
        """Whether the publish has failed already (:meth:`result` raises its error)."""
        return self._error is not None

    def result(self) -> list[uuid.UUID]:
        """The job ids, in order, once the broker confirmed every one (at once after the
        first call).

        Raises:
            EnqueueUnknownError: some may or may not be on the broker; the error lists
                the ``confirmed``, ``unknown`` and ``not_enqueued`` job ids.
            NotEnqueuedError: none is in doubt; ``not_enqueued`` lists those that did not
                make it, ``confirmed`` those that did.
            DuplicateJobError: every other job was confirmed, and these were refused as
                duplicates (``duplicates``: refused id -> holder's id); a publish error
                above carries the batch's duplicates in its ``duplicates`` too.
        """
        if self._wait is not None:
            try:
                self._wait()
            except (NotEnqueuedError, EnqueueUnknownError) as exc:
                self._error = exc
            # (not before: a wait cut short by anything else, a KeyboardInterrupt, is
            # no outcome, and a later call waits again)
            self._wait = None
        if self._settle is not None:
            if self._error is not None:
                attribute(self._error, [env.job_id for env in self._envelopes])
            self._settle(self._error)
            self._settle = None  # once
        if self._error is not None:
            attribute(self._error, [env.job_id for env in self._envelopes])
            self._error.duplicates = dict(self._duplicates)
            if self._recorder is not None and self._error.confirmed:
                confirmed = set(self._error.confirmed)
                self._recorder.enqueued(e for e in self._envelopes if e.job_id in confirmed)
                self._recorder = None  # once, however often result() is asked
            raise self._error
        if self._ids is None:
            if self._recorder is not None:
                self._recorder.enqueued(self._envelopes)
            self._ids = [env.job_id for env in self._envelopes]
        if self._duplicates:
            raise DuplicateJobError(self._duplicates, confirmed=self._ids)
        return self._ids


def attribute(exc: PublishError, ids: list[uuid.UUID]) -> None:
    """Fill in which jobs an error is about, when the backend did not say."""
    if exc.confirmed or exc.not_enqueued or exc.unknown:
        return
    if isinstance(exc, EnqueueUnknownError):
        exc.with_jobs(unknown=ids)
    else:
        exc.with_jobs(not_enqueued=ids)
