"""The narrow seam and its capabilities: who declares what, and how a caller asks."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from queuey_core import MemoryBackend
from queuey_core import MissingCapabilityError
from queuey_core.backends.capabilities import ConnectionReporting
from queuey_core.backends.capabilities import DeadLetterTools
from queuey_core.backends.capabilities import EarlyAck
from queuey_core.backends.capabilities import HoldsLeases
from queuey_core.backends.capabilities import Inspectable
from queuey_core.backends.capabilities import PublishesEncoded
from queuey_core.backends.capabilities import Republishes
from queuey_core.backends.capabilities import SettlesInProcess
from queuey_core.backends.capabilities import SupportsControl
from queuey_core.backends.capabilities import SupportsSchedules
from queuey_core.backends.capabilities import acks_at_once
from queuey_core.backends.capabilities import acks_early
from queuey_core.backends.capabilities import require
from queuey_core.backends.memory_queue import MemoryDelivery
from queuey_core.backends.open import OPENERS
from queuey_core.backends.open import open_backend
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.rabbitmq.delivery import RabbitDelivery
from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.backends.sqlite.consumer import SqliteDelivery
from queuey_core.errors import ConfigError
from queuey_core.settings import BrokerSettings


def test_the_memory_backend_declares_what_it_provides() -> None:
    backend = MemoryBackend()
    provided: tuple[type, ...] = (DeadLetterTools, Inspectable, SupportsControl, PublishesEncoded)
    for capability in provided:
        assert isinstance(backend, capability), f"MemoryBackend provides {capability.__name__}"
    for lacking in (SupportsSchedules, ConnectionReporting, Republishes):
        assert not isinstance(backend, lacking), f"not {lacking.__name__}"


def test_the_rabbitmq_backend_declares_every_capability() -> None:
    for capability in (
        DeadLetterTools,
        Inspectable,
        SupportsControl,
        SupportsSchedules,
        PublishesEncoded,
        Republishes,
        ConnectionReporting,
    ):
        assert capability in RabbitMQBackend.__mro__, f"declares {capability.__name__}"


def test_require_returns_the_backend_when_it_has_the_capability() -> None:
    backend = MemoryBackend()
    assert require(backend, DeadLetterTools, "`queuey dlq list`") is backend


def test_require_names_the_backend_the_capability_and_the_caller() -> None:
    with pytest.raises(MissingCapabilityError) as caught:
        require(MemoryBackend(), SupportsSchedules, "`queuey scheduler`")
    assert str(caught.value) == (
        "the memory backend cannot keep schedules or elect a scheduler "
        "(needed by `queuey scheduler`)"
    )


def test_only_a_rabbitmq_delivery_acks_early() -> None:
    rabbit = RabbitDelivery.__new__(RabbitDelivery)
    memory = MemoryDelivery.__new__(MemoryDelivery)
    assert isinstance(rabbit, EarlyAck)
    assert acks_early(rabbit)
    assert not isinstance(memory, EarlyAck)
    assert not acks_early(memory)
    assert acks_early(rabbit), "asked again: the kept answer is the same"


def test_only_a_memory_delivery_settles_in_process() -> None:
    memory = MemoryDelivery.__new__(MemoryDelivery)
    assert isinstance(memory, SettlesInProcess)
    assert memory.settles_in_process()
    for other in (RabbitDelivery, SqliteDelivery):
        assert not isinstance(other.__new__(other), SettlesInProcess), other.__name__


def test_an_ack_waits_for_nothing_on_rabbitmq_and_in_memory_but_on_sqlite() -> None:
    assert acks_at_once(RabbitDelivery.__new__(RabbitDelivery)), "an early ack"
    assert acks_at_once(MemoryDelivery.__new__(MemoryDelivery)), "a settle in process"
    assert not acks_at_once(SqliteDelivery.__new__(SqliteDelivery)), "a commit"
    assert acks_at_once(MemoryDelivery.__new__(MemoryDelivery)), "asked again: the same"


def test_an_unknown_url_scheme_names_the_schemes_known() -> None:
    broker = BrokerSettings.model_construct(url=SecretStr("nosuch://somewhere"))
    with pytest.raises(ConfigError) as caught:
        open_backend(broker)
    message = str(caught.value)
    assert "nosuch://" in message
    for scheme in OPENERS:
        assert f"{scheme}://" in message, f"{scheme} is named among the known schemes"


def test_only_the_embedded_backend_holds_leases_a_forced_stop_must_give_back(
    tmp_path: Path,
) -> None:
    sqlite = SqliteBackend(f"sqlite:///{tmp_path}/q.db")
    try:
        assert isinstance(sqlite, HoldsLeases)
    finally:
        sqlite.close()
    assert not isinstance(MemoryBackend(), HoldsLeases)
    assert not isinstance(RabbitMQBackend.__new__(RabbitMQBackend), HoldsLeases)
