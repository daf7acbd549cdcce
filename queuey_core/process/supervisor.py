"""``queuey worker --processes N``: a supervisor that runs N worker processes.

Owns: starting each child (the same ``queuey worker`` command, re-executed with
``sys.executable -m queuey_cli`` rather than forked, so no child inherits a thread or a
lock of ours), restarting one that dies (with a capped exponential back-off), replacing
one that ran its ``max_jobs_per_child`` jobs (the replacement first, then the old one
drains), ending once every child found its queues empty (``--burst``), and stopping
them all: on the first SIGTERM or SIGINT it asks every child to drain, on a second one
to stop at once (130). It asks over each child's socket, not with a signal: a child
that systemd also signalled (``KillMode=control-group``) drains once, and only a second
signal to the supervisor, or to the child itself, stops it at once.

Must never: act on a signal inside its handler (the handler only records it; the loop
applies it to every child, including one started a moment later, so none is missed);
start a child from any thread but the main one (a child's parent-death signal fires when
the thread that forked it ends); or let a child outlive it (see
:mod:`queuey_core.process.supervised`). Children run in process groups of their own, so a
terminal's Ctrl-C reaches the supervisor alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import selectors
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

from queuey_core.process.children import (
    KILL_GRACE,
    STABLE_AFTER,
    STARTUP_ERRORS,
    Child,
    Slot,
    describe_exit,
    restart_delay,
)
from queuey_core.process.exits import Exit
from queuey_core.process.stops import STOP_SIGNALS, StopRequests
from queuey_core.process.supervised import CHILD_INDEX_ENV, SUPERVISOR_PID_ENV

if TYPE_CHECKING:
    from queuey_core.process.fleet_metrics import FleetServer
    from queuey_core.settings import Settings

logger = logging.getLogger("queuey.supervisor")


@dataclass
class Supervisor:
    """Runs ``settings.worker.processes`` children of ``command`` until told to stop.

    :meth:`run` returns the exit code: 0 when every child drained, 130 when a second
    signal (or a shutdown that overran) stopped them at once, and a child's own 1 or 2
    when children failed before any was ever ready (bad config, no broker).
    """

    command: list[str]
    settings: Settings
    #: The children run ``--burst``: one that exits 0 found its queues empty, and is
    #: not replaced; the supervisor exits 0 once every one has.
    burst: bool = False
    #: Where the signals are recorded, when the caller installed that (else the
    #: supervisor installs its own handler while :meth:`run` runs).
    stops: StopRequests | None = None
    slots: list[Slot] = field(default_factory=list)
    children: list[Child] = field(default_factory=list)
    recycles: int = 0
    _signals: list[str] = field(default_factory=list)
    _handled: int = 0
    _stopping: bool = False
    _forced: bool = False
    _ever_ready: bool = False
    _gave_up: int | None = None
    _kill_at: float = float("inf")
    _selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)

    def run(self) -> int:
        """Start the children, watch them, and return once all of them have ended."""
        w = self.settings.worker
        self.slots = [Slot(i) for i in range(w.processes)]
        server = self._serve_metrics(w.metrics_port)
        previous = {}
        if self.stops is None:
            previous = {s: signal.signal(s, self._on_signal) for s in STOP_SIGNALS}
        logger.info(
            "supervisor starting %d worker processes",
            w.processes,
            extra={"processes": w.processes, "max_jobs_per_child": w.max_jobs_per_child},
        )
        try:
            while True:
                self._apply_signals()
                if not self._stopping:
                    self._start_due()
                self._read(0.1)
                self._reap()
                if not self.children and all(s.retired for s in self.slots):
                    logger.info(
                        "every worker process ended and none is to be replaced (%s)",
                        "--burst, or queuey workers shutdown"
                        if self.burst
                        else "stopped by queuey workers shutdown",
                    )
                    break
                if self._stopping:
                    if not self.children:
                        break
                    if time.monotonic() > self._kill_at:
                        self._kill_all()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            if server is not None:
                server.close()
            self._selector.close()
        restarts = sum(s.restarts for s in self.slots)
        logger.info(
            "supervisor exited",
            extra={"restarts": restarts, "recycles": self.recycles, "forced": self._forced},
        )
        if self._gave_up is not None:
            return self._gave_up
        return Exit.FORCED if self._forced else Exit.OK

    # -- what the loop reads from the outside ----------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Counted only: the loop applies it (a handler may run in the middle of a spawn).
        self._signals.append(signal.Signals(signum).name)

    def _apply_signals(self) -> None:
        if self.stops is not None:
            self._signals.extend(self.stops.take())
        while self._handled < len(self._signals):
            name = self._signals[self._handled]
            self._handled += 1
            if not self._stopping:
                self._stopping = True
                timeout = self.settings.worker.shutdown_timeout
                self._kill_at = time.monotonic() + timeout + KILL_GRACE
                if not name.startswith("SIG"):  # we gave up, and said why
                    continue
                logger.warning(
                    "%s: draining %d worker processes (up to %gs); send it again to stop "
                    "them at once",
                    name,
                    len(self.children),
                    timeout,
                )
            elif not self._forced:
                self._forced = True
                self._kill_at = time.monotonic() + KILL_GRACE
                logger.error("second %s: stopping every worker process at once", name)
        if self._stopping:
            wanted = 2 if self._forced else 1
            for child in self.children:
                if child.asked < wanted:
                    self._ask(child, wanted)

    def _read(self, timeout: float) -> None:
        for key, _ in self._selector.select(timeout):
            self._receive(key.data)

    def _receive(self, child: Child) -> bool:
        """Handle what ``child`` sent; False once it has closed its end (unregistered)."""
        try:
            data = child.sock.recv(65536)
        except OSError:
            data = b""
        if not data:  # the child ended (or closed its end): _reap will see it
            self._selector.unregister(child.sock)
            return False
        child.buffer += data
        self._lines(child)
        return True

    def _drain(self, child: Child) -> None:
        """Handle everything an ended child sent before it ended: its exit can be seen
        before its last words are read (a "stop" taken for a crash restarted it)."""
        while self._registered(child) and select.select([child.sock], [], [], 0)[0]:
            self._receive(child)

    def _lines(self, child: Child) -> None:
        *lines, child.buffer = child.buffer.split(b"\n")
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                logger.warning(
                    "worker process %d (pid %d) sent a line that is not JSON",
                    child.index,
                    child.pid,
                )
                continue
            if isinstance(message, dict):
                self._on_message(child, message)

    def _on_message(self, child: Child, message: dict[str, Any]) -> None:
        event = message.get("event")
        slot = self.slots[child.index]
        if event == "ready":
            child.ready = True
            self._ever_ready = True
            logger.info(
                "worker process %d (pid %d) is consuming",
                child.index,
                child.pid,
                extra={"child": child.index, "child_pid": child.pid},
            )
            if slot.current is child:
                for old in self.children:
                    if old.index == child.index and old.retiring and old.asked == 0:
                        logger.info(
                            "worker process %d: pid %d replaces pid %d, which now drains",
                            child.index,
                            child.pid,
                            old.pid,
                        )
                        self._ask(old, 1)
        elif event == "draining":
            child.draining = True
        elif event == "stop" and slot.current is child:
            slot.retired = True
            slot.restart_at = None
        elif event == "metrics" and isinstance(message.get("port"), int):
            child.metrics_port = message["port"]
        elif event == "recycle" and slot.current is child and not self._stopping:
            child.retiring = True
            self.recycles += 1
            logger.info(
                "worker process %d (pid %d) ran %s jobs: starting its replacement",
                child.index,
                child.pid,
                message.get("jobs", "its"),
            )
            slot.current = None
            self._start(slot)

    # -- children ----------------------------------------------------------------------

    def _start_due(self) -> None:
        now = time.monotonic()
        for slot in self.slots:
            if slot.current is None and slot.restart_at is not None and now >= slot.restart_at:
                self._start(slot)

    def _start(self, slot: Slot) -> None:
        ours, theirs = socket.socketpair()
        env = {
            **os.environ,
            SUPERVISOR_PID_ENV: str(os.getpid()),
            CHILD_INDEX_ENV: str(slot.index),
        }
        try:
            proc = subprocess.Popen(
                [*self.command, "--supervised-fd", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                env=env,
                process_group=0,  # a terminal's Ctrl-C is ours to forward, once
            )
        except OSError as exc:
            ours.close()
            self._failed(slot, f"could not be started: {exc.strerror or exc}")
            return
        finally:
            theirs.close()
        child = Child(slot.index, proc, ours, time.monotonic())
        slot.current = child
        slot.restart_at = None
        self.children.append(child)
        self._selector.register(ours, selectors.EVENT_READ, child)
        logger.info(
            "worker process %d started (pid %d)",
            slot.index,
            proc.pid,
            extra={"child": slot.index, "child_pid": proc.pid},
        )

    def _reap(self) -> None:
        for child in list(self.children):
            code = child.proc.poll()
            if code is None:
                continue
            self.children.remove(child)
            if self._registered(child):
                self._drain(child)
            if self._registered(child):
                self._selector.unregister(child.sock)
            child.sock.close()
            how = describe_exit(code)
            fields = {"child": child.index, "child_pid": child.pid, "returncode": code}
            slot = self.slots[child.index]
            if self._stopping:
                if code == Exit.FORCED:
                    self._forced = True
                log = logger.info if code == 0 else logger.warning
                log("worker process %d (pid %d) %s", child.index, child.pid, how, extra=fields)
            elif child.retiring:
                log = logger.info if code == 0 else logger.warning
                log(
                    "worker process %d (pid %d), replaced, %s",
                    child.index,
                    child.pid,
                    how,
                    extra=fields,
                )
            elif slot.current is child and slot.retired:
                slot.current = None
                log = logger.info if code == 0 else logger.warning
                log(
                    "worker process %d (pid %d), stopped by queuey workers shutdown, %s; "
                    "it is not replaced",
                    child.index,
                    child.pid,
                    how,
                    extra=fields,
                )
            elif slot.current is child and self.burst and code == Exit.OK:
                # --burst: its queues were empty; the others finish theirs.
                slot.current = None
                slot.retired = True
                slot.restart_at = None
                logger.info(
                    "worker process %d (pid %d) found its queues empty and exited (--burst); "
                    "it is not replaced",
                    child.index,
                    child.pid,
                    extra=fields,
                )
            elif slot.current is child and not self._ever_ready and code in STARTUP_ERRORS:
                # Bad config or an unreachable broker: every restart would fail the same way.
                logger.error(
                    "worker process %d (pid %d) %s before any was ready: stopping them all",
                    child.index,
                    child.pid,
                    how,
                    extra=fields,
                )
                self._gave_up = code
                self._signals.append("gave up")
            elif slot.current is child:
                slot.current = None
                if time.monotonic() - child.started >= STABLE_AFTER:
                    slot.failures = 0
                self._failed(slot, how, child.pid, fields)

    def _registered(self, child: Child) -> bool:
        try:
            self._selector.get_key(child.sock)
        except (KeyError, ValueError):
            return False
        return True

    def _failed(
        self, slot: Slot, how: str, pid: int | None = None, fields: dict[str, Any] | None = None
    ) -> None:
        slot.failures += 1
        slot.restarts += 1
        delay = restart_delay(slot.failures)
        slot.restart_at = time.monotonic() + delay
        who = f"worker process {slot.index}" + (f" (pid {pid})" if pid is not None else "")
        logger.error("%s %s; restarting it in %gs", who, how, delay, extra=fields or {})

    def _ask(self, child: Child, level: int) -> None:
        """Ask ``child`` to drain (1) or to stop at once (2), over its socket: a request,
        not a signal, so that one the child also got from elsewhere (systemd signals
        every process of a unit) is not counted twice."""
        child.asked = level
        line = json.dumps({"event": "drain" if level == 1 else "stop"}) + "\n"
        with contextlib.suppress(OSError):
            child.sock.sendall(line.encode())

    def _kill_all(self) -> None:
        self._forced = True
        self._kill_at = float("inf")
        for child in self.children:
            logger.error(
                "worker process %d (pid %d) did not stop in time: killing it",
                child.index,
                child.pid,
            )
            child.proc.kill()

    def _serve_metrics(self, port: int | None) -> FleetServer | None:
        if port is None:
            return None
        from queuey_core.process.fleet_metrics import FleetServer  # noqa: PLC0415

        return FleetServer(self, port=port).start()
