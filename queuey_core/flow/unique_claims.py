"""The producer's side of unique jobs: claim before publishing, keep or give back after.

Owns: :class:`UniqueClaims`, which marks envelopes with the keys their jobs hold
(:mod:`.unique`), claims those keys before anything is published, and, once the
publish's outcome is known, keeps them for their period (published, or in doubt: the
job may exist) or gives them back (surely not published). Must never: publish a job
whose key another job holds, or give back the key of a job that may be on the broker.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from queuey_core.backends.capabilities import HoldsUniqueKeys
from queuey_core.clock import Clock
from queuey_core.envelope import EncodedEnvelope, Envelope
from queuey_core.errors import (
    BackendError,
    ConfigError,
    DuplicateJobError,
    EnqueueUnknownError,
    JobStoreError,
    NotEnqueuedError,
    PublishFailure,
    QueueyError,
)
from queuey_core.flow.unique import Unique, UniqueMark, job_id_key
from queuey_core.flow.unique_keys import Claim, ClaimsWithJobs, UniqueKeys
from queuey_core.jobs import Job
from queuey_core.pending import PendingBatch, PublishError, attribute

logger = logging.getLogger(__name__)

#: The one line of a unique job with nowhere to keep its key.
NO_KEY_STORE = (
    "unique jobs need a place to keep their keys: on RabbitMQ, set [results] url "
    "(sqlite:///path or postgresql://...) in queuey.toml"
)


class UniqueClaims:
    """Marks, claims, keeps and gives back the keys of a producer's jobs.

    Where a backend keeps keys itself (the embedded file, the in-memory backend), they
    are kept there by default; on RabbitMQ give ``keys`` (the job store's table:
    :func:`~queuey_core.flow.unique_store.open_unique_keys`). A second enqueue of a
    held key raises :class:`~queuey_core.errors.DuplicateJobError`.

    ``keys`` None: no place to keep them (a job that declares uniqueness is then a
    ConfigError, never enqueued unguarded). ``job_ids``: a job id the caller chose is a
    key too, held while the job is queued or running (a backend that keeps keys itself).
    ``declared``: declarations by job type name (``[unique.*]``), over the classes' own.
    """

    def __init__(
        self,
        keys: UniqueKeys | None,
        *,
        job_ids: bool,
        declared: Mapping[str, Unique] | None = None,
    ) -> None:
        self._keys = keys
        # Keys in the jobs' own file: claim, publish and keep are one transaction there.
        self._together = keys if isinstance(keys, ClaimsWithJobs) else None
        self._job_ids = job_ids
        self._declared = dict(declared or {})
        self._lock = threading.Lock()
        self._duplicates: Counter[str] = Counter()

    @classmethod
    def of(
        cls, backend: object, keys: UniqueKeys | None, declared: Mapping[str, Unique] | None
    ) -> UniqueClaims:
        """A producer's on ``backend``: ``keys``, else the backend's own (job ids are
        keys too, then), with ``declared`` over the classes' own declarations."""
        holds = isinstance(backend, HoldsUniqueKeys)
        if keys is None and isinstance(backend, HoldsUniqueKeys):
            keys = backend.unique_keys()
        return cls(keys, job_ids=holds, declared=declared)

    def duplicates(self) -> dict[str, int]:
        """Enqueues refused as duplicates so far, by job type."""
        with self._lock:
            return dict(self._duplicates)

    def applies(self, jobs: Sequence[Job], ids: Sequence[object | None]) -> bool:
        """Whether a batch holds a key: a job type that declares one, or an id chosen
        where ids are keys (a batch without is published as before, at no cost)."""
        if self._job_ids and any(job_id is not None for job_id in ids):
            return True
        kinds = {type(job) for job in jobs}
        return any(k.UNIQUE is not None or k.NAME in self._declared for k in kinds)

    def mark(self, env: Envelope, job_type: type[Job] | None, chosen_id: object) -> Envelope:
        """``env`` carrying the keys its job holds (unchanged when none); ``chosen_id``:
        the id the caller chose, if any (None).

        Raises:
            ValueError: a payload without a field of the key.
            ConfigError: a unique job and nowhere to keep its key.
        """
        marks: list[UniqueMark] = []
        unique = self._declared.get(env.job_type)
        if unique is None and job_type is not None:
            unique = job_type.UNIQUE
        if unique is not None:
            if self._keys is None:
                raise ConfigError(NO_KEY_STORE)
            marks.append(unique.mark(env.job_type, env.payload, env.enqueued_at))
        if chosen_id is not None and self._job_ids:
            marks.append(UniqueMark(key=job_id_key(env.job_id), until="end"))
        return env.model_copy(update={"unique": tuple(marks)}) if marks else env

    def claim(self, envs: Sequence[Envelope], now_ms: int) -> dict[uuid.UUID, uuid.UUID]:
        """Claim the keys of ``envs`` in one transaction; the refused jobs (refused id ->
        holder's id), whose other keys are given back at once.

        Raises:
            NotEnqueuedError: the store could not be reached (or the backend is closed):
                nothing claimed, nothing published.
        """
        claims, owners = _claims(envs)
        if not claims or self._keys is None:
            return {}
        try:
            refused = self._keys.claim(claims, now_ms)
        except NotEnqueuedError as exc:  # a closed backend: as its publish would say
            attribute(exc, list(dict.fromkeys(owners)))
            raise
        except (BackendError, JobStoreError) as exc:
            # Nothing was published: one of the three outcomes, not a fourth error.
            raise NotEnqueuedError(
                f"not enqueued: its unique keys could not be claimed: {exc}",
                reason=PublishFailure.UNREACHABLE,
                not_enqueued=dict.fromkeys(owners),
            ) from exc
        duplicates: dict[uuid.UUID, uuid.UUID] = {}
        for i, holder in refused.items():
            duplicates.setdefault(owners[i], uuid.UUID(holder))
        if duplicates:
            with self._lock:
                self._duplicates.update(e.job_type for e in envs if e.job_id in duplicates)
            # A refused job's other keys (claimed in the same call) are not its to keep.
            # Only those it got: a refused claim's (key, id) may be the holder's own.
            self._keys.give_back(
                [
                    c
                    for i, (c, owner) in enumerate(zip(claims, owners, strict=True))
                    if owner in duplicates and i not in refused
                ]
            )
        return duplicates

    def guarded(self, env: Envelope, publish: Callable[[], None], now: Callable[[], int]) -> None:
        """``publish()`` of ``env``, its keys claimed first (DuplicateJobError: refused,
        nothing published), then kept or given back as the publish ends; ``now`` in ms.
        Any other QueueyError of the publish means not enqueued (the producer's
        outcomes), so the keys go back; a publish cut short by anything else (a
        KeyboardInterrupt) keeps them: in doubt. Where the keys are in the jobs' own
        file, all of it is one transaction instead: nothing is ever in doubt but its
        commit."""
        if self._together is not None:
            with self._together.together([env.job_id]):
                self._claim_all([env], now())
                publish()
                self._keep([env], now())
            return
        self._claim_all([env], now())
        error: NotEnqueuedError | EnqueueUnknownError | None = None
        try:
            publish()
        except (NotEnqueuedError, EnqueueUnknownError) as exc:
            error = exc
            raise
        except QueueyError as exc:  # any other error of a publish: surely not enqueued
            error = NotEnqueuedError(str(exc), not_enqueued=[env.job_id])
            raise
        finally:
            self.settle([env], error, now())

    def begin(
        self,
        envs: Sequence[Envelope],
        clock: Clock,
        publish: Callable[[list[Envelope], dict[str, Any]], PendingBatch],
    ) -> PendingBatch:
        """A batch's keys claimed in one call, then ``publish(sent, more)`` of the
        envelopes to publish (the duplicates left out), ``more`` being the
        :class:`~queuey_core.pending.PendingBatch` arguments that settle their keys once
        the publish ends and report the duplicates. Where the keys are in the jobs' own
        file, claims, publish and keep are one transaction (a failed publish takes its
        claims with it), and a failed commit is the batch's error.

        Raises:
            NotEnqueuedError: the keys could not be claimed; nothing was published.
        """
        if self._together is None:
            duplicates = self.claim(envs, clock.wall_ms())
            sent = [env for env in envs if env.job_id not in duplicates]

            def settle(error: PublishError | None) -> None:
                self.settle(sent, error, clock.wall_ms())

            return publish(sent, {"settle": settle, "duplicates": duplicates})
        return self._begin_together(self._together, envs, clock, publish)

    def _begin_together(
        self,
        keys: ClaimsWithJobs,
        envs: Sequence[Envelope],
        clock: Clock,
        publish: Callable[[list[Envelope], dict[str, Any]], PendingBatch],
    ) -> PendingBatch:
        """:meth:`begin` where claims, publish and keep are one transaction."""
        refused: dict[uuid.UUID, uuid.UUID] = {}
        batch: PendingBatch | None = None
        try:
            with keys.together([env.job_id for env in envs]):
                refused = self.claim(envs, clock.wall_ms())
                sent = [env for env in envs if env.job_id not in refused]
                batch = publish(sent, {"duplicates": refused})
                if batch.failed:
                    raise _RolledBack(batch)
                self._keep(sent, clock.wall_ms())
            return batch
        except _RolledBack as rolled:
            return rolled.batch
        except (NotEnqueuedError, EnqueueUnknownError) as exc:
            if batch is None:  # the claims themselves failed: as on every other backend
                raise
            # The commit failed: the batch's outcome, reported by its result().
            return PendingBatch(sent, error=exc, duplicates=refused)

    def _claim_all(self, envs: Sequence[Envelope], now_ms: int) -> None:
        """:meth:`claim`, a refusal raised (DuplicateJobError)."""
        duplicates = self.claim(envs, now_ms)
        if duplicates:
            raise DuplicateJobError(duplicates)

    def _keep(self, envs: Sequence[Envelope], now_ms: int) -> None:
        """Hold the keys of ``envs``, published, for their periods (inside the
        transaction of their publish: an error rolls both back)."""
        if self._keys is not None:
            self._keys.keep(_claims(envs)[0], now_ms)

    def settle(
        self,
        envs: Sequence[Envelope],
        error: NotEnqueuedError | EnqueueUnknownError | None,
        now_ms: int,
    ) -> None:
        """After the publish of ``envs``: keep the keys of the jobs that are (or may be)
        on the broker, give back those of the jobs surely not. Never raises: a key not
        kept frees itself after :data:`~.unique_keys.CLAIM_HOLD` (logged)."""
        claims, owners = _claims(envs)
        if not claims or self._keys is None:
            return
        lost = set() if error is None else set(error.not_enqueued)
        keep = [c for c, owner in zip(claims, owners, strict=True) if owner not in lost]
        back = [c for c, owner in zip(claims, owners, strict=True) if owner in lost]
        try:
            self._keys.keep(keep, now_ms)
            self._keys.give_back(back)
        except QueueyError as exc:
            logger.warning(
                "unique keys of %d jobs not kept after their publish (they free "
                "themselves within the claim's hold): %s",
                len(envs),
                exc,
            )


class _RolledBack(Exception):
    """Ends a transaction whose publish failed, its claims with it (not an error): the
    failed ``batch`` is the outcome."""

    def __init__(self, batch: PendingBatch) -> None:
        super().__init__()
        self.batch = batch


def encoded_mark(env: Envelope) -> EncodedEnvelope:
    """A marked envelope, encoded for a batch's fast path (whose bodies, written from a
    template, carry no keys)."""
    return EncodedEnvelope(
        env.job_id, env.job_type, env.queue, env.priority, env.enqueued_at, env.encode()
    )


def _claims(envs: Sequence[Envelope]) -> tuple[list[Claim], list[uuid.UUID]]:
    """The claims of ``envs``' marks, and the job each belongs to."""
    claims: list[Claim] = []
    owners: list[uuid.UUID] = []
    for env in envs:
        for mark in env.unique or ():
            by_id = mark.key.startswith("job-id:")
            claims.append(Claim(mark.key, str(env.job_id), _hold(mark), not by_id))
            owners.append(env.job_id)
    return claims, owners


def _hold(mark: UniqueMark) -> int | None:
    """When a kept key frees itself, in ms (None: when a worker lets it go)."""
    return mark.expires_at if mark.until == "time" else None
