"""The integration tests' own RabbitMQ node, for what no test may do to the shared one.

One node for the whole session (starting one costs ~10 s and ~130 MB on 2 cores): a
plain AMQP listener and a TLS one that asks for client certificates. Tests that stop,
kill, alarm or disconnect a broker take ``node``; the session stops the node at the end
whatever happened. Locally the tests that need it skip when it cannot start; under CI
(``CI=true``) they fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from queuey_core.backends.rabbitmq import RabbitMQBackend
from tests.conftest import require_broker
from tests.harness import AMQP_URL
from tests.integration.certs import Certs
from tests.integration.certs import make_certs
from tests.integration.nodes import Node
from tests.integration.nodes import NodeError
from tests.integration.nodes import ServerTLS
from tests.integration.nodes import port_open

#: Ports and names kept for this worktree's nodes (RABBITMQ.md, last section).
NODE_NAME = "qn1"
AMQP_PORT = 5681
TLS_PORT = 5682
DIST_PORT = 25681


#: What the fault tests measured, printed at the end of the run.
FIGURES: list[str] = []


@pytest.fixture(scope="session")
def figures() -> list[str]:
    """Append a line of measured figures to show in the run's summary."""
    return FIGURES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("fault suite: measured figures")
        for line in FIGURES:
            terminalreporter.write_line(line)


def _unavailable(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A CA, a server certificate for localhost, a client one, an expired one, another CA."""
    try:
        return make_certs(tmp_path_factory.mktemp("certs"))
    except (OSError, RuntimeError) as exc:  # no openssl, or it failed
        _unavailable(f"cannot make test certificates with openssl: {exc}")
        raise


@pytest.fixture(scope="session")
def own_node(certs: Certs) -> Iterator[Node]:
    """The session's node; use ``node`` in tests, which makes sure it is serving."""
    tls = ServerTLS(TLS_PORT, certs.ca, certs.server_cert, certs.server_key)
    node = Node(NODE_NAME, amqp_port=AMQP_PORT, dist_port=DIST_PORT, tls=tls)
    try:
        try:
            took = node.start()
        except NodeError as exc:
            _unavailable(f"cannot start a RabbitMQ node of the tests' own: {exc}")
        print(f"\nnode {node.name} up in {took:.1f}s (AMQP {AMQP_PORT}, TLS {TLS_PORT})")
        yield node
    finally:
        try:
            node.stop()
        finally:
            node.remove()


@pytest.fixture
def node(own_node: Node) -> Node:
    """The tests' own node, serving AMQP with no alarm. A test may stop, kill, alarm or
    disconnect it: the next test gets it back in working order."""
    if not port_open(own_node.amqp_port):
        if own_node.is_running():
            own_node.start_app()
        else:
            own_node.restart()
    return own_node


@pytest.fixture
def fresh_node(node: Node) -> Node:
    """The tests' own node, reset to nothing: for a test that kills it (see Node.reset)."""
    node.reset()
    return node


@pytest.fixture
def rabbit() -> Iterator[RabbitMQBackend]:
    """A RabbitMQBackend on the tests' virtual host (publish timeout 10 s), closed after."""
    require_broker()
    backend = RabbitMQBackend(AMQP_URL, publish_timeout=10)
    try:
        yield backend
    finally:
        backend.close()
