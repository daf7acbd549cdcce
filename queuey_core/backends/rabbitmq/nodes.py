"""Which RabbitMQ node to connect to: the one way every connection picks the next node.

Owns: the broker's URLs in this process's order (shuffled once per process, so a fleet
of workers given the same list spreads over the cluster), the node that answered last
(shared by all of one backend's connections, so when one of them finds a node gone the
others go straight to the next), and a :class:`Picker` per connection, holding that
connection's parameters for each node.

A connection asks its picker for :meth:`Picker.current`, reports :meth:`Picker.opened`
or :meth:`Picker.failed`; ``failed`` moves on to the next node in the order and says
whether every node has now been tried since the last success (time to back off).
With one URL this is exactly the old behaviour: the same node, backing off each time.
Must never: hold a pika connection (the links, the admin and the direct publisher do),
or put a password in ``where``.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pika

from queuey_core.backends.rabbitmq.pika_compat import connected_params, open_blocking
from queuey_core.errors import ConfigError
from queuey_core.urls import redact, redact_all, split_urls


def as_urls(url: str | Sequence[str]) -> list[str]:
    """One URL, a comma-separated list of them, or a sequence: the list.

    Raises:
        ConfigError: an empty list.
    """
    urls = split_urls(url) if isinstance(url, str) else [u.strip() for u in url]
    if not urls or not all(urls):
        raise ConfigError("the broker URL list is empty, or has an empty entry")
    return urls


class Nodes:
    """The cluster's nodes in this process's order, and the one to try first.

    Thread-safe: every connection of a backend shares one.

    Args:
        urls: one per node (checked by the caller).
        shuffle: spread processes over the nodes (the default); False keeps the order
            given, for a list that names the nearest node first.
        rng: the shuffle's randomness (tests pass a seeded one).
    """

    def __init__(
        self, urls: Sequence[str], *, shuffle: bool = True, rng: random.Random | None = None
    ) -> None:
        self.urls = list(urls)
        self.order = list(range(len(self.urls)))
        if shuffle:
            (rng or random.SystemRandom()).shuffle(self.order)
        self._lock = threading.Lock()
        self._preferred = 0  # a position in self.order
        self.where = redact_all([self.urls[i] for i in self.order])

    def __len__(self) -> int:
        return len(self.urls)

    def preferred(self) -> int:
        """The position (in :attr:`order`) of the node that answered last."""
        with self._lock:
            return self._preferred

    def answered(self, position: int) -> None:
        """The node at ``position`` accepted a connection: every connection starts there."""
        with self._lock:
            self._preferred = position

    def failed(self, position: int) -> None:
        """The node at ``position`` did not answer: if it was the preferred one, the next
        node becomes preferred, so the other connections skip it."""
        with self._lock:
            if self._preferred == position:
                self._preferred = (position + 1) % len(self.order)

    def picker(self, build: Callable[[str], pika.ConnectionParameters]) -> Picker:
        """A picker for one connection, its parameters for each node made by ``build``."""
        return Picker(self, [build(self.urls[i]) for i in self.order])


@dataclass(frozen=True)
class Target:
    """One node to try: its connection parameters, where it is (redacted), its position."""

    params: pika.ConnectionParameters
    where: str
    position: int


class Picker:
    """One connection's way through the nodes (see the module docstring).

    Used from that connection's thread only (the shared :class:`Nodes` is locked).
    """

    def __init__(self, nodes: Nodes, params: list[pika.ConnectionParameters]) -> None:
        self.nodes = nodes
        self.params = params
        self._wheres = [redact(nodes.urls[i]) for i in nodes.order]
        self._position = nodes.preferred()
        self._tried = 0  # nodes tried without success since the last one that answered

    @property
    def where(self) -> str:
        """Every node, redacted: ``url`` alone, or ``any of url1, url2, ...``."""
        return self.nodes.where

    def current(self) -> Target:
        """The node to try now: where the last attempt left off, or, at the start of a
        round, the node that answered last (to this or any other connection)."""
        if self._tried == 0:
            self._position = self.nodes.preferred()
        return Target(self.params[self._position], self._wheres[self._position], self._position)

    def opened(self) -> None:
        """The current node answered."""
        self._tried = 0
        self.nodes.answered(self._position)

    def failed(self) -> bool:
        """The current node did not answer, or its connection was lost: move on to the next.

        Returns:
            Whether every node has been tried since the last success (a round is over:
            back off before the next attempt). Always True with one node.
        """
        self.nodes.failed(self._position)
        self._tried += 1
        self._position = (self._position + 1) % len(self.params)
        if self._tried >= len(self.params):
            self._tried = 0
            return True
        return False

    def in_order(self) -> list[Target]:
        """Every node, starting with the preferred one: for a caller that tries them all
        in one go (pika's BlockingConnection takes such a sequence)."""
        start = self.nodes.preferred()
        n = len(self.params)
        return [
            Target(self.params[p], self._wheres[p], p) for p in ((start + k) % n for k in range(n))
        ]

    def blocking_connection(self) -> pika.BlockingConnection:
        """A BlockingConnection to the first node that answers, the preferred one first.

        pika walks the sequence itself (each node once) and raises its last error when
        none answers; the node that did is remembered for every connection.
        """
        targets = self.in_order()
        params = [t.params for t in targets]
        conn: pika.BlockingConnection = open_blocking(params if len(params) > 1 else params[0])
        chosen = connected_params(conn)
        for t in targets:
            if t.params is chosen or (t.params.host, t.params.port) == (chosen.host, chosen.port):
                self._position, self._tried = t.position, 0
                self.nodes.answered(t.position)
                break
        return conn
