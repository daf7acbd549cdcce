"""``queuey worker --metrics-port`` and ``queuey scheduler --metrics-port``: bad values and a
taken port are one line and exit 2.

The broker in ``offline`` cannot be reached, so exit 2 (not 1) also shows that nothing
tried to connect. The real run is in ``tests/integration/test_observability.py``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_cli.main import app


def run(runner: CliRunner, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    return result.exit_code, "\n".join(lines)


def refused_variable(
    runner: CliRunner, config: Path, command: str, variable: str, value: str
) -> str:
    """The error line of ``command`` run with ``variable`` set to ``value``: exit 2."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv(variable, value)
        code, error = run(runner, "--config", str(config), command)
    assert code == 2
    return error


def closes_its_server(runner: CliRunner, config: Path, command: str) -> None:
    """``command --metrics-port`` on a free port, with a broker it cannot reach: exit 1,
    and the port is free again (its metrics server was closed)."""
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        port = probe.getsockname()[1]
    code, error = run(runner, "--config", str(config), command, "--metrics-port", str(port))
    assert code == 1, error
    with socket.socket() as again:
        again.bind(("0.0.0.0", port))


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port something else listens on, on every interface (as the worker would)."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("value", ["-1", "65536", "http"])
def test_a_bad_metrics_port_option_is_a_usage_error(
    runner: CliRunner, offline: Path, value: str
) -> None:
    code, error = run(runner, "--config", str(offline), "worker", "--metrics-port", value)
    assert code == 2
    assert "--metrics-port" in error


def test_a_bad_metrics_port_variable_names_it(runner: CliRunner, offline: Path) -> None:
    error = refused_variable(runner, offline, "worker", "QUEUEY_WORKER__METRICS_PORT", "99999")
    assert error.startswith("error: QUEUEY_WORKER__METRICS_PORT: worker.metrics_port:"), error


def test_a_taken_port_stops_the_worker_before_it_connects(
    runner: CliRunner, offline: Path, taken_port: int
) -> None:
    code, error = run(runner, "--config", str(offline), "worker", "--metrics-port", str(taken_port))
    assert code == 2, "1 would mean it tried the (unreachable) broker first"
    assert error == f"error: cannot serve metrics on 0.0.0.0:{taken_port}: Address already in use"


def test_the_server_is_closed_when_the_broker_cannot_be_reached(
    runner: CliRunner, offline: Path
) -> None:
    closes_its_server(runner, offline, "worker")


# -- queuey scheduler --metrics-port -----------------------------------------------------

SCHEDULE = '\n[schedules.hello]\njob = "greet"\npayload = { name = "ada" }\nevery = "1m"\n'


@pytest.fixture
def scheduled(offline: Path) -> Path:
    """The offline config with one schedule, so that `queuey scheduler` has work."""
    offline.write_text(offline.read_text() + SCHEDULE)
    return offline


def test_a_taken_port_stops_the_scheduler_before_it_connects(
    runner: CliRunner, scheduled: Path, taken_port: int
) -> None:
    args = ["--config", str(scheduled), "scheduler", "--metrics-port", str(taken_port)]
    code, error = run(runner, *args)
    assert code == 2, "1 would mean it tried the (unreachable) broker first"
    assert error == f"error: cannot serve metrics on 0.0.0.0:{taken_port}: Address already in use"


def test_a_bad_scheduler_metrics_port_variable_names_it(runner: CliRunner, scheduled: Path) -> None:
    error = refused_variable(runner, scheduled, "scheduler", "QUEUEY_SCHEDULER__METRICS_PORT", "-3")
    assert error.startswith("error: QUEUEY_SCHEDULER__METRICS_PORT: scheduler.metrics_port:"), error


def test_the_schedulers_server_is_closed_when_the_broker_cannot_be_reached(
    runner: CliRunner, scheduled: Path
) -> None:
    closes_its_server(runner, scheduled, "scheduler")
