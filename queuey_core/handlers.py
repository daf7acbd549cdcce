"""Handlers: functions that run one job type, and how the worker finds them."""

from __future__ import annotations

import importlib.metadata
import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, overload, runtime_checkable

from queuey_core.context import JobContext
from queuey_core.errors import ConfigError, DuplicateHandlerError
from queuey_core.jobs import Job, job_identity
from queuey_core.queues import QueueSet

J = TypeVar("J", bound=Job)


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
    """A function bound to the job model it handles: a plain ``def`` (run on a job
    thread) or an ``async def`` (run on the worker's event loop)."""

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


def is_async(handler: JobHandler) -> bool:
    """Whether ``handler`` is an ``async def``: the worker runs it on its event loop.

    A :class:`Handler` is asked about its function; any other handler about its call.
    """
    fn = handler.fn if isinstance(handler, Handler) else handler
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 (an object whose call is async)
    )


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


#: The entry-point group plugins register their handlers under.
ENTRY_POINT_GROUP = "queuey.handlers"


@dataclass(frozen=True)
class Discovered:
    """A handler found through an entry point, and where it came from."""

    handler: JobHandler
    entry_point: str
    distribution: str

    @property
    def origin(self) -> str:
        """``entry point 'name' of distribution 'dist'``, for messages."""
        return f"entry point {self.entry_point!r} of distribution {self.distribution!r}"


def discover(group: str = ENTRY_POINT_GROUP) -> list[Discovered]:
    """Load every handler registered under ``group``, in a stable order.

    An entry point may name a handler, a list of handlers, or a module (every handler
    defined at its top level counts).

    Raises:
        ConfigError: an entry point fails to load, or names nothing runnable.
        DuplicateHandlerError: two handlers claim one job type (both are named).
    """
    found: list[Discovered] = []
    seen: dict[str, Discovered] = {}
    eps = sorted(importlib.metadata.entry_points(group=group), key=lambda ep: ep.name)
    for ep in eps:
        dist = ep.dist.name if ep.dist is not None else "?"
        where = f"entry point {ep.name!r} ({ep.value}) of distribution {dist!r}"
        try:
            target = ep.load()
        except Exception as exc:
            raise ConfigError(f"{where} failed to load: {type(exc).__name__}: {exc}") from None
        handlers = _handlers_in(target)
        if not handlers:
            raise ConfigError(f"{where} names no handler")
        for h in handlers:
            item = Discovered(h, ep.name, dist)
            name = h.job_type.NAME
            if name in seen:
                raise DuplicateHandlerError(name, f"{seen[name].origin} and {item.origin}")
            seen[name] = item
            found.append(item)
    return found


def _handlers_in(target: object) -> list[JobHandler]:
    if isinstance(target, JobHandler) and isinstance(target, Handler):
        return [target]
    if isinstance(target, list | tuple):
        return [h for h in target if isinstance(h, Handler)]
    if isinstance(target, types.ModuleType):
        return [v for v in vars(target).values() if isinstance(v, Handler)]
    return []


def check_queues(handlers: list[Discovered], queues: QueueSet) -> None:
    """Every handler's job must be bound to a declared queue; ConfigError naming it if not."""
    _, unusable = split_by_queue(handlers, queues)
    if unusable:
        raise ConfigError(next(iter(unusable.values())))


def split_by_queue(
    handlers: list[Discovered], queues: QueueSet
) -> tuple[list[Discovered], dict[str, str]]:
    """The handlers whose job is bound to a queue of ``queues``, and for each other job
    type, one line saying why it can be neither enqueued nor run.

    A plugin may bring job types for queues this deployment does not use: they stop only
    what needs them (enqueueing one, or a worker consuming its queue), not every command.
    """
    usable: list[Discovered] = []
    unusable: dict[str, str] = {}
    for item in handlers:
        queue = item.handler.job_type.QUEUE
        if queue in queues:
            usable.append(item)
            continue
        unusable[item.handler.job_type.NAME] = (
            f"job type {item.handler.job_type.NAME!r} ({item.origin}) is bound to queue "
            f"{queue!r}, which the configuration does not declare "
            f"(declared: {', '.join(queues)})"
        )
    return usable, unusable
