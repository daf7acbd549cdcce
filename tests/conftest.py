from __future__ import annotations

import os
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol
from typing import TypeVar

import pytest
from hypothesis import settings

from queuey_core import ManualClock
from queuey_core import MemoryBackend
from queuey_core import Producer
from queuey_core import QueueSet
from tests.backend_kinds import BackendKind
from tests.backend_kinds import backend_params
from tests.harness import BROKER_HOST
from tests.harness import BROKER_PORT
from tests.harness import Memory
from tests.harness import WorkerEnv
from tests.harness import broker_reachable
from tests.support import Recorder
from tests.support import seed_queues

# CI explores the same examples every run, so a red build always reproduces.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def queues() -> QueueSet:
    return seed_queues()


@pytest.fixture
def backend(clock: ManualClock) -> MemoryBackend:
    return MemoryBackend(clock=clock)


@pytest.fixture
def producer(backend: MemoryBackend, queues: QueueSet, clock: ManualClock) -> Producer:
    return Producer(backend, queues, clock=clock)


@pytest.fixture
def mem(backend: MemoryBackend, producer: Producer, queues: QueueSet, clock: ManualClock) -> Memory:
    return Memory(backend, producer, queues, clock)


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[[str], Path]:
    """Write a queuey.toml with the given text and return its path."""

    def write(text: str) -> Path:
        path = tmp_path / "queuey.toml"
        path.write_text(text)
        return path

    return write


@pytest.fixture
def recorder() -> Iterator[Callable[[], Recorder]]:
    """Makes Recorders, and fails the test if an assert inside a handler failed."""
    made: list[Recorder] = []

    def make() -> Recorder:
        rec = Recorder()
        made.append(rec)
        return rec

    yield make
    failures = [exc for rec in made for exc in rec.failed_assertions]
    assert not failures, f"assertions failed inside handlers: {failures}"


def require_broker() -> None:
    """Fail under CI, skip elsewhere, when no RabbitMQ answers."""
    if broker_reachable():
        return
    message = (
        f"RabbitMQ is not reachable on {BROKER_HOST}:{BROKER_PORT} "
        "(scripts/ensure-rabbitmq starts it)"
    )
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


class _Closes(Protocol):
    def close(self) -> None: ...


E = TypeVar("E", bound=_Closes)


@contextmanager
def backend_env(kind: BackendKind, make: Callable[[], E]) -> Iterator[E]:
    """``make()``, once RabbitMQ answers if the kind needs it; closed afterwards."""
    if kind.needs_broker:
        require_broker()
    env = make()
    try:
        yield env
    finally:
        env.close()


@pytest.fixture(params=backend_params())
def h(request: pytest.FixtureRequest) -> Iterator[WorkerEnv]:
    """The environment a worker test runs in: each backend of tests/backend_kinds.py
    (memory + manual clock, real RabbitMQ, ...)."""
    kind: BackendKind = request.param
    with backend_env(kind, kind.worker_env) as env:
        yield env


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` (minutes of real processes: tests/process/test_signal_bursts.py,
    tests/integration/test_stopping.py) run only with ``QUEUEY_TEST_SLOW=1``, which
    ``scripts/test`` (the whole suite, as CI runs it) sets; a bare ``pytest`` of one area
    skips them, and ``-m "not slow"`` leaves them out of any run."""
    _keep_part(config, items, os.environ.get(PART_ENV, ""))
    if os.environ.get("QUEUEY_TEST_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set QUEUEY_TEST_SLOW=1 to run it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


#: ``scripts/test`` runs the suite as two pytest processes (unless ``QUEUEY_TEST_JOBS=1``)
#: side by side, each keeping one part: ``brokers`` (tests/integration but its cli folder:
#: the fault suites, the nodes of their own and the cluster, run one at a time as before)
#: and ``rest`` (everything else, on a virtual host of its own). Most of either part waits
#: on processes and brokers, so the two overlap on two cores.
PART_ENV = "QUEUEY_TEST_PART"
_BROKERS = Path(__file__).parent / "integration"
_BESIDE_BROKERS = ("cli",)


def part_of(path: Path) -> str:
    """The part of the suite the test file ``path`` belongs to."""
    if not path.is_relative_to(_BROKERS):
        return "rest"
    inside = path.relative_to(_BROKERS).parts
    return "rest" if inside[0] in _BESIDE_BROKERS else "brokers"


def _keep_part(config: pytest.Config, items: list[pytest.Item], part: str) -> None:
    if not part:
        return
    if part not in {"brokers", "rest"}:
        raise pytest.UsageError(f"{PART_ENV} must be brokers or rest, not {part!r}")
    kept: list[pytest.Item] = []
    others: list[pytest.Item] = []
    for item in items:
        (kept if part_of(item.path) == part else others).append(item)
    if others:
        config.hook.pytest_deselected(items=others)
        items[:] = kept


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """Puts the root logger back after each test.

    A command run in-process (CliRunner) installs its log handler on the root logger,
    as the console script does; left there, later tests' log lines went to the real
    stderr as JSON, and pytest's own log capture stopped seeing them.
    """
    import logging  # noqa: PLC0415

    def ours(h: logging.Handler) -> bool:
        # pytest adds and removes its capture handlers per phase itself: leave them be.
        return not type(h).__module__.startswith("_pytest")

    root = logging.getLogger()
    before, level = [h for h in root.handlers if ours(h)], root.level
    pika_level = logging.getLogger("pika").level
    try:
        yield
    finally:
        for h in [h for h in root.handlers if ours(h) and h not in before]:
            root.removeHandler(h)
            h.close()
        for h in before:
            if h not in root.handlers:
                root.addHandler(h)
        root.setLevel(level)
        logging.getLogger("pika").setLevel(pika_level)
