"""Waiting for confirms under one deadline, and telling the three outcomes apart.

Owns: the single deadline of a publish call (``publish_timeout`` of time the broker was
up, plus the time it was unreachable, which the publisher link bounds by
``recovery_timeout``), giving up on what is unresolved when it passes, and turning each
message's fate into one error that says which jobs were confirmed, which were surely not
enqueued, and which may or may not be.
Must never: wait past the deadline; call a message not enqueued once it was sent.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import NoReturn

from queuey_core.backends.rabbitmq.messages import Pub
from queuey_core.backends.rabbitmq.publisher import PublisherLink
from queuey_core.errors import (
    EnqueueUnknownError,
    NotEnqueuedError,
    PublishFailure,
)

#: How often a caller looks again while the broker is unreachable (the deadline moves).
_POLL_WHILE_DOWN = 0.25


class Deadline:
    """The time budget of one publish call, whichever paths the messages take.

    ``publish_timeout`` counts the time the broker was up (a confirm it does not send, a
    memory or disk alarm); the time the publisher link spends without a connection does
    not count, because the link bounds that itself (``recovery_timeout`` from the loss,
    then it fails what it holds). Whatever happens, a call ends by
    ``publish_timeout + recovery_timeout`` after it began.
    """

    def __init__(self, publish_timeout: float, recovery_timeout: float) -> None:
        self.publish_timeout = publish_timeout
        self.started = time.monotonic()
        self.budget_end = self.started + publish_timeout
        self.hard_end = self.budget_end + recovery_timeout
        self._link: PublisherLink | None = None
        self._down_before = 0.0

    def watch(self, link: PublisherLink) -> None:
        """From now on, time ``link`` spends without a connection does not count."""
        self._link = link
        self._down_before = link.downtime()

    def unreachable_for(self) -> float:
        """Seconds of this call during which the watched link had no connection."""
        if self._link is None:
            return 0.0
        return self._link.downtime() - self._down_before

    def step(self) -> float | None:
        """How long to wait next; None once the deadline has passed."""
        now = time.monotonic()
        end = min(self.budget_end + self.unreachable_for(), self.hard_end)
        if now >= end or (self._link is not None and self._link.is_dead):
            return None  # a dead link resolves nothing more
        if self._link is not None and not self._link.is_up:
            return min(end - now, _POLL_WHILE_DOWN)
        return end - now


def wait_for(pubs: list[Pub], deadline: Deadline, link: PublisherLink, where: str) -> None:
    """Return once the broker confirmed every one of ``pubs``.

    Raises:
        EnqueueUnknownError: some may or may not be on the broker (the error lists which).
        NotEnqueuedError: none is in doubt, and some are surely not on the broker.
    """
    raise_unless_confirmed(pubs, settle(pubs, deadline, link, where))


Outcome = Callable[[Pub], BaseException | None]


def settle(pubs: list[Pub], deadline: Deadline, link: PublisherLink, where: str) -> Outcome:
    """Wait until every one of ``pubs`` is resolved or the deadline passes, then give up
    on the rest; returns each one's error (None: confirmed)."""
    passed = False
    for pub in pubs:
        while not pub.future.done:
            step = deadline.step()
            if step is None:
                passed = True
                break
            pub.future.wait(step)
        if passed:
            break
    late: dict[int, BaseException] = {}
    if passed:
        never, sent = link.give_up(pubs)
        unsent_error, sent_error = _late(link, deadline, where)
        late = {id(pub): unsent_error for pub in never}
        late.update((id(pub), sent_error) for pub in sent)
    return lambda pub: late.get(id(pub), pub.future.error())


def raise_unless_confirmed(pubs: list[Pub], outcome: Callable[[Pub], BaseException | None]) -> None:
    """Raise one error for ``pubs`` if any failed; ``outcome`` gives each one's error."""
    confirmed: list[uuid.UUID] = []
    unknown: list[uuid.UUID] = []
    not_enqueued: list[uuid.UUID] = []
    first_unknown: EnqueueUnknownError | None = None
    first_not: NotEnqueuedError | None = None
    for pub in pubs:
        error = outcome(pub)
        job_id = pub.job_id
        if error is None:
            if job_id is not None:
                confirmed.append(job_id)
            continue
        if not isinstance(error, NotEnqueuedError | EnqueueUnknownError):
            # Not one of ours: the link's thread saw something unexpected. Say only
            # what is sure.
            detail = f"publishing failed: {type(error).__name__}: {error}"
            error = (
                EnqueueUnknownError(detail, reason=PublishFailure.LOST)
                if pub.sent
                else NotEnqueuedError(detail, reason=PublishFailure.REFUSED)
            )
        if isinstance(error, EnqueueUnknownError):
            first_unknown = first_unknown or error
            if job_id is not None:
                unknown.append(job_id)
        else:
            first_not = first_not or error
            if job_id is not None:
                not_enqueued.append(job_id)
    first = first_unknown or first_not
    if first is None:
        return
    if len(pubs) == 1:
        fate = "may or may not be enqueued" if first_unknown else "was not enqueued"
        message = f"{first}; job {pubs[0].job_id} {fate}"
    else:
        message = (
            f"{first}; of {len(pubs):,} jobs, {len(confirmed):,} confirmed, "
            f"{len(unknown):,} may or may not be enqueued, {len(not_enqueued):,} not enqueued"
        )
    raise type(first)(
        message,
        reason=first.reason,
        confirmed=confirmed,
        not_enqueued=not_enqueued,
        unknown=unknown,
    )


def raise_for(pubs: list[Pub], outcome: Outcome) -> NoReturn:
    """:func:`raise_unless_confirmed`, for outcomes known to hold at least one error."""
    raise_unless_confirmed(pubs, outcome)
    raise AssertionError("raise_for: every message was confirmed after all")


def _late(
    link: PublisherLink, deadline: Deadline, where: str
) -> tuple[NotEnqueuedError, EnqueueUnknownError]:
    """The errors of the messages still unresolved at the deadline: (never sent, sent)."""
    if link.is_dead:  # it failed what it held; these never reached it
        death = link.death
        reason = PublishFailure.UNREACHABLE if death else PublishFailure.CLOSED
        what = str(death) if death else "the RabbitMQ backend was closed"
        return (
            NotEnqueuedError(f"{what}: not sent", reason=reason),
            EnqueueUnknownError(what, reason=reason),
        )
    t = deadline.publish_timeout
    down = deadline.unreachable_for()
    after = f" (and {down:.0f}s unreachable)" if down >= 1 else ""
    if link.blocked:
        what = "RabbitMQ is blocking publishers (memory or disk alarm)"
        return (
            NotEnqueuedError(
                f"{what}: held back, not sent within {t:g}s{after}",
                reason=PublishFailure.BLOCKED,
            ),
            EnqueueUnknownError(
                f"{what}: sent and not confirmed within {t:g}s{after}",
                reason=PublishFailure.BLOCKED,
            ),
        )
    if not link.is_up:
        what = f"could not reach RabbitMQ at {where} for {down:.0f}s"
        return (
            NotEnqueuedError(f"{what}: not sent", reason=PublishFailure.UNREACHABLE),
            EnqueueUnknownError(
                f"{what}: sent, and the connection was lost before it confirmed",
                reason=PublishFailure.LOST,
            ),
        )
    return (
        NotEnqueuedError(
            f"RabbitMQ did not take it within {t:g}s{after} (not sent)",
            reason=PublishFailure.NO_CONFIRM,
        ),
        EnqueueUnknownError(
            f"RabbitMQ did not confirm within {t:g}s{after}", reason=PublishFailure.NO_CONFIRM
        ),
    )
