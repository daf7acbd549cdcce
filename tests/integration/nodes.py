"""Extra RabbitMQ nodes on this machine, for tests that stop, kill or alarm a broker.

The broker on 5672 is shared: no test may stop it. A :class:`Node` is a broker of the
test's own, on its own ports and folders, that it can stop, kill with SIGKILL, restart,
alarm and disconnect at will (the recipe is the last section of RABBITMQ.md):

- a config file of its own (the system one pins ``listeners.tcp.local`` to 5672), with
  an optional TLS listener;
- ``RABBITMQ_NODENAME``, ``RABBITMQ_DIST_PORT`` and every folder (``MNESIA_BASE``,
  ``LOG_BASE``, the pid file, the enabled-plugins file) in one folder owned by the
  ``rabbitmq`` user, since the server drops to that user;
- started with ``rabbitmq-server -detached``, ready once ``rabbitmqctl await_startup``
  answers and the AMQP port accepts; stopped with ``rabbitmqctl stop``, never by
  process name.

A node costs ~130 MB and ~10 s to start on 2 cores: tests share one through the
session fixture in ``conftest.py``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from typing import Any

#: The user the server runs as; it must own every file the node writes.
RABBITMQ_USER = "rabbitmq"


class NodeError(RuntimeError):
    """A node did not do what it was told (start, stop, a rabbitmqctl command)."""


@dataclass(frozen=True)
class ServerTLS:
    """A TLS listener: the broker's certificate, and the CA its clients must come from."""

    port: int
    ca: Path
    cert: Path
    key: Path
    require_client_cert: bool = True


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections on ``port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _wait(cond: Callable[[], bool], what: str, timeout: float, step: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise NodeError(f"{what} (waited {timeout:g}s)")
        time.sleep(step)


class Node:
    """One RabbitMQ node: ``qn1@localhost`` on ``amqp_port``, its files under ``folder``.

    Args:
        short_name: the node name before ``@localhost`` (``qn1``).
        amqp_port: the plain AMQP listener, on 127.0.0.1.
        dist_port: Erlang distribution (what rabbitmqctl talks to).
        tls: a TLS listener beside the plain one, if given.
        advanced: an ``advanced.config`` (Erlang terms) for settings ``rabbitmq.conf``
            cannot take, if given.
    """

    def __init__(
        self,
        short_name: str,
        *,
        amqp_port: int,
        dist_port: int,
        tls: ServerTLS | None = None,
        advanced: str | None = None,
    ) -> None:
        self.name = f"{short_name}@localhost"
        self.short_name = short_name
        self.amqp_port = amqp_port
        self.dist_port = dist_port
        self.tls = tls
        self.advanced = advanced
        self.folder = Path(tempfile.mkdtemp(prefix=f"queuey-{short_name}-"))
        self.pid_file = self.folder / "pid"
        self.log_file = self.folder / "log" / f"{self.name}.log"
        self._claim: IO[str] | None = None

    # -- what clients see --------------------------------------------------------------

    def url(self, vhost: str = "%2F", *, tls: bool = False) -> str:
        """``amqp://guest:guest@127.0.0.1:PORT/vhost`` (``amqps://localhost:TLS_PORT`` with
        ``tls``: the name its certificate is for)."""
        if tls:
            assert self.tls is not None, "this node has no TLS listener"
            return f"amqps://guest:guest@localhost:{self.tls.port}/{vhost}"
        return f"amqp://guest:guest@127.0.0.1:{self.amqp_port}/{vhost}"

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> float:
        """Start the node (first time, or again after :meth:`stop` or :meth:`kill`) and wait
        until it serves AMQP. Returns how long it took.

        Raises:
            NodeError: it did not come up; the message ends with its log's last lines.
        """
        began = time.monotonic()
        self._take_the_name()
        env = {
            **os.environ,
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.folder / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.folder / "log"),
            "RABBITMQ_PID_FILE": str(self.pid_file),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.folder / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(self.folder / "rabbitmq.conf"),
        }
        if self.advanced is not None:
            env["RABBITMQ_ADVANCED_CONFIG_FILE"] = str(self.folder / "advanced.config")
        env.pop("RABBITMQ_NODE_PORT", None)
        try:
            self._clear_leftover()
            self._write_files()  # chown needs root
            subprocess.run(
                ["rabbitmq-server", "-detached"],
                env=env,
                check=True,
                capture_output=True,
                timeout=60,
                cwd=self.folder,
            )
            self._await_startup(began + timeout)
            _wait(lambda: port_open(self.amqp_port), "the AMQP port never opened", 30)
            if self.tls is not None:
                tls_port = self.tls.port
                _wait(lambda: port_open(tls_port), "the TLS port never opened", 30)
        except (NodeError, subprocess.SubprocessError, OSError) as exc:
            # A VM still booting would go on writing into a folder about to be removed.
            with contextlib.suppress(NodeError):
                self.ctl("stop", timeout=30)
            raise NodeError(f"node {self.name} did not start: {exc}\n{self.log_tail()}") from exc
        self._record_pid()
        return time.monotonic() - began

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the node (``rabbitmqctl stop``); kill it if that fails. Safe when it is down,
        and a no-op when this object never took the name (another session has it)."""
        if self._claim is None:
            return
        try:
            self.ctl("stop", timeout=timeout)
        except NodeError:
            if self.pid_file.is_file() and _alive(self.pid()):
                self.kill()
        self._wait_ports_closed(timeout)

    def kill(self) -> None:
        """``kill -9`` the node's Erlang VM (its pid from the pid file), and wait until it is
        gone: nothing is flushed, as in a crash."""
        pid = self.pid()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait(lambda: not _alive(pid), f"pid {pid} survived SIGKILL", 30)
        self._wait_ports_closed(30)

    def restart(self, timeout: float = 90.0) -> float:
        """Start the node again after a stop or a kill, keeping its data."""
        return self.start(timeout)

    def reset(self) -> float:
        """Wipe every queue, exchange and message (``rabbitmqctl reset``); returns how long.

        For tests that kill the node: on RabbitMQ 3.10, a quorum queue deleted and declared
        again under the same name across a ``kill -9`` could come back without its Raft
        member (``basic.consume`` then crashes the channel with ``noproc``).
        """
        began = time.monotonic()
        self.ctl("stop_app")
        self.ctl("reset", timeout=90)
        self.start_app()
        return time.monotonic() - began

    def stop_app(self) -> None:
        """Stop the RabbitMQ application (clients are cut off; the VM stays up)."""
        self.ctl("stop_app")
        self._wait_ports_closed(30)

    def start_app(self) -> float:
        """Start the application again; returns once AMQP is served. Returns how long."""
        began = time.monotonic()
        self.ctl("start_app", timeout=90)
        self.ctl("await_startup", timeout=90)
        _wait(lambda: port_open(self.amqp_port), "the AMQP port never reopened", 30)
        return time.monotonic() - began

    def memory_alarm(self, on: bool) -> None:
        """Raise (``on``) or clear the memory alarm: while it is up, RabbitMQ blocks every
        publishing connection."""
        self.ctl("set_vm_memory_high_watermark", "0" if on else "0.4")

    def alarms(self) -> str:
        """What ``rabbitmq-diagnostics alarms`` says."""
        done = self._run(["rabbitmq-diagnostics", "-n", self.name, "alarms"], 60)
        return done.stdout

    def close_all_connections(self, why: str = "queuey fault test") -> None:
        """Close every client connection to this node, in every virtual host."""
        self.ctl("close_all_connections", "--global", why)

    def add_vhost(self, vhost: str) -> None:
        """A virtual host that ``guest`` may use fully."""
        self.ctl("add_vhost", vhost)
        self.ctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        """``rabbitmqctl -n NODE args...``; what it printed.

        Raises:
            NodeError: it failed or timed out.
        """
        return self._run(["rabbitmqctl", "-n", self.name, *args], timeout).stdout

    # -- state -------------------------------------------------------------------------

    def is_running(self) -> bool:
        """Whether the node's VM answers (the application may be stopped)."""
        try:
            self._run(["rabbitmqctl", "-n", self.name, "ping"], 20)
        except NodeError:
            return False
        return True

    def is_serving(self) -> bool:
        """Whether the application runs and AMQP accepts connections."""
        return port_open(self.amqp_port) and self.is_running()

    def pid(self) -> int:
        """The OS pid of the node's Erlang VM, from its pid file."""
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError) as exc:
            raise NodeError(f"no pid file for {self.name}: {exc}") from exc

    def quorum_status(self, queue: str, vhost: str = "/") -> list[dict[str, Any]]:
        """``rabbitmq-queues quorum_status``: one row per Raft member of ``queue`` (its node,
        ``Raft State``, indexes, term), as this node sees them.

        Raises:
            NodeError: it failed or timed out (the queue has no member this node can ask).
        """
        argv = ["rabbitmq-queues", "-n", self.name, "quorum_status", queue, "-p", vhost]
        rows: list[dict[str, Any]] = json.loads(
            self._run([*argv, "-q", "--formatter", "json"], 30).stdout
        )
        return rows

    def flush_quorum_directory(self) -> None:
        """Make the node write its quorum-queue directory (queue name to Raft member) to disk.

        RabbitMQ 3.10 (Ra 2.2) keeps a new entry of that directory (a ``dets`` table) in a
        write cache for a few seconds. A ``kill -9`` in that window brings the queue back
        as a new, empty Raft member that never elects a leader: ``basic.consume`` on it
        times out in the broker, and the messages the old member held are out of reach.
        A test that kills the node moments after declaring its queues calls this first.
        """
        self.ctl("eval", "dets:sync(ra_directory_reverse).", timeout=30)

    def log_tail(self, lines: int = 25) -> str:
        """The last lines of the node's log, for error messages."""
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return f"(no log at {self.log_file})"
        return "\n".join(text.splitlines()[-lines:])

    def remove(self) -> None:
        """Delete the node's folder (once it is stopped), and give its name back."""
        shutil.rmtree(self.folder, ignore_errors=True)
        if self._claim is not None:
            self._claim.close()  # releases the lock
            self._claim = None

    # -- internals ---------------------------------------------------------------------

    def _run(self, cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        for attempt in range(1, 6):
            done = _run_tree(cmd, timeout)
            if done.returncode == 0:
                return done
            text = done.stderr.strip() or done.stdout.strip()
            # The CLI is a small Erlang node of its own; it cannot start while its
            # distribution port is taken (another CLI): a moment later it can.
            if "nodistribution" not in text or attempt == 5:
                last = text.splitlines()[:1]
                raise NodeError(f"{' '.join(cmd)}: exit {done.returncode}: {' '.join(last)}")
            time.sleep(0.5 * attempt)
        raise AssertionError("unreachable")

    def _await_startup(self, deadline: float) -> None:
        # await_startup fails at once while the VM is not registered yet: ask again.
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NodeError("rabbitmqctl await_startup never succeeded")
            try:
                self.ctl("await_startup", "--timeout", str(max(1, int(left))), timeout=left + 5)
                return
            except NodeError:
                if time.monotonic() + 0.5 > deadline:
                    raise
                time.sleep(0.5)

    def _record_pid(self) -> None:
        # RabbitMQ 3.10 started with -detached leaves the pid file unwritten: ask the VM
        # and write it, so that kill() reads it like any other pid file.
        if not self.pid_file.is_file() or not self.pid_file.read_text().strip():
            pid = self.ctl("eval", "os:getpid().").strip().strip('"')
            self.pid_file.write_text(f"{int(pid)}\n")

    def _take_the_name(self) -> None:
        # Two test sessions must not share a node: the second would stop the first's as
        # a leftover. A lock per name, held until remove(), keeps the second out.
        if self._claim is not None:
            return
        lock = Path(tempfile.gettempdir(), f"queuey-node-{self.short_name}.lock")
        claim = lock.open("a+")  # held until remove()
        try:
            fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            claim.close()
            raise NodeError(f"node {self.name} is in use by another test session") from None
        self._claim = claim

    def _clear_leftover(self) -> None:
        # A node of this name left by a killed test session would hold the ports.
        if self.is_running():
            with contextlib.suppress(NodeError):
                self.ctl("stop")
        with contextlib.suppress(OSError):
            self.pid_file.unlink()

    def _wait_ports_closed(self, timeout: float) -> None:
        _wait(lambda: not port_open(self.amqp_port, timeout=0.3), "AMQP port still open", timeout)

    def _write_files(self) -> None:
        for sub in ("mnesia", "log"):
            (self.folder / sub).mkdir(exist_ok=True)
        lines = [f"listeners.tcp.local = 127.0.0.1:{self.amqp_port}"]
        if self.tls is not None:
            certs = self.folder / "tls"
            certs.mkdir(exist_ok=True)
            for name, source in (
                ("ca.pem", self.tls.ca),
                ("server.pem", self.tls.cert),
                ("server.key", self.tls.key),
            ):
                shutil.copyfile(source, certs / name)
            lines += [
                f"listeners.ssl.default = 127.0.0.1:{self.tls.port}",
                f"ssl_options.cacertfile = {certs / 'ca.pem'}",
                f"ssl_options.certfile = {certs / 'server.pem'}",
                f"ssl_options.keyfile = {certs / 'server.key'}",
                "ssl_options.verify = verify_peer",
                f"ssl_options.fail_if_no_peer_cert = {str(self.tls.require_client_cert).lower()}",
            ]
        (self.folder / "rabbitmq.conf").write_text("\n".join(lines) + "\n")
        (self.folder / "enabled_plugins").write_text("[].\n")
        if self.advanced is not None:
            (self.folder / "advanced.config").write_text(self.advanced)
        shutil.chown(self.folder, RABBITMQ_USER, RABBITMQ_USER)
        for path in self.folder.rglob("*"):
            shutil.chown(path, RABBITMQ_USER, RABBITMQ_USER)


#: The ports our CLI tools' own Erlang nodes listen on. By default every rabbitmqctl on
#: the machine shares 35672-35682; a few hung ones (anyone's) use them up and the next
#: rabbitmqctl fails with ``nodistribution``.
CLI_DIST_PORTS = (35683, 35689)


def _run_tree(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a RabbitMQ CLI tool; on timeout kill it with everything it started (the
    wrapper runs the Erlang VM under ``su`` in a session of its own, which would
    otherwise outlive us holding a CLI port)."""
    env = {
        **os.environ,
        "RABBITMQ_CTL_DIST_PORT_MIN": str(CLI_DIST_PORTS[0]),
        "RABBITMQ_CTL_DIST_PORT_MAX": str(CLI_DIST_PORTS[1]),
    }
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for pid in [*_descendants(proc.pid), proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.communicate()
        raise NodeError(f"{' '.join(cmd)}: no answer within {timeout:g}s") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _descendants(root: int) -> list[int]:
    """Every live process under ``root``, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers signal 0; its /proc state says it is dead.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (OSError, IndexError):
        return False
