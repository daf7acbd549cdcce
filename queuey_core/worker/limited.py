"""A limited job through the dispatcher: ask the gate, then run it, or settle it as it
must wait.

A job type with limits (:mod:`queuey_core.flow`) comes here once its payload is decoded.
Admitted, it runs as any job does, and its slots are given back once it is settled (an
async job's at its settle on the loop's side). Not admitted, it is settled unrun, and no
attempt is spent: deferred at its own priority until its rate reservation is due, or
acked once it is parked (parked first, acked second: a crash in between parks it once,
as the park is keyed by job id). A store out of reach fails closed: deferred by
:data:`~queuey_core.flow.limit_gate.STORE_DOWN_DELAY`, never run outside its limit.

Owns: that choice of settle. Must never: run a job the gate did not admit, or leave a
delivery unsettled.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from queuey_core.errors import QueueyError
from queuey_core.flow.limit_gate import STORE_DOWN_DELAY, LimitGate
from queuey_core.flow.limit_spec import LimitSpec
from queuey_core.flow.limit_state import Verdict
from queuey_core.jobs import Job
from queuey_core.worker.tracked import Tracked

#: The dispatcher's settle: an operation of the delivery, its arguments, the log fields.
Settle = Callable[[Callable[..., None], tuple[Any, ...], dict[str, Any]], None]

logger = logging.getLogger(__name__)


def run_limited(
    gate: LimitGate,
    delivery: Tracked,
    limits: tuple[LimitSpec, ...],
    job: Job,
    fields: dict[str, Any],
    *,
    settle: Settle,
    run: Callable[[], None],
    gives_back: bool,
) -> None:
    """Run the limited job of ``delivery`` (``run``) if the gate admits it; else settle
    it as it waits (see the module docstring).

    Args:
        gives_back: give its slots back when ``run`` returns (False for an async
            job: ``run`` only hands it to the loop, and its settle gives them back).
    """
    env = delivery.inner.envelope
    try:
        answer = gate.ask(env, limits, job)
    except QueueyError as exc:  # fail closed: it waits, nothing is spent
        logger.warning("limits' store out of reach; the job waits: %s", exc, extra=fields)
        settle(delivery.defer, (env.deferred(env.priority), STORE_DOWN_DELAY), fields)
        return
    if answer.verdict is Verdict.WAIT:
        delay = max(0.001, (answer.until_ms - gate.clock.wall_ms()) / 1000)
        logger.debug("rate limited for %.3gs (%s)", delay, answer.limit, extra=fields)
        settle(delivery.defer, (env.deferred(env.priority), delay), fields)
        return
    if answer.verdict is Verdict.PARKED:
        logger.debug("parked behind concurrency limit %s", answer.limit, extra=fields)
        settle(delivery.ack, (), fields)
        gate.publish_let_go(answer.let_go)
        return
    try:
        run()
    finally:
        if gives_back:
            gate.release(fields["job_id"])
