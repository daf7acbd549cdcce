"""Bursts of SIGTERM and SIGINT at random spacings, for the tests of how processes stop."""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Burst:
    """Signals to send, each after its gap (seconds) from the one before."""

    signals: list[signal.Signals]
    gaps: list[float]

    @classmethod
    def random(cls, rng: random.Random) -> Burst:
        n = rng.choice([1, 1, 2, 2, 2, 3, 5, 10])
        spacing = rng.choice([0.0, 0.0002, 0.002, 0.02, 0.3])
        signals = [rng.choice([signal.SIGTERM, signal.SIGINT]) for _ in range(n)]
        return cls(signals, [rng.uniform(0, spacing) for _ in range(n)])

    def send(self, pid: int) -> float:
        """Send the burst to ``pid``; when the first signal went."""
        first = 0.0
        for i, (sig, gap) in enumerate(zip(self.signals, self.gaps, strict=True)):
            if gap:
                time.sleep(gap)
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break  # it already ended: the rest has nobody to reach
            if i == 0:
                first = time.monotonic()
        return first
