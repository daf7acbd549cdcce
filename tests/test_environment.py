"""A ``QUEUEY_*`` variable that sets nothing is warned about, by name, once, with the
variable it probably meant; never with its value."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_core import ConfigError
from queuey_core import environment
from queuey_core.environment import setting_variables
from queuey_core.environment import unknown_variables
from queuey_core.settings import Settings
from queuey_core.settings import load_settings

SHIPPED = Path(__file__).resolve().parents[1] / "queuey.toml"
TABLES = {"queues": {"alpha": {"prefetch": 8}, "beta": {}}}


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a new process would: nothing warned about yet."""
    monkeypatch.setattr(environment, "_warned", set())


def test_the_one_underscore_typo_is_named_with_the_variable_it_meant() -> None:
    found = unknown_variables(Settings, {"QUEUEY_BROKER_URL": "amqp://x"}, TABLES)
    assert found == [("QUEUEY_BROKER_URL", "QUEUEY_BROKER__URL")]


@pytest.mark.parametrize(
    ("variable", "meant"),
    [
        ("QUEUEY_WORKER_CONCURRENCY", "QUEUEY_WORKER__CONCURRENCY"),
        ("QUEUEY_QUEUES_ALPHA__PREFETCH", "QUEUEY_QUEUES__ALPHA__PREFETCH"),
        ("QUEUEY_BROKR__URL", "QUEUEY_BROKER__URL"),
        ("QUEUEY_BROKER_TLS__CA_FILE", "QUEUEY_BROKER__TLS__CA_FILE"),
        ("QUEUEY_CONFIGS", "QUEUEY_CONFIG"),
        ("queuey_broker_url", "QUEUEY_BROKER__URL"),
        ("QUEUEY_NOTHING_LIKE_IT", None),
    ],
)
def test_every_variable_that_sets_nothing_is_found_with_its_close_match(
    variable: str, meant: str | None
) -> None:
    assert unknown_variables(Settings, {variable: "1"}, TABLES) == [(variable, meant)]


@pytest.mark.parametrize(
    "variable",
    [
        "QUEUEY_BROKER__URL",
        "QUEUEY_BROKER",  # a whole table, as JSON
        "QUEUEY_WORKER__METRICS_PORT",
        "QUEUEY_QUEUES__ALPHA__RETRY__INITIAL",
        "QUEUEY_QUEUES__NEW__PREFETCH",  # a queue only the environment declares
        "queuey_worker__concurrency",  # pydantic-settings ignores the case
        "QUEUEY_CONFIG",
        "QUEUEY_LOG_LEVEL",
        "QUEUEY_SUPERVISOR_PID",
        "QUEUEY_CHILD_INDEX",
        "QUEUEY_TEST_AMQP_URL",
        "QUEUEY_TEST_ANYTHING",
        "QUEUEY_BENCH_URL",
        "QUEUEY_BENCH_FD",  # the pipe a bench worker reports its first job on
        "PATH",
        "QUEUEYX",
    ],
)
def test_variables_queuey_reads_are_not_warned_about(variable: str) -> None:
    assert unknown_variables(Settings, {variable: "1"}, TABLES) == []


def test_the_settings_variables_include_nested_tables_and_configured_entries() -> None:
    names = set(setting_variables(Settings, TABLES))
    assert {
        "QUEUEY_BROKER__URL",
        "QUEUEY_BROKER__TLS__SERVER_NAME",
        "QUEUEY_WORKER__SHUTDOWN_TIMEOUT",
        "QUEUEY_SCHEDULER__GRACE",
        "QUEUEY_QUEUES__ALPHA__RETRY__MAX_ATTEMPTS",
        "QUEUEY_QUEUES__BETA__KIND",
    } <= names


def test_loading_settings_warns_once_per_variable_and_never_shows_its_value(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("QUEUEY_BROKER_URL", "amqp://app:Zx9Qw7@rabbit:5672/prod")
    monkeypatch.setenv("QUEUEY_WORKER_CONCURENCY", "4")
    with caplog.at_level(logging.WARNING, logger="queuey_core.environment"):
        settings, _ = load_settings(SHIPPED)
        load_settings(SHIPPED)  # a command may load them twice: one warning each
    assert "127.0.0.1" in settings.broker.url.get_secret_value(), "the typo set nothing"
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "environment variable QUEUEY_BROKER_URL matches no setting and is ignored; "
        "did you mean QUEUEY_BROKER__URL?",
        "environment variable QUEUEY_WORKER_CONCURENCY matches no setting and is ignored; "
        "did you mean QUEUEY_WORKER__CONCURRENCY?",
    ]
    assert caplog.records[0].variable == "QUEUEY_BROKER_URL"  # type: ignore[attr-defined]
    assert "Zx9" not in caplog.text


def test_the_warning_comes_even_when_the_configuration_then_fails(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    # The TLS keys need an amqps:// URL, which went into the misspelt variable.
    config = tmp_path / "queuey.toml"
    config.write_text('[broker.tls]\nserver_name = "rabbit"\n')
    monkeypatch.setenv("QUEUEY_BROKER_URL", "amqps://rabbit:5671/%2F")
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError, match="not amqps"):
        load_settings(config)
    assert "did you mean QUEUEY_BROKER__URL?" in caplog.text


def test_the_command_line_shows_the_warning_on_stderr_and_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("QUEUEY_CONFIG", raising=False)
    result = CliRunner().invoke(
        app,
        ["--config", str(SHIPPED), "--log-format", "json", "config", "show"],
        env={"QUEUEY_BROKER_URL": "amqp://app:Zx9Qw7@rabbit:5672/prod"},
    )
    assert result.exit_code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "QUEUEY_BROKER_URL" in line]
    assert len(warnings) == 1
    assert "did you mean QUEUEY_BROKER__URL?" in warnings[0]
    assert '"level": "warning"' in warnings[0]
    assert "Zx9" not in result.stdout + result.stderr
    assert "QUEUEY_BROKER_URL" not in result.stdout, "stdout keeps only the result"
