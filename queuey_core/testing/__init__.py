"""The testing kit: run your handlers in your tests, on a manual clock, with no broker.

::

    def test_greet_retries(queuey: QueueyKit) -> None:      # the pytest fixture
        outcome = queuey.run(Flaky(failures=1))
        assert outcome.retried and outcome.delay
        queuey.advance(outcome.delay)
        assert queuey.run(queuey.enqueued(Flaky)[0]).succeeded

:class:`QueueyKit` holds a producer, a real :class:`~queuey_core.Worker` and a
:class:`~queuey_core.ManualClock` on the in-memory backend (or a SQLite file of its
own); jobs wait until the test runs them. The ``queuey`` fixture (the pytest plugin,
:mod:`queuey_core.pytest_plugin`, installed with queuey) gives one to each test. See
docs/testing-your-handlers.md.

Modules: :mod:`.kit` (the kit), :mod:`.gate` (the backends with a gate before the
worker), :mod:`.setup` (handlers, queues and settings from the kit's arguments),
:mod:`.build` (the backend, producer, limits, workflows and worker, opened together),
:mod:`.limits` (the worker's limits' gate, its heartbeat on the kit's clock),
:mod:`.workflows` (workflows with their store in the kit), :mod:`.outcomes`
(:class:`JobOutcome`, and how the worker's hooks tell it).
Must never: be imported by queuey itself outside tests (nothing in a worker needs it).
"""

from __future__ import annotations

from queuey_core.errors import KitError
from queuey_core.testing.kit import QueueyKit
from queuey_core.testing.outcomes import Enqueued, JobOutcome, Running, Status

__all__ = ["Enqueued", "JobOutcome", "KitError", "QueueyKit", "Running", "Status"]
