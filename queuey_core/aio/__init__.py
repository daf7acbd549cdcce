"""queuey for asyncio code: the producer a web app awaits (:class:`AsyncProducer`), and
the awaitable cancellation flag of async jobs (:mod:`.cancel`)."""

from __future__ import annotations

from queuey_core.aio.producer import AsyncProducer

__all__ = ["AsyncProducer"]
