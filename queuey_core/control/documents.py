"""What travels on the control channel: requests, replies and a worker's status.

Small JSON documents with a format version ``v`` (never pickle). Everything that comes
in is checked with pydantic: a worker logs and ignores a request that does not parse, an
asker skips a reply that does not. The field names of :class:`WorkerStatus` are the
``queuey workers --json`` fields documented in docs/workers-and-control.md: add fields, never
rename.

Owns: the documents, their limits, and how a request chooses workers
(:class:`Selection`). Must never: read a document larger than :data:`MAX_DOCUMENT`, or
let a shutdown request without a choice of workers reach every worker unless it says
``"all": true``.
"""

from __future__ import annotations

import enum
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from queuey_core.errors import DecodeError

_M = TypeVar("_M", bound=BaseModel)

#: The format version of every document.
VERSION: Literal[1] = 1
#: The largest request or reply read, in bytes; a status is well under 2 KiB.
MAX_DOCUMENT = 64 * 1024

_Name = Annotated[str, Field(max_length=255)]
_Names = Annotated[tuple[_Name, ...], Field(max_length=1000)]


class Command(enum.StrEnum):
    """What a request asks of the workers it chooses."""

    STATUS = "status"
    """Reply with your status."""
    SHUTDOWN = "shutdown"
    """Drain as SIGTERM would, and reply that you accepted."""
    PAUSES = "pauses"
    """The paused queues changed: look at them now (:mod:`queuey_core.flow.pause`), and
    reply with your status."""


class Selection(BaseModel):
    """Which workers a request is for: each list given narrows it (id, host, pid).

    No criterion means every worker; for a shutdown that must be said with
    ``all=True``, so that a request missing its filter (a typo, a script's empty
    variable) cannot stop a fleet.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    ids: _Names = ()
    hosts: _Names = ()
    pids: Annotated[tuple[int, ...], Field(max_length=1000)] = ()
    all: bool = False

    @property
    def is_everyone(self) -> bool:
        """Whether no criterion narrows it."""
        return not (self.ids or self.hosts or self.pids)

    def matches(self, worker_id: str, host: str, pid: int) -> bool:
        """Whether the worker with this id, host and pid is chosen."""
        return (
            (not self.ids or worker_id in self.ids)
            and (not self.hosts or host in self.hosts)
            and (not self.pids or pid in self.pids)
        )

    def describe(self) -> str:
        """The criteria, for messages: ``host=a pid=12`` or ``every worker``."""
        parts = [f"id={i}" for i in self.ids]
        parts += [f"host={h}" for h in self.hosts]
        parts += [f"pid={p}" for p in self.pids]
        return " ".join(parts) or "every worker"


class ControlRequest(BaseModel):
    """A request broadcast to every worker; only the chosen ones act and reply."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    v: Literal[1]
    """The format version: always given (:data:`VERSION`)."""
    command: Command
    select: Selection = Selection()

    def encode(self) -> bytes:
        """The request as it goes on the wire."""
        return self.model_dump_json().encode()

    @classmethod
    def decode(cls, body: bytes) -> ControlRequest:
        """A request read from the wire. Raises DecodeError saying what is wrong."""
        return _decode(cls, body)


class WorkerStatus(BaseModel):
    """One worker as it reports itself. docs/workers-and-control.md lists every field."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: _Name
    """``host:pid:random``: unique, even when a pid is reused or two hosts share a name."""
    host: _Name
    pid: int
    version: _Name
    state: _Name
    """``starting``, ``consuming``, ``draining`` (shutting down) or ``stopped``."""
    queues: _Names
    job_types: _Names
    concurrency: int
    running: int
    """Handlers running now."""
    in_flight: int
    """Deliveries pulled from the broker and not settled yet (running ones included)."""
    succeeded: int
    failed: int
    """Runs whose handler raised or timed out (each was then retried or dead-lettered)."""
    retried: int
    deferred: int
    dead_lettered: int
    """Every dead letter: fatal, out of attempts, no handler, payload that did not fit."""
    timed_out: int
    settle_failures: int
    stuck_job_threads: int
    started_at: _Name
    """When ``run()`` began: ISO 8601, UTC, milliseconds."""
    uptime: float
    """Seconds since then."""
    supervisor_pid: int | None = None
    """The pid of the ``queuey worker --processes`` supervisor this worker is a child of."""
    child: int | None = None
    """Which child of that supervisor it is (``QUEUEY_CHILD_INDEX``)."""
    paused: _Names = ()
    """Its queues that are paused now: it takes none of their jobs until they are resumed."""


class ControlReply(BaseModel):
    """A worker's answer to a request: its status, and whether it accepted the command."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    v: Literal[1]
    """The format version: always given (:data:`VERSION`)."""
    command: Command
    accepted: bool = True
    worker: WorkerStatus

    def encode(self) -> bytes:
        """The reply as it goes on the wire."""
        return self.model_dump_json().encode()

    @classmethod
    def decode(cls, body: bytes) -> ControlReply:
        """A reply read from the wire. Raises DecodeError saying what is wrong."""
        return _decode(cls, body)


def _decode(model: type[_M], body: bytes) -> _M:
    if len(body) > MAX_DOCUMENT:
        raise DecodeError(f"{len(body)} bytes, more than {MAX_DOCUMENT}")
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise DecodeError(f"{where}: {first['msg']}") from None
