"""Measuring whether an event loop keeps running while something is awaited."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

#: The ticker's period: it asks the loop to run it again every millisecond.
PERIOD = 0.001


@dataclass(frozen=True)
class Ticks:
    """The gaps between a 1 ms ticker's runs (seconds), over ``elapsed`` seconds."""

    gaps: list[float]
    elapsed: float

    @property
    def median(self) -> float:
        return statistics.median(self.gaps) if self.gaps else self.elapsed

    @property
    def longest(self) -> float:
        return max(self.gaps, default=self.elapsed)

    def __str__(self) -> str:
        return (
            f"{len(self.gaps)} ticks in {self.elapsed * 1000:.0f} ms, median gap "
            f"{self.median * 1000:.2f} ms, longest {self.longest * 1000:.1f} ms"
        )


async def ticking(work: Awaitable[T]) -> tuple[T, Ticks]:
    """Await ``work`` while a ticker runs every millisecond; its result and the ticks."""
    gaps: list[float] = []
    done = False

    async def tick() -> None:
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(PERIOD)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)  # the ticker's first turn
    start = time.perf_counter()
    try:
        result = await work
    finally:
        elapsed = time.perf_counter() - start
        done = True
        await ticker
    return result, Ticks(gaps, elapsed)


async def idle_ticks(seconds: float) -> Ticks:
    """The ticker alone for ``seconds``: what this machine gives a loop right now."""
    _, ticks = await ticking(asyncio.sleep(seconds))
    return ticks


def kept_ticking(during: Ticks, idle: Ticks) -> str | None:
    """Why ``during`` is not a loop that kept ticking about every millisecond (None if it
    is): its median gap within 5 ms (the interpreter's switch interval) or three times
    what the machine gives an idle loop now, whichever is more, and a tick at least every
    20 ms on average. A blocked loop ticks once, at the end."""
    limit = max(0.005, 3 * idle.median)
    if during.median > limit:
        return f"median gap above {limit * 1000:.1f} ms: {during} (idle: {idle})"
    if len(during.gaps) < during.elapsed / 0.020:
        return f"too few ticks: {during} (idle: {idle})"
    return None
