"""Hooks that must record a job's start or end before the worker acts on it: guards.

A hook is told of a job's events and cannot change them (:mod:`.hooks`). A *guard* is a
hook whose record is part of what the job means elsewhere (a workflow member's end moves
its workflow: docs/workflows.md), so that losing the record would leave something
waiting for ever. A guard records a job's start before its handler runs, and a job's
final end (succeeded, dead-lettered, cancelled) before that settle is sent; when its
record cannot be written it *holds* the job: the job is deferred instead (attempt
unchanged, no failure counted; at its queue's top priority, or at its own when it never
ran) and comes back when the hold's delay is over, to be recorded then. A held start
never ran the handler; a held end runs it again, as any redelivery would.

Owns: :class:`SettleGuard` (the protocol: a hook with ``guards_settles = True``),
:class:`Hold`, asking a worker's guards (:func:`held_start`, :func:`held_end`), and
settling a delivery that ends unrun (:func:`end_unrun`: no handler, a payload that does
not fit, a cancel), guarded too.
Must never: hold a retry or a deferral (nothing ended), nor let a guard's exception
reach the worker (a guard that raises is logged and does not hold).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from queuey_core.envelope import Envelope
from queuey_core.retry import GiveUp, RetryPolicy
from queuey_core.worker.outcome import Kind, Outcome

if TYPE_CHECKING:
    from queuey_core.worker.tracked import Tracked

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Hold:
    """A guard's answer when it could not record: defer the job ``delay`` seconds."""

    delay: float
    reason: str


class SettleGuard(Protocol):
    """A hook that records a job's start and final end before the worker acts on them
    (see the module docstring); taken as one when it has ``guards_settles = True``."""

    guards_settles: bool

    def hold_start(self, envelope: Envelope) -> Hold | None:
        """Record that the job of ``envelope`` starts; a Hold: do not run it now."""

    def hold_end(self, event: str, envelope: Envelope, text: str, result: object) -> Hold | None:
        """Record the job's final ``event`` (``succeeded``, ``dead_lettered`` or
        ``cancelled``; ``text`` the reason, ``result`` what a success returned); a Hold:
        do not settle it so, defer it instead."""


class Announces(Protocol):
    """What :func:`end_unrun` tells of an end (the worker's
    :class:`~queuey_core.worker.hooks.HookRunner`, which imports this module)."""

    guards: tuple[SettleGuard, ...]

    def deferred(self, delivery: Any, reason: str, delay: float) -> None: ...
    def cancelled(self, delivery: Any, reason: str) -> None: ...
    def dead_lettered(self, delivery: Any, reason: str, error: str = "") -> None: ...


def guards_of(hooks: Sequence[Any]) -> tuple[SettleGuard, ...]:
    """The hooks that are guards, in order."""
    return tuple(h for h in hooks if getattr(h, "guards_settles", False) is True)


def held_start(guards: Sequence[SettleGuard], envelope: Envelope) -> Outcome | None:
    """The deferral of a job whose start a guard holds; None: run it."""
    for guard in guards:
        hold = _ask(guard, "hold_start", envelope)
        if hold is not None:
            return Outcome(Kind.DEFERRED, hold.reason, hold.delay)
    return None


def held_end(
    guards: Sequence[SettleGuard], envelope: Envelope, policy: RetryPolicy, outcome: Outcome
) -> Outcome:
    """``outcome``, or the deferral that replaces it when it ends the job and a guard
    holds that end."""
    final = final_event(outcome, policy, envelope.attempt)
    if final is None:
        return outcome
    event, reason = final
    return held_unrun(guards, envelope, event, reason, outcome.result) or outcome


def held_unrun(
    guards: Sequence[SettleGuard],
    envelope: Envelope,
    event: str,
    text: str,
    result: object = None,
) -> Outcome | None:
    """The deferral that replaces the final ``event`` when a guard holds it; None:
    settle it as decided."""
    for guard in guards:
        hold = _ask(guard, "hold_end", event, envelope, text, result)
        if hold is not None:
            return Outcome(Kind.DEFERRED, hold.reason, hold.delay)
    return None


def end_unrun(
    hooks: Announces,
    settle: Callable[[Callable[..., None], tuple[Any, ...], dict[str, Any]], None],
    delivery: Tracked,
    reason: str,
    fields: dict[str, Any],
    event: str = "dead_lettered",
) -> None:
    """Dead-letter (``cancelled``: ack) a delivery whose handler never ran, through the
    dispatcher's ``settle``; deferred instead, at its own priority, while a guard holds
    that end."""
    env = delivery.inner.envelope
    held = held_unrun(hooks.guards, env, event, reason) if hooks.guards else None
    if held is not None:
        hooks.deferred(delivery, held.error, held.delay)
        return settle(delivery.defer, (env.deferred(env.priority), held.delay), fields)
    if event == "cancelled":
        hooks.cancelled(delivery, reason)
        return settle(delivery.ack, (), fields)
    hooks.dead_lettered(delivery, reason)
    settle(delivery.dead_letter, (reason,), fields)


def final_event(outcome: Outcome, policy: RetryPolicy, attempt: int) -> tuple[str, str] | None:
    """The event ``outcome`` ends its job with, and its reason as the dispatcher words
    it; None when the job goes on (a retry, a deferral, or a retry the policy cannot
    even decide: the dispatcher handles that)."""
    kind = outcome.kind
    if kind is Kind.SUCCESS:
        return "succeeded", ""
    if kind is Kind.CANCELLED:
        return "cancelled", outcome.error
    if kind is Kind.FATAL:
        return "dead_lettered", fatal_reason(outcome.error)
    if kind is Kind.RETRYABLE:
        try:
            gives_up = isinstance(policy.decide(attempt), GiveUp)
        except Exception:
            return None
        if gives_up:
            return "dead_lettered", give_up_reason(policy, attempt, outcome.error)
    return None


def fatal_reason(error: str) -> str:
    """The dead letter's reason of a job that failed fatally with ``error``."""
    return f"fatal error: {error}"


def give_up_reason(policy: RetryPolicy, attempt: int, error: str) -> str:
    """The dead letter's reason of a job out of attempts after ``attempt``."""
    return f"max attempts ({policy.max_attempts}) exhausted after attempt {attempt}: {error}"


def _ask(guard: SettleGuard, method: str, *args: Any) -> Hold | None:
    try:
        hold = getattr(guard, method)(*args)
    except Exception:  # a guard must never break the worker: logged, not held
        logger.error("guard %s.%s failed; ignored", type(guard).__qualname__, method, exc_info=True)
        return None
    return hold if isinstance(hold, Hold) else None
