"""Handlers: functions that run one job type, and how the worker finds them."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, overload, runtime_checkable

from queuey_core.context import JobContext
from queuey_core.jobs import Job, job_identity

J = TypeVar("J", bound=Job)
J_contra = TypeVar("J_contra", bound=Job, contravariant=True)

HandlerFn = Callable[[J, JobContext], object]


@runtime_checkable
class JobHandler(Protocol):
    """Anything the worker can run: the job model it takes, and a call that runs it.

    Returning means success; raising :class:`~queuey_core.errors.Retryable`,
    :class:`~queuey_core.errors.Fatal` or :class:`~queuey_core.errors.Deferred` says
    otherwise; any other exception counts as retryable.
    """

    @property
    def job_type(self) -> type[Job]:
        """The job model this handler runs."""

    def __call__(self, job: Any, ctx: JobContext, /) -> object:
        """Run one job."""


@dataclass(frozen=True)
class Handler(Generic[J]):
    """A plain function bound to the job model it handles."""

    job_type: type[J]
    fn: Callable[[J, JobContext], object]

    def __post_init__(self) -> None:
        job_identity(self.job_type)

    @property
    def name(self) -> str:
        """The job type on the wire."""
        return self.job_type.NAME

    def __call__(self, job: J, ctx: JobContext, /) -> object:
        """Run the function."""
        return self.fn(job, ctx)

    def __repr__(self) -> str:
        return f"Handler({self.job_type.NAME!r}, {getattr(self.fn, '__qualname__', self.fn)!r})"


@overload
def handler(fn: Callable[[J, JobContext], object], /) -> Handler[J]: ...
@overload
def handler(job_type: type[J], /) -> Callable[[Callable[[J, JobContext], object]], Handler[J]]: ...
def handler(target: Any, /) -> Any:
    """Turn ``fn(job, ctx)`` into a :class:`Handler`.

    ``@handler`` reads the job model from the first parameter's annotation;
    ``@handler(Greet)`` names it explicitly.
    """
    if isinstance(target, type) and issubclass(target, Job):
        job_type = target
        return lambda fn: Handler(job_type, fn)
    if callable(target):
        return Handler(_job_type_of(target), target)
    raise TypeError("@handler takes a function or a Job subclass")


def _job_type_of(fn: Callable[..., object]) -> type[Job]:
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        raise TypeError(f"{fn.__qualname__} must take (job, ctx)")
    hints = typing.get_type_hints(fn)
    annotation = hints.get(params[0].name)
    if not (isinstance(annotation, type) and issubclass(annotation, Job)):
        raise TypeError(
            f"cannot tell which job {fn.__qualname__} handles: annotate its first parameter "
            "with a Job subclass, or use @handler(JobClass)"
        )
    return annotation
