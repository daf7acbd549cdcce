"""The seam between the scheduler and whatever elects the one scheduler that fires.

Several schedulers may run at once, for availability; exactly one of them is the
leader at a time, and only the leader fires. On RabbitMQ the election is
:class:`queuey_core.backends.rabbitmq.election.RabbitElection`; in tests it is
:class:`queuey_core.schedules.memory.MemoryElection`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from queuey_core.errors import QueueyError


class Election(Protocol):
    """One candidate's view of the election."""

    def start(self, on_change: Callable[[], None]) -> None:
        """Stand as a candidate. ``on_change`` is called (from any thread, quickly) whenever
        leadership may have changed, and when the election fails for good.

        Raises:
            BackendError: the broker cannot be reached.
        """

    def is_leader(self) -> bool:
        """Whether this candidate is the leader, as far as it last heard."""

    def confirm(self) -> bool:
        """Whether it is still the leader *now*: a round trip to whatever elects it.

        Called before firing, so that a scheduler that was frozen while another took
        over finds out before it fires.
        """

    @property
    def error(self) -> QueueyError | None:
        """Set when the election failed for good (the broker stayed away too long)."""

    def close(self) -> None:
        """Step down and leave: another candidate takes over at once."""
