"""The envelope: a job on the wire, as JSON bytes (never pickle)."""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from queuey_core.errors import DecodeError
from queuey_core.jobs import Job, job_identity

J = TypeVar("J", bound=Job)


class Envelope(BaseModel):
    """A job's identity, delivery history and payload.

    ``attempt`` counts runs that may fail (it starts at 1 and grows on a retry);
    ``deferrals`` counts deferrals, which never spend an attempt. The envelope carries
    these counters itself so nothing depends on broker-side headers such as ``x-death``.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    job_id: uuid.UUID
    job_type: str = Field(min_length=1)
    queue: str = Field(min_length=1)
    attempt: int = Field(default=1, ge=1)
    deferrals: int = Field(default=0, ge=0)
    priority: int = Field(default=0, ge=0, le=255)
    enqueued_at: int = Field(description="milliseconds since the Unix epoch")
    payload: dict[str, Any]

    @classmethod
    def for_job(cls, job: Job, *, enqueued_at: int, priority: int = 0) -> Envelope:
        """A first-attempt envelope for ``job`` with a fresh job id."""
        name, queue = job_identity(type(job))
        return cls(
            job_id=uuid.uuid4(),
            job_type=name,
            queue=queue,
            priority=priority,
            enqueued_at=enqueued_at,
            payload=job.model_dump(mode="json"),
        )

    def next_attempt(self) -> Envelope:
        """The envelope of the retry: one more attempt, back at priority 0.

        Dropping the priority keeps a job that once deferred from jumping the backlog
        on every retry.
        """
        return self.model_copy(update={"attempt": self.attempt + 1, "priority": 0})

    def deferred(self, priority: int) -> Envelope:
        """The envelope of a deferral: one more deferral at ``priority``, same attempt."""
        return self.model_copy(update={"deferrals": self.deferrals + 1, "priority": priority})

    def fresh(self) -> Envelope:
        """The envelope of a requeued dead letter: attempt 1 again, nothing else changed."""
        return self.model_copy(update={"attempt": 1, "priority": 0})

    def encode(self) -> bytes:
        """JSON bytes for the wire."""
        return self.model_dump_json().encode()

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> Envelope:
        """Parse wire bytes; anything that is not a valid envelope raises DecodeError."""
        try:
            return cls.model_validate_json(bytes(data))
        except ValidationError as exc:
            raise DecodeError(f"not a queuey envelope: {_first_error(exc)}") from exc

    def decode_job(self, job_type: type[J]) -> J:
        """Validate the payload against ``job_type``; DecodeError if it does not fit."""
        try:
            return job_type.model_validate(self.payload)
        except ValidationError as exc:
            raise DecodeError(
                f"payload does not fit {job_type.__qualname__}: {_first_error(exc)}"
            ) from exc


def _first_error(exc: ValidationError) -> str:
    """One short line from a pydantic error, without echoing the input value."""
    errors = exc.errors(include_url=False, include_input=False)
    if not errors:
        return "invalid"
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "value"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first.get('msg', 'invalid')}{more}"
