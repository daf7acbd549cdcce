"""Live workers: a control plane over the broker (``queuey workers``).

Every worker answers a broadcast channel while it runs: asked for its status, it replies
with what it is doing (:class:`WorkerStatus`); asked to shut down, it drains as on
SIGTERM. The backend moves the bytes (see ``SupportsControl`` in
:mod:`queuey_core.backends.base`); this package owns what they say:

* :mod:`.documents`: the requests, replies and status, as versioned JSON;
* :mod:`.responder`: the worker's side (outcome counts through its hooks, the answers);
* :mod:`.client`: the asking side (:func:`worker_statuses`, :func:`shutdown_workers`);
* :mod:`.signing`: requests signed with ``[control] secret`` (HMAC-SHA256, a minute's
  window, replays refused), so that publishing rights alone cannot drain the fleet.
"""

from __future__ import annotations

from queuey_core.control.client import DEFAULT_TIMEOUT, ask, shutdown_workers, worker_statuses
from queuey_core.control.documents import (
    MAX_DOCUMENT,
    VERSION,
    Command,
    ControlReply,
    ControlRequest,
    Selection,
    WorkerStatus,
)
from queuey_core.control.responder import ControlResponder, Identity, JobCounts

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_DOCUMENT",
    "VERSION",
    "Command",
    "ControlReply",
    "ControlRequest",
    "ControlResponder",
    "Identity",
    "JobCounts",
    "Selection",
    "WorkerStatus",
    "ask",
    "shutdown_workers",
    "worker_statuses",
]
