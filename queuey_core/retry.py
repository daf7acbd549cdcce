"""Retry policies: how many attempts a job gets and how long to wait between them.

Pure maths, no I/O and no clock: :meth:`RetryPolicy.decide` maps an attempt number
(and, with jitter, a random number) to a decision, so it is tested without a broker.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class BackoffKind(StrEnum):
    """How the delay between attempts grows."""

    EXPONENTIAL = "exponential"
    FIXED = "fixed"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before retry number ``n`` (1 = the retry after the first attempt).

    Exponential: ``initial * multiplier ** (n - 1)``, capped at ``max``. With
    ``jitter`` the delay is drawn uniformly from ``[d / 2, d]`` ("equal jitter"): retries
    of jobs that failed together spread out, yet never wait less than half the nominal
    delay and never more than the cap.
    """

    kind: BackoffKind = BackoffKind.EXPONENTIAL
    initial: float = 1.0
    max: float = 600.0
    multiplier: float = 2.0
    jitter: bool = False

    def __post_init__(self) -> None:
        # NaN compares false with everything, so it would slip past the checks below.
        if not all(math.isfinite(v) for v in (self.initial, self.max, self.multiplier)):
            raise ValueError("backoff delays and multiplier must be finite numbers")
        if self.initial < 0 or self.max < 0:
            raise ValueError("backoff delays cannot be negative")
        if self.max < self.initial:
            raise ValueError(f"backoff max ({self.max:g}s) is below initial ({self.initial:g}s)")
        if self.multiplier < 1:
            raise ValueError("backoff multiplier must be at least 1")

    def nominal(self, retry: int) -> float:
        """The delay before retry ``retry`` (1-based) without jitter, capped at ``max``."""
        if retry < 1:
            raise ValueError("retry numbers start at 1")
        if self.kind is BackoffKind.NONE:
            return 0.0
        if self.kind is BackoffKind.FIXED:
            return self.initial
        if self.initial == 0 or self.multiplier == 1:
            return min(self.initial, self.max)
        # Compare logarithms before computing the power: retry 10_000 must not overflow.
        exponent = (retry - 1) * math.log(self.multiplier)
        if exponent >= math.log(self.max) - math.log(self.initial):
            return self.max
        try:
            return min(self.initial * self.multiplier ** (retry - 1), self.max)
        except OverflowError:  # a tiny initial times a huge power: stay in log space
            return min(math.exp(math.log(self.initial) + exponent), self.max)

    def delay(self, retry: int, rand: float | None = None) -> float:
        """The delay before retry ``retry``; ``rand`` in ``[0, 1)`` applies the jitter."""
        nominal = self.nominal(retry)
        if not self.jitter:
            return nominal
        r = random.random() if rand is None else rand
        return nominal / 2 + (nominal / 2) * r


@dataclass(frozen=True, slots=True)
class Retry:
    """Run the job again after ``delay`` seconds."""

    delay: float


@dataclass(frozen=True, slots=True)
class GiveUp:
    """No attempts left: dead-letter the job."""


RetryDecision = Retry | GiveUp


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """At most ``max_attempts`` runs of a job (the first one included)."""

    max_attempts: int = 3
    backoff: Backoff = Backoff()

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1 (1 means: never retry)")

    @classmethod
    def never(cls) -> RetryPolicy:
        """One attempt, no retries."""
        return cls(max_attempts=1)

    def decide(self, attempt: int, rand: Callable[[], float] | None = None) -> RetryDecision:
        """What to do after attempt ``attempt`` (1-based) failed transiently."""
        if attempt >= self.max_attempts:
            return GiveUp()
        return Retry(self.backoff.delay(attempt, rand() if rand is not None else None))
