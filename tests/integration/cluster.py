"""A three-node RabbitMQ cluster on this machine, for the tests that stop a node under load.

Three :class:`~tests.integration.nodes.Node` objects (``qc1``, ``qc2``, ``qc3`` on AMQP
5711-5713, distribution 25711-25713), each with its own config and data folder under a
temp dir, started side by side and joined to ``qc1`` with ``rabbitmqctl join_cluster``
(they share the ``rabbitmq`` user's Erlang cookie). :meth:`Cluster.start` is all or
nothing: a node that fails to start or join stops the others; :meth:`Cluster.stop`
stops every node and removes every folder, whatever state they are in.

Which node a client is on is read from ``rabbitmqctl list_connections client_properties``:
queuey names each connection ``queuey <role> host=<host> pid=<pid> v=<version>``.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable

from tests.integration.nodes import Node
from tests.integration.nodes import NodeError
from tests.integration.nodes import port_open

#: (short name, AMQP port, distribution port) of each node: this task's own.
NODES = (("qc1", 5711, 25711), ("qc2", 5712, 25712), ("qc3", 5713, 25713))

#: A quorum queue dead-letters at least once through a worker on its leader's node; a
#: hop whose target's leader was on a node that stopped is sent again only after this
#: timeout (RabbitMQ's default: 180 s). The delay ladder is such hops: 5 s keeps a job
#: held in it when a node stops from arriving minutes late (docs/scaling.md).
ADVANCED = "[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 5000}]}].\n"


class Cluster:
    """Three RabbitMQ nodes joined in one cluster."""

    def __init__(self) -> None:
        self.nodes = [
            Node(name, amqp_port=amqp, dist_port=dist, advanced=ADVANCED)
            for name, amqp, dist in NODES
        ]
        #: What the last :meth:`node_of` read, for a failure's message.
        self.last_listing = ""

    @property
    def seed(self) -> Node:
        """The node the others joined."""
        return self.nodes[0]

    def urls(self, vhost: str = "%2F") -> list[str]:
        """One AMQP URL per node."""
        return [n.url(vhost) for n in self.nodes]

    def start(self) -> float:
        """Start the three nodes at once, join the second and third to the first, and wait
        until each serves AMQP. Returns how long it took.

        Raises:
            NodeError: a node did not start or join (every node is stopped again).
        """
        began = time.monotonic()
        try:
            _in_parallel([lambda n=n: n.start() for n in self.nodes])  # type: ignore[misc]
            for node in self.nodes[1:]:
                node.ctl("stop_app")
                node.ctl("join_cluster", self.seed.name, timeout=90)
                node.start_app()
            timeout = self.seed.ctl(
                "eval", "application:get_env(rabbit, dead_letter_worker_publisher_confirm_timeout)."
            )
            if "5000" not in timeout:
                raise NodeError(f"advanced.config was not applied: {timeout.strip()}")
            members = self.running_members()
            if sorted(members) != sorted(n.name for n in self.nodes):
                raise NodeError(f"the cluster has {members}, not the three nodes")
        except BaseException:
            self.stop()
            raise
        return time.monotonic() - began

    def stop(self) -> None:
        """Stop every node (the seed last) and remove their folders; never raises NodeError."""
        for node in reversed(self.nodes):
            with contextlib.suppress(NodeError):
                node.stop()
            node.remove()

    def running_members(self) -> list[str]:
        """The running nodes of the cluster, as a serving member sees them."""
        serving = next((n for n in self.nodes if n.is_serving()), None)
        if serving is None:
            return []
        out = serving.ctl("eval", "rabbit_nodes:all_running().")
        return [part.strip(" []'\n") for part in out.split(",") if "@" in part]

    def node_of(self, pid: int, role: str) -> Node | None:
        """The node on which process ``pid`` has its ``role`` connection open, if any."""
        # The name a client gives its connection is in its client properties
        # ({"connection_name","queuey consumer ..."}); the "name" column ends with the
        # node's own address (-> 127.0.0.1:5711). A member usually lists the whole
        # cluster's connections, but with a node just stopped one listed only its own:
        # ask every serving member.
        mark = re.compile(rf'"connection_name","queuey {re.escape(role)} [^"]*\bpid={pid} ')
        by_port = {n.amqp_port: n for n in self.nodes}
        listings = []
        for member in self.nodes:
            if not port_open(member.amqp_port):
                continue
            try:
                found = member.ctl(
                    "list_connections", "name", "client_properties", "--no-table-headers"
                )
            except NodeError as exc:
                listings.append(f"{member.name}: {exc}")
                continue
            listings.append(f"{member.name}: {found}")
            for line in found.splitlines():
                port = re.match(r"\S+ -> \S+:(\d+)\t", line)
                if port and mark.search(line):
                    self.last_listing = "\n".join(listings)
                    return by_port.get(int(port.group(1)))
        self.last_listing = "\n".join(listings)
        return None

    def safe_to_stop(self, node: Node, timeout: float = 120.0) -> float:
        """Wait until stopping ``node`` leaves every quorum queue a majority (its replicas
        on a node started again just before may still be catching up): RabbitMQ's
        ``rabbitmq-upgrade await_online_quorum_plus_one``. Returns how long it took."""
        began = time.monotonic()
        node._run(
            [
                "rabbitmq-upgrade",
                "-n",
                node.name,
                "await_online_quorum_plus_one",
                "-t",
                str(int(timeout)),
            ],
            timeout + 30,
        )
        return time.monotonic() - began

    def revive(self) -> None:
        """Start again every node that is down; returns once all three serve."""
        for node in self.nodes:
            if not port_open(node.amqp_port):
                if node.is_running():
                    node.start_app()
                else:
                    node.restart()


def _in_parallel(calls: list[Callable[[], object]]) -> None:
    """Run ``calls`` on threads; re-raise the first error once all have ended."""
    errors: list[BaseException] = []

    def run(call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
