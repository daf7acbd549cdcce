"""What only some backends can do: capabilities declared beside the narrow seam.

:class:`~queuey_core.backends.base.Backend` is what every backend must do (publish,
consume, settle). Everything else is a capability here, a ``runtime_checkable``
Protocol of its own:

- :class:`DeadLetterTools`: list, requeue, delete and purge dead letters (``queuey dlq``);
- :class:`Inspectable`: count what queues hold (``queuey queues``, ``dlq list``);
- :class:`SupportsControl`: a broadcast channel to every live worker (``queuey workers``);
- :class:`SupportsSchedules`: where schedules keep their last tick, and the election
  of the scheduler that fires (``queuey scheduler``, ``queuey schedules``);
- :class:`PublishesEncoded`: take first attempts already encoded (``enqueue_many``);
- :class:`PublishesAhead`: hand a batch over now, wait for its confirms later (``--file``);
- :class:`Republishes`: counts what it published again after a lost connection;
- :class:`ConnectionReporting`: how each connection is, without blocking (``/healthz``);
- :class:`SupportsCancellation`: cancels that every worker sees, those that start later
  too, for a retention window (``queuey cancel``);
- :class:`SupportsPause` (re-exported from :mod:`queuey_core.flow.pause_capability`, where
  pausing lives): paused queues that every worker obeys until resumed;
- :class:`HoldsLeases`: deliveries are leases kept in shared storage, which a process
  stopped at once gives back itself (the worker's forced stop);
- :class:`HoldsUniqueKeys`: keeps the unique keys of jobs itself, and holds a job id
  the caller chose as one (the producer and the worker; docs/flow-control.md);
- :class:`EarlyAck`, of a *delivery*: ack without waiting for the broker (the dispatcher
  asks :func:`acks_early`, an ``isinstance`` kept per delivery class);
- :class:`SettlesInProcess`, of a *delivery*: every settle returns without waiting (the
  worker's event loop settles an async success itself; :func:`settles_in_process`).

A backend declares what it provides by inheriting the Protocols explicitly
(``class MemoryBackend(DeadLetterTools, Inspectable, ...)``): the class line is the
list, and mypy checks each method's signature against the Protocol. Callers ask by
type, never by attribute: ``isinstance(backend, Inspectable)`` where the capability is
optional (the worker serves control only if it can), :func:`require` where it is needed
(it raises :class:`~queuey_core.errors.MissingCapabilityError` with one clear line).
See ``docs/backends.md``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeGuard, TypeVar, runtime_checkable

# Re-exported: the dead-letter capability lives in a module of its own, and callers
# keep asking for it here beside the others.
from queuey_core.backends.dead_letter_tools import AnyDeadLetter as AnyDeadLetter  # noqa: PLC0414
from queuey_core.backends.dead_letter_tools import DeadLetter as DeadLetter  # noqa: PLC0414
from queuey_core.backends.dead_letter_tools import DeadLetterPage as DeadLetterPage  # noqa: PLC0414
from queuey_core.backends.dead_letter_tools import DeadLetterTools as DeadLetterTools  # noqa: PLC0414
from queuey_core.backends.dead_letter_tools import DeadLetterWindow as DeadLetterWindow  # noqa: PLC0414
from queuey_core.backends.dead_letter_tools import (
    KeepsDeadLettersInStore as KeepsDeadLettersInStore,  # noqa: PLC0414
)
from queuey_core.backends.dead_letter_tools import UndecodableDeadLetter as UndecodableDeadLetter  # noqa: PLC0414
from queuey_core.envelope import EncodedEnvelope
from queuey_core.errors import BackendError, MissingCapabilityError
from queuey_core.flow.pause_capability import SupportsPause as SupportsPause  # noqa: PLC0414

if TYPE_CHECKING:
    from queuey_core.flow.unique_keys import UniqueKeys
    from queuey_core.schedules.election import Election
    from queuey_core.schedules.state import ScheduleState

# -- inspection ------------------------------------------------------------------------


class QueueCounts(NamedTuple):
    """What a declared queue holds, as the broker reports it.

    ``dead_letters`` is None when the queue's dead-letter queue does not exist.
    """

    ready: int
    consumers: int
    dead_letters: int | None


@dataclass(frozen=True, slots=True)
class Inspection:
    """One look at some queues: their counts, None for a queue not declared yet.

    ``held`` is what the delay ladder holds for every queue together, or None when the
    ladder is not declared yet (nothing was ever enqueued with a delay or retried).
    ``unroutable`` is what ``queuey.unroutable`` holds: delayed messages whose queue did
    not exist at the end of the ladder (always 0 on a backend without a ladder).
    """

    queues: dict[str, QueueCounts | None]
    held: int | None
    unroutable: int = 0


@runtime_checkable
class Inspectable(Protocol):
    """A backend that can count what its queues hold (``queuey queues``, ``dlq list``)."""

    def inspect(self, names: Sequence[str]) -> Inspection:
        """Counts of ``names``; a queue that does not exist is None, never an error."""


# -- the control channel ---------------------------------------------------------------

#: Answers one control request (its body, as sent) with the body of the reply, or None
#: for no reply. Called on the backend's thread: it must be quick and never raise.
ControlHandler = Callable[[bytes], bytes | None]


class ControlServer(Protocol):
    """A worker's end of the control channel, started by :meth:`SupportsControl.serve_control`."""

    def close(self) -> None:
        """Stop answering; idempotent."""


@runtime_checkable
class SupportsControl(Protocol):
    """A broadcast channel to every live worker.

    :mod:`queuey_core.control` owns what travels on it (small versioned JSON
    documents); a backend only moves the bytes, as it moves envelopes. A worker answers
    through :meth:`serve_control`; ``queuey workers`` asks through
    :meth:`broadcast_control`. ``RabbitMQBackend`` uses a fanout exchange and RabbitMQ's
    direct reply-to, ``MemoryBackend`` calls the handlers in the caller's thread. A
    backend without it simply has no live-worker commands.
    """

    def serve_control(self, handler: ControlHandler) -> ControlServer:
        """Start answering broadcast requests with ``handler``, without waiting for the
        broker: the worker never waits on (or breaks because of) its control channel."""

    def broadcast_control(self, request: bytes, *, timeout: float) -> list[bytes]:
        """Send ``request`` to every worker serving, and return the replies that came
        within ``timeout`` seconds (none is not an error)."""


# -- schedules -------------------------------------------------------------------------


@runtime_checkable
class SupportsSchedules(Protocol):
    """Where the scheduler keeps each schedule's last tick, and how schedulers elect one.

    Both must outlive every scheduler and be reachable from any machine, so they live
    on the broker. Each call makes a new object, with connections of its own, that the
    caller closes.
    """

    def schedule_state(self) -> ScheduleState:
        """A store of the last tick fired by each schedule."""

    def election(self, *, heartbeat: int) -> Election:
        """One candidate of the election of the scheduler that fires; a candidate whose
        machine vanishes is replaced after two or three ``heartbeat`` seconds."""


# -- publishing and deliveries ---------------------------------------------------------


@runtime_checkable
class PublishesEncoded(Protocol):
    """A backend that takes first attempts already encoded (``enqueue_many``'s hot path).

    ``Producer.enqueue_many`` uses it when the backend has it, and hands
    :meth:`Backend.publish_many` envelopes otherwise.
    """

    def publish_encoded(self, items: Sequence[tuple[EncodedEnvelope, float | None]]) -> None:
        """Like :meth:`Backend.publish_many`, for envelopes already encoded."""


@runtime_checkable
class PublishesAhead(Protocol):
    """A backend whose batches can be handed over now and confirmed later (RabbitMQ's).

    A caller hands the next batch over while the last one waits for its confirms, so
    the broker never waits between batches; the batches still reach their queues in
    the order of the calls. ``Producer.begin_enqueue_many`` uses it when the backend has
    it, and publishes the whole batch at once otherwise.
    """

    def publish_ahead(
        self, items: Sequence[tuple[EncodedEnvelope, float | None]]
    ) -> Callable[[], None]:
        """Hand ``items`` over now, after those of every call that returned before; the
        call returned waits for their confirms and raises what
        :meth:`Backend.publish_many` raises. A failure while they are handed over is
        raised at once, the same way."""


@runtime_checkable
class Republishes(Protocol):
    """A backend that publishes again what a lost connection left unconfirmed, and counts
    it (each may be on the broker twice, with the same job id: ``queuey enqueue-file``
    reports them)."""

    @property
    def republished(self) -> int:
        """Messages published again after a lost connection, over the backend's life."""


@runtime_checkable
class HoldsLeases(Protocol):
    """A backend whose deliveries are leases kept in shared storage (the embedded
    backend's file), not tied to a connection: a process that ends without giving them
    back leaves them held until their leases run out, where a broker takes a dead
    connection's deliveries back at once. A worker stopped at once gives them back
    through this before it exits."""

    def give_back_now(self, *, timeout: float) -> str:
        """Stop taking deliveries and give back every one this backend holds, waiting
        at most ``timeout`` seconds for the storage; what became of them, a phrase for
        the log ("were given back ...", "stay leased ... for up to ...")."""


@runtime_checkable
class HoldsUniqueKeys(Protocol):
    """A backend that keeps unique keys in its own storage (the embedded file, the
    in-memory backend's process), where a claim can be exact; a job id the caller
    chose is then a key too, held while the job is queued or running. RabbitMQ keeps
    them in the job store instead (:func:`queuey_core.flow.unique_setup.unique_keys_for`)."""

    def unique_keys(self) -> UniqueKeys:
        """Where this backend's unique keys are held."""


@runtime_checkable
class EarlyAck(Protocol):
    """A *delivery* that can be acked without waiting for the broker (RabbitMQ's).

    The dispatcher hands a success's ack to it and goes on to the next job.
    """

    __slots__ = ()  # a delivery declaring it keeps its own slots

    def ack_soon(self, failed: Callable[[BackendError], None]) -> None:
        """Ack in the background; ``failed`` is called if the ack cannot be sent after all
        (the broker then redelivers the message)."""


@runtime_checkable
class SettlesInProcess(Protocol):
    """A *delivery* whose settles wait on no I/O and no other thread (the in-memory
    backend's: a dict under a lock held for microseconds).

    The worker's event loop settles an async job's success on such a delivery itself,
    as it does an early ack, rather than hand it to a settle thread.
    """

    __slots__ = ()

    def settles_in_process(self) -> bool:
        """True: a settle of this delivery returns without waiting on anything."""


#: (Delivery class, capability) -> whether it is one (see :func:`acks_early`).
_KEPT: dict[tuple[type, type], bool] = {}


def _is(delivery: object, capability: type) -> bool:
    """``isinstance(delivery, capability)``, asked once per delivery class.

    The dispatcher asks for every job, and a Protocol's ``isinstance`` takes some
    microseconds (it looks at every member); a delivery class does not change its
    methods, so its answer is kept.
    """
    key = (type(delivery), capability)
    known = _KEPT.get(key)
    if known is None:
        known = _KEPT[key] = isinstance(delivery, capability)
    return known


def acks_early(delivery: object) -> TypeGuard[EarlyAck]:
    """``isinstance(delivery, EarlyAck)``, asked once per delivery class."""
    return _is(delivery, EarlyAck)


def settles_in_process(delivery: object) -> TypeGuard[SettlesInProcess]:
    """``isinstance(delivery, SettlesInProcess)``, asked once per delivery class."""
    return _is(delivery, SettlesInProcess)


#: Delivery class -> whether it is EarlyAck or SettlesInProcess (see :func:`acks_at_once`).
_AT_ONCE: dict[type, bool] = {}


def acks_at_once(delivery: object) -> bool:
    """Whether an ack of ``delivery`` waits for nothing (it is :class:`EarlyAck` or
    :class:`SettlesInProcess`): the worker's event loop then settles an async job's
    success itself. One dict lookup a job once asked for its class."""
    kind = type(delivery)
    known = _AT_ONCE.get(kind)
    if known is None:
        known = _AT_ONCE[kind] = acks_early(delivery) or settles_in_process(delivery)
    return known


# -- observability ---------------------------------------------------------------------


class LinkStatusLike(Protocol):
    """One broker connection, as a backend reports it."""

    @property
    def state(self) -> str:
        """``"connecting"``, ``"open"``, ``"reconnecting"``, ``"dead"`` or ``"closed"``."""

    @property
    def reconnects(self) -> int:
        """Connections regained after a loss."""

    @property
    def thread_alive(self) -> bool:
        """Whether the connection's I/O thread runs."""


@runtime_checkable
class ConnectionReporting(Protocol):
    """A backend that tells how its connections are (health checks and metrics)."""

    def connection_status(self) -> Mapping[str, LinkStatusLike]:
        """Each connection by role (``"consumer"``, ``"publisher"``), without blocking."""


# -- cancellation ----------------------------------------------------------------------

#: Told of cancelled job ids: the ones already recorded when the watch starts, then each
#: new one. Called on the backend's thread: quick, never raising.
CancelListener = Callable[[Sequence[uuid.UUID]], None]


class CancelWatch(Protocol):
    """A worker's watch on cancels, started by :meth:`SupportsCancellation.watch_cancels`."""

    def close(self) -> None:
        """Stop watching; idempotent."""


@runtime_checkable
class SupportsCancellation(Protocol):
    """Cancels that stick: recorded on the broker for ``retention`` seconds, read by
    every worker from its start (a RabbitMQ stream with ``x-max-age``, a table of the
    embedded backend's file, a set in memory), so a worker that starts after the cancel
    still never runs the job."""

    def cancel_jobs(self, job_ids: Sequence[uuid.UUID]) -> None:
        """Record cancels of ``job_ids`` (whether known or not: the caller checks).

        Raises:
            BackendError: the cancels could not be recorded.
        """

    def watch_cancels(self, listener: CancelListener) -> CancelWatch:
        """Tell ``listener`` of every cancel still in the retention window, *before*
        returning, then of each new one as it comes.

        Raises:
            BackendError: the cancels could not be read.
        """


# -- asking for one --------------------------------------------------------------------

C = TypeVar("C")

#: What each capability lets a caller do, for the error of a backend without it.
_ABILITY: dict[type, str] = {
    DeadLetterTools: "work on dead letters",
    Inspectable: "count what its queues hold",
    SupportsControl: "talk to live workers",
    SupportsSchedules: "keep schedules or elect a scheduler",
    PublishesEncoded: "publish encoded envelopes",
    ConnectionReporting: "report its connections",
    SupportsCancellation: "cancel jobs",
    SupportsPause: "pause queues",
}


def require(backend: object, capability: type[C], purpose: str) -> C:
    """``backend`` as a ``capability``, or MissingCapabilityError saying what needed it.

    ``purpose`` names the caller, as a user would: "`queuey dlq list`".

    Raises:
        MissingCapabilityError: the backend does not provide ``capability``.
    """
    if isinstance(backend, capability):
        return backend
    raise MissingCapabilityError(
        f"the {backend_name(backend)} backend cannot "
        f"{_ABILITY.get(capability, capability.__name__)} (needed by {purpose})"
    )


def backend_name(backend: object) -> str:
    """A backend's short name for messages: ``RabbitMQBackend`` is "rabbitmq"."""
    name = type(backend).__name__
    return (name.removesuffix("Backend") or name).lower()
