"""How a handler's run ended, told apart: success, fatal, deferred or retryable.

Owns: calling a handler and classifying the way it ended, the error text that logs and
dead letters show, and the traceback that failure logs carry. Must never: let an
exception out of a handler escape (except :class:`JobTimeout`, which the timeout
machinery catches), nor raise while describing one: an exception whose ``__str__``
raises, or whose text holds lone surrogates, still gets a text that can be logged and
encoded. Nor put in a traceback what the error text does not already say, besides
where: no source lines (a literal password in a handler's code would be printed) and
no local variables.
"""

from __future__ import annotations

import enum
import functools
import math
import traceback
from dataclasses import dataclass
from typing import Any

from queuey_core.context import JobContext
from queuey_core.errors import Deferred, Fatal, JobCancelled, JobTimeout, Retryable
from queuey_core.handlers import JobHandler
from queuey_core.jobs import Job


class Kind(enum.Enum):
    """The ways a job can end."""

    SUCCESS = "success"
    FATAL = "fatal"
    DEFERRED = "deferred"
    RETRYABLE = "retryable"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a job ended, with the error text or the deferral's reason and delay, and for
    a handler that raised (or was interrupted), the traceback (:func:`format_traceback`).
    ``timed_out`` marks the outcome of a job that outlived its timeout. ``result`` is
    what a successful handler returned (None for most)."""

    kind: Kind
    error: str = ""
    delay: float = 0.0
    traceback: str = ""
    timed_out: bool = False
    result: object = None


SUCCESS = Outcome(Kind.SUCCESS)


def call_handler(handler: JobHandler, job: Job, ctx: JobContext) -> Outcome:
    """Run a handler and classify how it ended. JobTimeout passes through."""
    try:
        result = handler(job, ctx)
    except JobTimeout:
        raise
    except BaseException as exc:
        return outcome_of(exc)
    return SUCCESS if result is None else Outcome(Kind.SUCCESS, result=result)


def outcome_of(exc: BaseException) -> Outcome:
    """How a handler that raised ``exc`` ended (threads and coroutines alike)."""
    if isinstance(exc, Deferred):
        return _deferred(exc)
    if isinstance(exc, JobCancelled):
        return Outcome(Kind.CANCELLED, handler_error_text(exc) or "cancelled")
    if isinstance(exc, Fatal):
        return Outcome(Kind.FATAL, handler_error_text(exc), traceback=format_traceback(exc))
    # Retryable, any other exception: a transient failure
    return Outcome(Kind.RETRYABLE, handler_error_text(exc), traceback=format_traceback(exc))


#: Longest error text kept from a handler: a reason, not a core dump.
MAX_ERROR_TEXT = 2000


def handler_error_text(exc: BaseException) -> str:
    """The error text for logs and dead letters; the type too when it is not ours.

    Never raises, and always returns text that encodes as UTF-8.
    """
    name = _text(type(exc).__name__)
    try:
        text = _text(str(exc))
    except Exception:
        text = "(its message could not be read)"
    if isinstance(exc, (Fatal, Retryable, JobCancelled)):
        return text or name
    return f"{name}: {text}" if text else name


#: Frames kept of each exception (the innermost), and exceptions kept of a chain.
MAX_FRAMES = 40
MAX_CHAIN = 5


def format_traceback(exc: BaseException) -> str:
    """Where ``exc`` was raised: Python's traceback layout, each frame as file, line and
    function, then ``Type: message`` (as :func:`handler_error_text` gives it), for the exception
    and the ones it was raised from or during.

    Source lines and locals are left out, so the traceback says nothing the error text
    does not, besides where. Never raises.
    """
    try:
        return _chain(exc)
    except Exception:
        return f"Traceback unavailable\n{handler_error_text(exc)}"


_CAUSE = "The above exception was the direct cause of the following exception:"
_CONTEXT = "During handling of the above exception, another exception occurred:"


def _chain(exc: BaseException) -> str:
    """The exception and what it was raised from or during, earliest first, as Python
    prints them."""
    parts = [_one(exc)]
    seen = {id(exc)}
    current = exc
    while len(parts) < 2 * MAX_CHAIN - 1:
        if current.__cause__ is not None:
            earlier, link = current.__cause__, _CAUSE
        elif current.__context__ is not None and not current.__suppress_context__:
            earlier, link = current.__context__, _CONTEXT
        else:
            break
        if id(earlier) in seen:
            break
        seen.add(id(earlier))
        parts += [link, _one(earlier)]
        current = earlier
    return "\n\n".join(reversed(parts))


def _one(exc: BaseException) -> str:
    # lookup_lines=False: the source files are never read, and no line is printed.
    frames = traceback.StackSummary.extract(
        traceback.walk_tb(exc.__traceback__), lookup_lines=False
    )
    lines = ["Traceback (most recent call last):"]
    if len(frames) > MAX_FRAMES:
        lines.append(f"  ... {len(frames) - MAX_FRAMES} frames left out ...")
    for frame in frames[-MAX_FRAMES:]:
        name = _text(frame.name)
        lines.append(f'  File "{_text(frame.filename)}", line {frame.lineno}, in {name}')
    kind = type(exc)
    module = _text(getattr(kind, "__module__", ""))
    qualname = _text(getattr(kind, "__qualname__", kind.__name__))
    label = qualname if module in ("builtins", "__main__", "") else f"{module}.{qualname}"
    message = _message(exc)
    lines.append(f"{label}: {message}" if message else label)
    return "\n".join(lines)


def _message(exc: BaseException) -> str:
    try:
        return _text(str(exc))
    except Exception:
        return "(its message could not be read)"


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


@functools.lru_cache(maxsize=64)
def timed_out_outcome(timeout: float) -> Outcome:
    """The outcome of a job that outlived ``timeout`` (made once per timeout: one is
    made ready for every job run under a timeout)."""
    return Outcome(Kind.RETRYABLE, f"job timed out after {timeout:g}s", timed_out=True)


def failure_fields(fields: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
    """A failure's log fields: the job's, and where the handler raised (``traceback``,
    a field of its own so that JSON logs carry it at every level)."""
    return {**fields, "traceback": outcome.traceback} if outcome.traceback else fields


def kind_words(outcome: Outcome) -> tuple[str, str]:
    """How a reason names the settle that could not be built, and its cause."""
    if outcome.kind is Kind.DEFERRED:
        return "the deferral", "it deferred"
    return ("the retry" if outcome.kind is Kind.RETRYABLE else "the settle"), "it failed"
