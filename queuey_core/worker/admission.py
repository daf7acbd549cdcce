"""Whether a job may run on the queue it came from: the checks an envelope cannot make.

An envelope's own rules are checked when it is read (:mod:`queuey_core.envelope`); these
need the queue's configuration, so the dispatcher makes them once it has found the job
type's handler, before the payload is decoded. A job that fails one is dead-lettered
unrun with the reason returned here: anyone who can publish to a queue can put anything
in it, and a producer written in another language has no ``Producer`` to stop it.

Owns: the rules (docs/protocol.md lists them, with these reasons). Must never: look at
the payload, or let a job type run with the policy, timeout or priorities of a queue
other than the one that delivered it.
"""

from __future__ import annotations

from queuey_core.envelope import Envelope
from queuey_core.queues import QueueConfig


def refusal(envelope: Envelope, delivered_from: str, bound: QueueConfig) -> str | None:
    """Why the job of ``envelope``, delivered from ``delivered_from``, must not run; None
    if it may.

    Args:
        envelope: the job's envelope (its ``queue`` already matched ``delivered_from``).
        delivered_from: the queue the delivery came from.
        bound: the queue the envelope's job type is bound to (``Job.QUEUE``).
    """
    if bound.name != delivered_from:
        # Run here, it would take the other queue's retry policy, timeout and priorities,
        # and its retries would stay here: refused, with both names so it can be moved.
        return (
            f"job type {envelope.job_type!r} is bound to queue {bound.name!r}, "
            f"not {delivered_from!r} (the queue it was delivered from)"
        )
    if envelope.priority > bound.top_priority:
        # The broker would order it as the top priority, but the job would see and pass on
        # a priority its queue cannot have; the producer refuses the same, so a foreign
        # producer learns of its mistake here rather than never.
        if bound.max_priority is None:
            return (
                f"envelope priority {envelope.priority} on queue {bound.name!r}, "
                "which has no priorities (send 0)"
            )
        return (
            f"envelope priority {envelope.priority} is above the max_priority of queue "
            f"{bound.name!r} ({bound.max_priority})"
        )
    return None
