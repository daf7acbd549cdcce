"""Jobs: pydantic models bound to a queue by class variables."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from queuey_core.flow.limit_spec import Limit
from queuey_core.retry import RetryPolicy

if TYPE_CHECKING:
    from queuey_core.flow.unique import Unique


class Job(BaseModel):
    """Base class of every job: its fields are the payload, validated on both ends.

    Subclasses set ``NAME`` (the job type on the wire, unique in an application) and
    ``QUEUE`` (a queue of the application's queue set), and may set ``RETRY`` to
    override the queue's retry policy, ``UNIQUE`` to refuse a second enqueue of the
    same key while the first holds it (:class:`~queuey_core.flow.unique.Unique`), and
    ``LIMITS`` to start under rate and concurrency limits
    (:class:`~queuey_core.flow.limit_spec.Limit`, beside ``[limits.NAME]`` in the
    configuration)::

        class Greet(Job):
            NAME = "greet"
            QUEUE = "default"
            name: str
    """

    NAME: ClassVar[str]
    QUEUE: ClassVar[str]
    RETRY: ClassVar[RetryPolicy | None] = None
    UNIQUE: ClassVar[Unique | None] = None
    LIMITS: ClassVar[tuple[Limit, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Intermediate abstract bases may leave NAME/QUEUE to their children; a concrete
        # job is checked where it is used (Producer, Worker).
        name = cls.__dict__.get("NAME")
        if name is not None and (not isinstance(name, str) or not name):
            raise TypeError(f"{cls.__qualname__}.NAME must be a non-empty string")


def job_identity(job_type: type[Job]) -> tuple[str, str]:
    """``(NAME, QUEUE)`` of a concrete job class, or a clear TypeError."""
    name = getattr(job_type, "NAME", None)
    queue = getattr(job_type, "QUEUE", None)
    if not isinstance(name, str) or not isinstance(queue, str):
        raise TypeError(f"{job_type.__qualname__} must set the class variables NAME and QUEUE")
    return name, queue
