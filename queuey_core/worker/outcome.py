"""How a handler's run ended, told apart: success, fatal, deferred or retryable.

Owns: calling a handler and classifying the way it ended, and the error text that logs
and dead letters show. Must never: let an exception out of a handler escape (except
:class:`JobTimeout`, which the timeout machinery catches), nor raise while describing
one: an exception whose ``__str__`` raises, or whose text holds lone surrogates, still
gets a text that can be logged and encoded.
"""

from __future__ import annotations

import enum
import math
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
        return _deferred(d)
    except Fatal as exc:
        return Outcome(Kind.FATAL, describe(exc))
    except JobTimeout:
        raise
    except BaseException as exc:  # Retryable, any other exception: a transient failure
        return Outcome(Kind.RETRYABLE, describe(exc))
    return SUCCESS


#: Longest error text kept from a handler: a reason, not a core dump.
MAX_ERROR_TEXT = 2000


def describe(exc: BaseException) -> str:
    """The error text for logs and dead letters; the type too when it is not ours.

    Never raises, and always returns text that encodes as UTF-8.
    """
    name = _text(type(exc).__name__)
    try:
        text = _text(str(exc))
    except Exception:
        text = "(its message could not be read)"
    if isinstance(exc, (Fatal, Retryable)):
        return text or name
    return f"{name}: {text}" if text else name


def _text(value: object) -> str:
    """``value`` as bounded text without lone surrogates (escaped), whatever it is."""
    try:
        text = value if isinstance(value, str) else str(value)
        # str subclasses can carry anything: go through bytes to get a plain str back.
        clean = text.encode("utf-8", "backslashreplace").decode("utf-8")
    except Exception:
        return "(unreadable)"
    if len(clean) > MAX_ERROR_TEXT:
        return clean[: MAX_ERROR_TEXT - 3] + "..."
    return clean


def _deferred(d: Deferred) -> Outcome:
    """A deferral's outcome; its delay is NaN when it has none a clock could use.

    ``Deferred.__init__`` refuses bad delays, but an instance can be built around it (or
    changed after): the dispatcher dead-letters a NaN, or a delay too long, rather than
    guess.
    """
    try:
        reason = _text(d.reason)
    except Exception:
        reason = "deferred"
    try:
        delay = float(d.delay)
    except Exception:
        delay = math.nan
    return Outcome(Kind.DEFERRED, reason, delay)
