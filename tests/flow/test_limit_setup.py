"""Limits from the settings and from job classes, and where their state must live:
refused at start, in one line, where there is no place shared by every worker."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from typing import ClassVar

import pytest

from queuey_core import Job
from queuey_core import Limit
from queuey_core.errors import ConfigError
from queuey_core.flow.limit_setup import NO_LIMIT_STORE
from queuey_core.flow.limit_setup import check_limits
from queuey_core.flow.limit_setup import limit_book
from queuey_core.flow.limit_setup import limit_gate_for
from queuey_core.settings import Settings
from queuey_core.settings import load_settings

RABBIT = "amqp://guest:guest@127.0.0.1:1/%2F"


class Export(Job):
    NAME: ClassVar[str] = "test.export"
    QUEUE: ClassVar[str] = "reports"
    LIMITS: ClassVar[tuple[Limit, ...]] = (Limit("exports", concurrency=2, key="tenant"),)
    tenant: str


class Import(Job):
    NAME: ClassVar[str] = "test.import"
    QUEUE: ClassVar[str] = "reports"
    LIMITS: ClassVar[tuple[Limit, ...]] = (Limit("exports", concurrency=2, key="tenant"),)
    tenant: str


class Rogue(Job):
    NAME: ClassVar[str] = "test.rogue"
    QUEUE: ClassVar[str] = "reports"
    LIMITS: ClassVar[tuple[Limit, ...]] = (Limit("exports", concurrency=9),)


def _settings(url: str, **overrides: Any) -> Settings:
    settings, _ = load_settings(
        os.devnull, overrides={"broker": {"url": url}, "queues": {"reports": {}}, **overrides}
    )
    return settings


def test_a_limit_on_job_classes_binds_each_class_that_declares_it(tmp_path: Path) -> None:
    settings = _settings(f"sqlite:///{tmp_path}/q.db")
    book = limit_book(settings, [Export, Import])
    assert [s.name for s in book.binding("test.export", "reports")] == ["exports"]
    assert book.by_name["exports"].jobs == {"test.export", "test.import"}, "one limit, shared"
    gate = limit_gate_for(settings, job_types=[Export, Import])
    assert gate is not None
    gate.close()


def test_one_name_declared_two_ways_is_refused() -> None:
    settings = _settings(f"sqlite:///{os.devnull}")
    with pytest.raises(ConfigError, match="declared differently by job types"):
        limit_book(settings, [Export, Rogue])
    both = _settings(
        f"sqlite:///{os.devnull}", limits={"exports": {"rate": "1/s", "jobs": ["test.export"]}}
    )
    with pytest.raises(ConfigError, match=r"both in \[limits.exports\] and on job type"):
        limit_book(both, [Export])


def test_limits_on_rabbitmq_without_a_store_are_refused_at_start() -> None:
    settings = _settings(RABBIT)
    with pytest.raises(ConfigError) as refused:
        check_limits(settings, [Export])
    assert str(refused.value) == NO_LIMIT_STORE
    assert "[results] url" in NO_LIMIT_STORE
    check_limits(settings, [])  # no limit: nothing to keep, nothing refused
    stored = _settings(RABBIT, results={"url": "sqlite:///state.db"})
    check_limits(stored, [Export])


def test_a_limit_naming_an_unknown_job_type_is_refused_at_start(tmp_path: Path) -> None:
    settings = _settings(
        f"sqlite:///{tmp_path}/q.db", limits={"api": {"rate": "1/s", "jobs": ["test.exprot"]}}
    )
    with pytest.raises(ConfigError, match=r"no job type named 'test\.exprot'"):
        check_limits(settings, [Export])


def test_a_rate_that_cannot_be_read_is_refused_where_the_settings_are_read() -> None:
    with pytest.raises(ConfigError, match="rate"):
        _settings(RABBIT, limits={"api": {"rate": "fast", "jobs": ["x"]}})
