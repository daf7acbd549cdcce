"""How a handler's run ended, told apart: success, fatal, deferred or retryable.

Owns: calling a handler and classifying the way it ended, and the error text that logs
and dead letters show. Must never: let an exception out of a handler escape (except
:class:`JobTimeout`, which the timeout machinery catches).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from queuey_core.context import JobContext
from queuey_core.errors import Deferred, Fatal, JobTimeout, Retryable
from queuey_core.handlers import JobHandler
from queuey_core.jobs import Job


class Kind(enum.Enum):
    """The four ways a job can end."""

    SUCCESS = "success"
    FATAL = "fatal"
    DEFERRED = "deferred"
    RETRYABLE = "retryable"


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a job ended, with the error text or the deferral's reason and delay."""

    kind: Kind
    error: str = ""
    delay: float = 0.0


SUCCESS = Outcome(Kind.SUCCESS)


def call_handler(handler: JobHandler, job: Job, ctx: JobContext) -> Outcome:
    """Run a handler and classify how it ended. JobTimeout passes through."""
    try:
        handler(job, ctx)
    except Deferred as d:
        return Outcome(Kind.DEFERRED, d.reason, d.delay)
    except Fatal as exc:
        return Outcome(Kind.FATAL, describe(exc))
    except JobTimeout:
        raise
    except BaseException as exc:  # Retryable, any other exception: a transient failure
        return Outcome(Kind.RETRYABLE, describe(exc))
    return SUCCESS


def describe(exc: BaseException) -> str:
    """The error text for logs and dead letters; the type too when it is not ours."""
    text = str(exc)
    if isinstance(exc, (Fatal, Retryable)):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
