"""Carrying the outbox out: publishing the members a store made ready, their unique keys
claimed first, and failing the members that no publish can ever send.

Owns: :class:`Outbox`. Each member's publish ends one of three ways:

* published: marked ``sent``;
* refused for good: a **duplicate** of a job that holds its unique key (error
  ``duplicate of JOB_ID``), or a publish the broker can never take (no queue routes it,
  it cannot be encoded: :data:`FOR_GOOD`). The member ends ``failed`` with that error,
  as a dead letter would end it: the workflow's ``on_failure`` applies and its error
  callback is made, once;
* not published now (the broker or the key store out of reach, a refusal that may pass,
  a publish in doubt): left in the outbox, for the redelivered end that made it or a
  worker's sweep (a publish in doubt may then be delivered twice: at least once).

Must never: leave in the outbox a member that no retry can publish (its workflow would
wait for ever), nor fail a member whose publish may have worked.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

from queuey_core.backends.base import Backend
from queuey_core.clock import Clock
from queuey_core.envelope import Envelope
from queuey_core.errors import (
    EnqueueUnknownError,
    NotEnqueuedError,
    PublishFailure,
    QueueyError,
)
from queuey_core.flow.unique_claims import UniqueClaims
from queuey_core.pending import attribute
from queuey_core.workflows import tables
from queuey_core.workflows.store import WorkflowStore

logger = logging.getLogger(__name__)

#: Envelopes published per call of the backend's publish_many.
PUBLISH_CHUNK = 1000
#: Why a publish can never succeed, however often it is tried: the member fails.
FOR_GOOD = frozenset({PublishFailure.UNROUTABLE, PublishFailure.UNENCODABLE})

Ready = Sequence[tuple[str, str]]


class Outbox:
    """Publishes outbox rows (job id, envelope JSON) of ``store`` on ``backend``."""

    def __init__(
        self, backend: Backend, store: WorkflowStore, unique: UniqueClaims, clock: Clock
    ) -> None:
        self._backend = backend
        self._store = store
        self._unique = unique
        self._clock = clock
        self.failed_workflows = 0
        """Workflows failed here by a member no publish could send."""

    def publish(self, ready: Ready) -> int:
        """Publish ``ready`` and mark it sent; fail what can never be sent, and publish
        what those failures make ready (an error callback). How many were published.
        Never raises: the store holds the truth, and the sweep tries again."""
        sent = 0
        todo = list(ready)
        while todo:
            chunk, todo = todo[:PUBLISH_CHUNK], todo[PUBLISH_CHUNK:]
            try:
                published, made = self._chunk(chunk)
            except QueueyError as exc:
                logger.warning(
                    "workflow members not published yet (the sweep will): %s",
                    exc,
                    extra={"job_id": chunk[0][0]},
                )
                return sent
            sent += published
            todo += made
        return sent

    def _chunk(self, chunk: Ready) -> tuple[int, list[tuple[str, str]]]:
        """Publish one chunk: how many went out, and what the failed members made ready."""
        envelopes = [Envelope.decode(body.encode()) for _, body in chunk]
        now = self._clock.wall_ms()
        failed = {
            str(job_id): f"duplicate of {holder}"
            for job_id, holder in self._unique.claim(envelopes, now).items()
        }
        sending = [env for env in envelopes if str(env.job_id) not in failed]
        error: NotEnqueuedError | EnqueueUnknownError | None = None
        try:
            if sending:
                self._backend.publish_many([(env, None) for env in sending])
        except (NotEnqueuedError, EnqueueUnknownError) as exc:
            error = exc
        except QueueyError as exc:  # any other error of a publish: surely not enqueued
            error = NotEnqueuedError(str(exc), not_enqueued=[env.job_id for env in sending])
        finally:
            self._unique.settle(sending, error, self._clock.wall_ms())
        ids = [env.job_id for env in sending]
        if error is None:
            out: Sequence[uuid.UUID] = ids
        else:
            attribute(error, ids)
            # In doubt (unknown) stays in the outbox: sent again, a duplicate at worst.
            out = error.confirmed
            if error.reason in FOR_GOOD:
                failed.update({str(j): f"not enqueued: {error}" for j in error.not_enqueued})
            elif error.not_enqueued:
                logger.warning(
                    "%d workflow members not published yet (the sweep will): %s",
                    len(error.not_enqueued),
                    error,
                    extra={"job_id": str(error.not_enqueued[0])},
                )
        self._store.mark_sent([str(j) for j in out])
        return len(out), self._fail(failed)

    def _fail(self, failed: dict[str, str]) -> list[tuple[str, str]]:
        """End each member of ``failed`` (job id -> error) as failed; what that made ready."""
        made: list[tuple[str, str]] = []
        for job_id, error in failed.items():
            # An outcome the store records and the workflow's policy handles, not a fault.
            logger.info(
                "workflow member never enqueued: %s; it fails", error, extra={"job_id": job_id}
            )
            ending = self._store.ended(
                job_id, outcome=tables.FAILED, result=None, error=error, now=self._clock.wall_ms()
            )
            if ending.workflow == tables.FAILED:
                self.failed_workflows += 1
            made += ending.ready
        return made
