"""A RabbitMQ node of our own, to stop, restart and alarm without touching the shared one.

The shared broker on 5672 serves everyone on this machine: it is never stopped or
alarmed. Tests that need a broker to go away or to block publishers get ``prod1@localhost``
on the first free port of 5691-5694 (distribution: of 25691-25694), a node with its own
config, data and logs in a folder under /tmp owned by ``rabbitmq`` (the server drops to
that user). A port is checked free before the node starts, so a test never talks to
somebody else's node. See /work/shared/RABBITMQ.md, "More RabbitMQ nodes on one machine".

The node is stopped when the fixture ends, whatever happened in the tests; a node left
running by a killed test run is stopped before a new one starts.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest

NODE = "prod1@localhost"
AMQP_PORTS = range(5691, 5695)
DIST_PORTS = range(25691, 25695)
BASE = Path("/tmp/queuey-prod1")


def free_port(candidates: range) -> int:
    """The first of ``candidates`` nothing listens on (127.0.0.1)."""
    for port in candidates:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {candidates.start}-{candidates.stop - 1}")


class OwnNode:
    """One RabbitMQ node: start, stop, make the broker go away and come back, alarm it."""

    def __init__(self, base: Path = BASE) -> None:
        self.base = base
        self.port = 0
        self.url = ""  # known once started
        self._alarmed = False

    def ctl(self, *args: str, timeout: float = 60) -> str:
        """``rabbitmqctl -n prod1@localhost ...``; what it printed."""
        done = subprocess.run(
            ["rabbitmqctl", "-q", "-n", NODE, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
        return done.stdout

    def is_running(self) -> bool:
        try:
            self.ctl("status", timeout=20)
        except subprocess.SubprocessError:
            return False
        return True

    def start(self) -> None:
        """Start the node from an empty folder and wait until it takes connections."""
        if self.is_running():
            self.stop()
        self.port, dist = free_port(AMQP_PORTS), free_port(DIST_PORTS)
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        shutil.rmtree(self.base, ignore_errors=True)
        self.base.mkdir(parents=True)
        (self.base / "rabbitmq.conf").write_text(f"listeners.tcp.local = 127.0.0.1:{self.port}\n")
        (self.base / "enabled_plugins").write_text("[].\n")
        subprocess.run(["chown", "-R", "rabbitmq:rabbitmq", str(self.base)], check=True)
        env = {
            **os.environ,
            "RABBITMQ_NODENAME": NODE,
            "RABBITMQ_DIST_PORT": str(dist),
            "RABBITMQ_CONFIG_FILE": str(self.base / "rabbitmq.conf"),
            "RABBITMQ_MNESIA_BASE": str(self.base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.base / "log"),
            "RABBITMQ_PID_FILE": str(self.base / "pid"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.base / "enabled_plugins"),
        }
        subprocess.run(["rabbitmq-server", "-detached"], env=env, check=True, timeout=30)
        deadline = time.monotonic() + 90
        while not self.is_running():  # the node registers with epmd a few seconds in
            if time.monotonic() > deadline:
                raise RuntimeError(f"{NODE} did not start; see {self.base / 'log'}")
            time.sleep(0.5)
        self.ctl("await_startup", timeout=90)

    def stop(self) -> None:
        """Stop the node (and wait until its process has gone)."""
        self.ctl("stop", str(self.base / "pid"), timeout=90)

    def stop_app(self) -> None:
        """The broker goes away (connections drop, the port closes); the node stays."""
        self.ctl("stop_app")

    def start_app(self) -> None:
        """The broker comes back, with what it had stored (and without an alarm)."""
        self.ctl("start_app")
        self._alarmed = False
        self.ctl("await_startup")

    def alarm(self) -> None:
        """A memory alarm: the broker blocks every connection that publishes."""
        self.ctl("set_vm_memory_high_watermark", "0.0000001")
        self._alarmed = True

    def clear_alarm(self) -> None:
        self.ctl("set_vm_memory_high_watermark", "0.4")
        self._alarmed = False

    def connection_states(self) -> list[str]:
        """The state of each client connection (``running``, ``blocked``, ...)."""
        return self.ctl("list_connections", "state").split()

    def reset(self) -> None:
        """As a test expects to find it: running, no alarm, no queues but the ladder."""
        try:
            conn = pika.BlockingConnection(pika.URLParameters(self.url))
        except pika.exceptions.AMQPConnectionError:
            self.start_app()  # which also ends an alarm
            self._alarmed = False
            conn = pika.BlockingConnection(pika.URLParameters(self.url))
        try:
            if self._alarmed:
                self.clear_alarm()
            names = self.ctl("list_queues", "name", "--no-table-headers").split()
            ch = conn.channel()
            for name in names:
                if not name.startswith("queuey.delay."):  # the same for every test
                    ch.queue_delete(name)
        finally:
            conn.close()


@pytest.fixture(scope="module")
def own_node() -> Iterator[OwnNode]:
    """A node of our own for this test module; always stopped afterwards."""
    node = OwnNode()
    try:
        node.start()
        yield node
    finally:
        if node.is_running():
            node.stop()
