"""Asking live workers over the control channel: their status, or to shut down.

What ``queuey workers`` runs; any program with a backend can do the same. A request goes
to every worker at once; the chosen ones reply within the window, the others stay
silent, so no reply is an answer too ("no worker chosen is alive"), not an error.

Owns: building the request and reading the replies. Must never: trust a reply (one
that does not parse, or answers another command, is skipped and logged), or send a
shutdown that chooses no worker without saying so (``Selection(all=True)``).
"""

from __future__ import annotations

import logging
import time

from queuey_core.backends.capabilities import SupportsControl, require
from queuey_core.control.documents import (
    VERSION,
    Command,
    ControlReply,
    ControlRequest,
    Selection,
    WorkerStatus,
)
from queuey_core.control.signing import sign
from queuey_core.errors import DecodeError
from queuey_core.limits import CONTROL_REPLY_WINDOW

logger = logging.getLogger(__name__)

#: Seconds to gather replies: a live worker answers within milliseconds.
DEFAULT_TIMEOUT = CONTROL_REPLY_WINDOW


def ask(
    backend: object,
    command: Command,
    select: Selection,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    secret: str | bytes | None = None,
) -> list[ControlReply]:
    """Broadcast ``command`` to the workers ``select`` chooses; their replies, sorted by
    host, pid and id.

    With ``secret`` (``[control] secret``), the request is signed, as workers given the
    same secret require (:mod:`queuey_core.control.signing`).

    Raises:
        MissingCapabilityError: the backend has no control channel.
        BackendError: the broker could not be reached.
        ValueError: a shutdown that chooses no worker and does not say ``all=True``.
    """
    control = require(
        backend,
        SupportsControl,
        "`queuey workers shutdown`" if command is Command.SHUTDOWN else "`queuey workers`",
    )
    if command is Command.SHUTDOWN and select.is_everyone and not select.all:
        raise ValueError("a shutdown must choose workers, or say all=True")
    body = ControlRequest(v=VERSION, command=command, select=select).encode()
    if secret is not None:
        body = sign(body, secret, now_ms=int(time.time() * 1000))
    replies: list[ControlReply] = []
    for raw in control.broadcast_control(body, timeout=timeout):
        try:
            reply = ControlReply.decode(raw)
        except DecodeError as exc:
            logger.warning("a control reply was skipped: %s", exc)
            continue
        if reply.command is command:
            replies.append(reply)
    return sorted(replies, key=lambda r: (r.worker.host, r.worker.pid, r.worker.id))


def worker_statuses(
    backend: object,
    select: Selection | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    secret: str | bytes | None = None,
) -> list[WorkerStatus]:
    """The status of every live worker (or those ``select`` chooses) that answered
    within ``timeout`` seconds (requests signed with ``secret`` when given)."""
    replies = ask(backend, Command.STATUS, select or Selection(), timeout=timeout, secret=secret)
    return [r.worker for r in replies]


def shutdown_workers(
    backend: object,
    select: Selection,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    secret: str | bytes | None = None,
) -> list[WorkerStatus]:
    """Ask the workers ``select`` chooses to drain as on SIGTERM; those that accepted
    (requests signed with ``secret`` when given).

    Raises:
        ValueError: ``select`` chooses no worker and does not say ``all=True``, or the
            secret is too short.
    """
    replies = ask(backend, Command.SHUTDOWN, select, timeout=timeout, secret=secret)
    return [r.worker for r in replies if r.accepted]
