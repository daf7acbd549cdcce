"""Example handlers for queuey, registered under the ``queuey.handlers`` entry point.

On ``alpha`` (the shipped queuey.toml's short-job queue, with priorities and fast
retries):

- ``greet``: logs a greeting;
- ``flaky``: fails its first ``failures`` attempts (retryable), then succeeds;
- ``snooze``: defers itself once (no attempt spent), then succeeds;
- ``doomed``: fails fatally, straight to the dead-letter queue.

On ``beta`` (a quorum queue for long jobs):

- ``nap``: takes ``seconds`` to finish (waking early if cancelled): shows long jobs,
  graceful shutdown and timeouts.
"""

from __future__ import annotations

import logging
from typing import ClassVar

from pydantic import Field

from queuey_core import Deferred, Fatal, Job, JobContext, Retryable, handler

logger = logging.getLogger(__name__)


class Greet(Job):
    """Say hello to someone."""

    NAME: ClassVar[str] = "greet"
    QUEUE: ClassVar[str] = "alpha"
    name: str = Field(min_length=1, max_length=100)


class Flaky(Job):
    """Fail ``failures`` times, then succeed: shows retries with backoff."""

    NAME: ClassVar[str] = "flaky"
    QUEUE: ClassVar[str] = "alpha"
    failures: int = Field(default=1, ge=0)


class Snooze(Job):
    """Defer once for ``seconds``, then succeed: shows a deferral."""

    NAME: ClassVar[str] = "snooze"
    QUEUE: ClassVar[str] = "alpha"
    seconds: float = Field(default=1.0, ge=0)


class Doomed(Job):
    """Always fail fatally: shows the dead-letter queue."""

    NAME: ClassVar[str] = "doomed"
    QUEUE: ClassVar[str] = "alpha"
    why: str = "this job was born to fail"


class Nap(Job):
    """Take a while: shows graceful shutdown and timeouts."""

    NAME: ClassVar[str] = "nap"
    QUEUE: ClassVar[str] = "beta"
    seconds: float = Field(default=1.0, ge=0, le=3600)


@handler
def greet(job: Greet, ctx: JobContext) -> None:
    """Log a greeting."""
    logger.info("hello, %s!", job.name, extra={"job_id": str(ctx.job_id)})


@handler
def flaky(job: Flaky, ctx: JobContext) -> None:
    """Fail until the attempt number is past ``failures``."""
    if ctx.attempt <= job.failures:
        raise Retryable(f"flaky failure {ctx.attempt} of {job.failures}")


@handler
def snooze(job: Snooze, ctx: JobContext) -> None:
    """Defer the first time round."""
    if ctx.deferrals == 0:
        raise Deferred(job.seconds, "snoozing")


@handler
def doomed(job: Doomed, ctx: JobContext) -> None:
    """Fail for good."""
    raise Fatal(job.why)


@handler
def nap(job: Nap, ctx: JobContext) -> None:
    """Sleep, waking early if the job is cancelled (timeout or forced stop)."""
    if ctx.wait(job.seconds):
        raise Retryable("cancelled while napping")
