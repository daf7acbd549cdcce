"""The supervisor's bookkeeping: each worker process it runs (:class:`Child`), the N
places they run in (:class:`Slot`), and the pure rules it follows (restart back-off, how
an exit is described)."""

from __future__ import annotations

import signal
import socket
import subprocess
from dataclasses import dataclass

from queuey_core.process.exits import Exit

#: Restart back-off: the first restart after this long, doubling up to the cap.
RESTART_INITIAL = 0.5
RESTART_MAX = 30.0
#: A child that lived this long before it died starts the back-off afresh.
STABLE_AFTER = 30.0
#: A child's exit codes that mean "this will not work" when no child was ever ready.
STARTUP_ERRORS = (Exit.FAILURE, Exit.USAGE)
#: After the children's own shutdown timeout, how long before they are killed.
KILL_GRACE = 10.0


def restart_delay(failures: int) -> float:
    """Seconds to wait before the ``failures``-th restart in a row of one child."""
    if failures <= 0:
        return 0.0
    return float(min(RESTART_MAX, RESTART_INITIAL * 2 ** min(failures - 1, 32)))


def describe_exit(returncode: int) -> str:
    """``exited with status 3`` or ``killed by SIGKILL``, from a Popen return code."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exited with status {returncode}"


@dataclass(eq=False)
class Child:
    """One worker process and what it has told us."""

    index: int
    proc: subprocess.Popen[bytes]
    sock: socket.socket
    started: float
    buffer: bytes = b""
    ready: bool = False
    draining: bool = False
    retiring: bool = False
    #: What the supervisor asked of it so far: 0 nothing, 1 drain, 2 stop at once.
    asked: int = 0
    metrics_port: int | None = None

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.proc.pid


@dataclass
class Slot:
    """One of the N places a child runs in; it keeps its index across restarts."""

    index: int
    current: Child | None = None
    failures: int = 0
    restart_at: float | None = 0.0
    restarts: int = 0
    #: Its child was stopped through ``queuey workers shutdown``, or (``--burst``) found
    #: its queues empty and exited 0: it is not replaced.
    retired: bool = False
