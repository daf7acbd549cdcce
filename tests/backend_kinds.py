"""Every backend the shared tests run on, in one place: add a new backend here.

The seed's worker tests (the ``h`` fixture, tests/conftest.py) and the backend
contract (tests/integration/backends/test_backend_contract.py, the ``env`` fixture)
are parametrised over :data:`BACKENDS`. A new backend adds one line to it, with its
worker environment (a :class:`~tests.harness.WorkerEnv`) and its contract environment
(a :class:`ContractEnv`, often just the factory of the backend): see docs/backends.md.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pika
import pytest

from queuey_core import Envelope
from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import QueueConfig
from queuey_core.backends.capabilities import Inspectable
from queuey_core.backends.capabilities import require
from queuey_core.backends.features import supports
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.results import open_job_store
from queuey_core.results.dead_letter_table import open_dead_letter_table
from queuey_core.results.postgres_store import PostgresJobStore
from tests.harness import AMQP_URL
from tests.harness import MemoryEnv
from tests.harness import RabbitEnv
from tests.harness import SqliteEnv
from tests.harness import WorkerEnv
from tests.support import named_envelope

#: The PostgreSQL the integration tests use (trust auth, database ``test``).
PG_URL = os.environ.get("QUEUEY_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")

_names = itertools.count()


class ContractEnv:
    """A backend under the contract, with its notion of time.

    The default runs in real time and counts ready messages through the backend's
    :class:`Inspectable` capability; a backend on a :class:`ManualClock` sets
    ``manual`` and advances it while waiting.
    """

    #: Whether time is the ManualClock (advanced while waiting) rather than real.
    manual = False

    def __init__(self, backend: Any, clock: ManualClock | None = None) -> None:
        self.backend = backend
        self.clock = clock or ManualClock()
        self.run = uuid.uuid4().hex[:8]
        self.made: list[str] = []

    def queue(self, **kwargs: Any) -> QueueConfig:
        """A queue of its own for this test, declared."""
        config = QueueConfig(f"contract.{self.run}.{next(_names)}", **kwargs)
        self.backend.declare([config])
        self.made.append(config.name)
        return config

    def now(self) -> float:
        return self.clock.monotonic() if self.manual else time.monotonic()

    def wait_until(self, cond: Callable[[], bool], timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError("condition was never met")
            if self.manual:
                self.clock.advance(0.05)
            time.sleep(0.005)

    def envelope(self, config: QueueConfig, name: str, priority: int = 0) -> Envelope:
        """A first attempt of a contract job for ``config``, named ``name``."""
        return named_envelope(config.name, name, job_type="contract.job", priority=priority)

    def pending(self, queue: str) -> int:
        """Messages ready on ``queue``."""
        counts = require(self.backend, Inspectable, "the contract tests").inspect([queue])
        found = counts.queues[queue]
        assert found is not None, f"queue {queue} was declared"
        return found.ready

    def close(self) -> None:
        self.backend.close()


class MemoryContract(ContractEnv):
    """MemoryBackend on a ManualClock."""

    manual = True

    def __init__(self) -> None:
        clock = ManualClock()
        super().__init__(MemoryBackend(clock=clock), clock)

    def pending(self, queue: str) -> int:
        return int(self.backend.pending(queue))


class SqliteContract(ContractEnv):
    """SqliteBackend on a file of its own, on a ManualClock."""

    manual = True

    def __init__(self) -> None:
        clock = ManualClock()
        self._dir = tempfile.mkdtemp(prefix="queuey-contract-")
        super().__init__(SqliteBackend(f"sqlite:///{self._dir}/contract.db", clock=clock), clock)

    def close(self) -> None:
        try:
            super().close()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)


class RabbitContract(ContractEnv):
    """RabbitMQ in real time, in the test vhost; the queues it made are deleted after."""

    def __init__(self) -> None:
        super().__init__(RabbitMQBackend(AMQP_URL, publish_timeout=10))

    def pending(self, queue: str) -> int:
        return int(self.backend.queue_counts(queue)[0])

    def close(self) -> None:
        super().close()
        conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        ch = conn.channel()
        for name in self.made:
            ch.queue_delete(name)
            ch.queue_delete(f"{name}.dlq")
        conn.close()


class RabbitStoreContract(RabbitContract):
    """RabbitMQ with its dead letters in a job store (``sqlite`` file or ``postgres``
    schema of its own, dropped after): the indexed path of docs/dead-letters.md."""

    def __init__(self, store: str) -> None:
        super().__init__()
        self._dir = tempfile.mkdtemp(prefix="queuey-contract-store-")
        if store == "sqlite":
            self.store_url = f"sqlite:///{self._dir}/store.db"
        else:
            self.store_url = f"{PG_URL}?schema=queuey_test_{uuid.uuid4().hex[:12]}"
        self.table = open_dead_letter_table(self.store_url)
        self.backend.keep_dead_letters_in(self.table)

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.store_url.startswith("postgresql"):
                drop_schema(self.store_url)
            shutil.rmtree(self._dir, ignore_errors=True)


def drop_schema(url: str) -> None:
    """Drop the schema of a PostgreSQL store URL, and all in it."""
    store = open_job_store(url)
    assert isinstance(store, PostgresJobStore)
    store.drop()
    store.close()


@dataclass(frozen=True)
class BackendKind:
    """One backend as the shared tests make it."""

    name: str
    #: The backend's class: what it declares (its ``features`` and capabilities).
    backend: type
    worker_env: Callable[[], WorkerEnv]
    contract_env: Callable[[], ContractEnv]
    #: Needs a broker running beside the tests: marked ``integration``, skipped (failed
    #: under CI) when the broker does not answer.
    needs_broker: bool = False
    #: The job store it records to in the contract suite (tests/contract/): ``"own"``
    #: (the backend's own file), ``"memory"``, ``"sqlite"`` or ``"postgres"``.
    store: str = "memory"
    #: The ``[broker] url`` of a ``queuey`` command on this backend, in a folder of the
    #: test's; None where no other process can reach it (``across_processes``).
    cli_url: Callable[[str], str] | None = None

    def param(self) -> Any:
        marks = [pytest.mark.integration] if self.needs_broker else []
        return pytest.param(self, id=self.name, marks=marks)

    def supports(self, feature: str) -> bool:
        """Whether the backend declares ``feature`` (a flag or a capability, by name)."""
        return supports(self.backend, feature)


#: The backends every shared test runs on.
BACKENDS = [
    BackendKind("memory", MemoryBackend, MemoryEnv, MemoryContract),
    BackendKind(
        "sqlite",
        SqliteBackend,
        SqliteEnv,
        SqliteContract,
        store="own",
        cli_url=lambda folder: f"sqlite:///{folder}/queuey.db",
    ),
    BackendKind(
        "rabbitmq",
        RabbitMQBackend,
        RabbitEnv,
        RabbitContract,
        needs_broker=True,
        cli_url=lambda _: AMQP_URL,
    ),
]


def backend_params() -> list[Any]:
    """:data:`BACKENDS` as pytest parameters (ids: the backends' names)."""
    return [kind.param() for kind in BACKENDS]


#: RabbitMQ keeping its dead letters in a job store: the dead-letter contract runs on
#: these too (tests/integration/backends/test_dead_letter_pages.py).
STORE_BACKENDS = [
    BackendKind(
        "rabbitmq+sqlite",
        RabbitMQBackend,
        RabbitEnv,
        lambda: RabbitStoreContract("sqlite"),
        needs_broker=True,
        store="sqlite",
        cli_url=lambda _: AMQP_URL,
    ),
    BackendKind(
        "rabbitmq+postgres",
        RabbitMQBackend,
        RabbitEnv,
        lambda: RabbitStoreContract("postgres"),
        needs_broker=True,
        store="postgres",
        cli_url=lambda _: AMQP_URL,
    ),
]


def stored_params() -> list[Any]:
    """Each backend with the job store a user would give it, as pytest parameters: memory
    with a ``memory://`` store, the embedded file with its own, RabbitMQ with a SQLite
    and with a PostgreSQL store (it keeps none of its own)."""
    return [kind.param() for kind in [BACKENDS[0], BACKENDS[1], *STORE_BACKENDS]]


def store_url(kind: BackendKind, env: WorkerEnv | None, folder: str) -> str:
    """A job store for ``kind``'s test in ``env``: a new one, or the backend's own file;
    files go in ``folder``, a PostgreSQL store in a schema of its own (drop it after)."""
    if kind.store == "own":
        assert isinstance(env, SqliteEnv), "only the embedded file is its own store"
        return env.url
    if kind.store == "sqlite":
        return f"sqlite:///{folder}/store.db"
    if kind.store == "postgres":
        return f"{PG_URL}?schema=queuey_test_{uuid.uuid4().hex[:12]}"
    return f"memory://{uuid.uuid4().hex}"


def dead_letter_params() -> list[Any]:
    """Every backend, and RabbitMQ with each job store, as pytest parameters."""
    return [kind.param() for kind in [*BACKENDS, *STORE_BACKENDS]]
