"""Every kind of bad input: one clear line on stderr, a named exit code, no traceback.

The broker in ``offline`` cannot be reached, so an exit code of 2 (not 1) also proves
that nothing tried to connect, let alone publish.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

import queuey_core
from queuey_cli.main import app
from queuey_core.handlers import discover
from tests.cli.conftest import BASE
from tests.cli.conftest import UNREACHABLE


def run(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got {lines}"
    assert lines[0].startswith("error: ")
    return lines[0]


def refused(runner: CliRunner, *args: str) -> str:
    """The one error line of a command that exits 2."""
    code, _, err = run(runner, *args)
    assert code == 2
    return one_error_line(err)


def test_version(runner: CliRunner) -> None:
    code, out, _ = run(runner, "--version")
    assert (code, out.strip()) == (0, f"queuey {queuey_core.__version__}")


def test_handlers_lists_the_example_plugin(runner: CliRunner, offline: Path) -> None:
    code, out, _ = run(runner, "--config", str(offline), "handlers")
    assert code == 0
    for name in ("greet", "flaky", "snooze", "doomed", "nap"):
        assert name in out
    assert "queuey-example-handlers" in out


def test_config_show_redacts_the_password_and_applies_env_overrides(
    runner: CliRunner, offline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUEUEY_QUEUES__DEFAULT__PREFETCH", "9")
    code, out, _ = run(runner, "--config", str(offline), "config", "show")
    assert code == 0
    assert "s3cret" not in out
    assert "guest:***@127.0.0.1:1" in out
    assert '"prefetch": 9' in out, "QUEUEY_* overrides the file"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[queues.default\n", "not valid TOML"),
        ("[queues.default]\nprefech = 3\n", "queues.default.prefech: unknown key"),
        ("[queues.default]\nprefetch = -1\n", "queues.default.prefetch"),
        ("[queues.default]\nretry = { max_attempts = 0 }\n", "queues.default.retry.max_attempts"),
        ('[worker]\njob_timeout = "soon"\n', "worker.job_timeout"),
        ('[queues."bad name!"]\n', "bad name!"),
    ],
)
def test_a_broken_config_names_the_file_and_the_key(
    runner: CliRunner, write_config: Callable[[str], Path], text: str, expected: str
) -> None:
    path = write_config(text)
    line = refused(runner, "--config", str(path), "handlers")
    assert str(path) in line
    assert expected in line


def test_a_missing_config_file(runner: CliRunner, tmp_path: Path) -> None:
    code, _, err = run(runner, "--config", str(tmp_path / "nope.toml"), "handlers")
    assert code == 2
    assert "config file not found" in one_error_line(err)


def test_a_job_bound_to_an_undeclared_queue_names_its_entry_point(
    runner: CliRunner, write_config: Callable[[str], Path]
) -> None:
    path = write_config(f'[broker]\nurl = "{UNREACHABLE}"\n[queues.other]\n')
    # Enqueueing it needs the queue: refused (issue 26: other commands only warn).
    code, _, err = run(runner, "--config", str(path), "enqueue", "greet", '{"name": "ada"}')
    assert code == 2
    line = err.splitlines()[-1]
    assert line.startswith("error: ")
    assert "'alpha'" in line
    assert "entry point 'examples'" in line
    assert "queuey-example-handlers" in line
    code, _, err = run(runner, "--config", str(path), "handlers")
    assert code == 0, err
    assert "warning: job type 'greet' (entry point 'examples' of distribution" in err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["enqueue", "nope", "{}"], "unknown job type 'nope'"),
        (["enqueue", "greet", "{bad"], "invalid JSON"),
        (["enqueue", "greet", "[" * 100_000 + "]" * 100_000], "invalid JSON: nested too deeply"),
        (["enqueue", "greet", "[1]"], "a job is a JSON object"),
        (["enqueue", "greet", '{"nam": "ada"}'], "does not fit job type 'greet': name"),
        (["enqueue", "greet", '{"name": "ada"}', "--priority", "11"], "its maximum is 10"),
        (["enqueue", "greet", '{"name": "ada"}', "--delay", "soon"], "--delay"),
        (["enqueue", "greet"], "either a JSON payload or --file"),
        (["worker", "--queues", "alpha,nope"], "unknown queue 'nope'"),
        (["worker", "--job-timeout", "forever"], "--job-timeout"),
        (["dlq", "requeue"], "give job ids or --all"),
        (["dlq", "list", "--queue", "nope"], "unknown queue 'nope'"),
        (["dlq", "purge", "--queue", "alpha"], "not confirmed"),
    ],
)
def test_bad_input_is_refused_before_anything_connects(
    runner: CliRunner, offline: Path, args: list[str], expected: str
) -> None:
    code, out, err = run(runner, "--config", str(offline), *args)
    assert code == 2, err
    assert expected in one_error_line(err)
    assert out == ""


def test_a_bad_file_publishes_nothing(runner: CliRunner, offline: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"name": "a"}\n\n{"name": "b"}\n{"name": 3}\n')
    code, _, err = run(runner, "--config", str(offline), "enqueue", "greet", "--file", str(jobs))
    assert code == 2
    assert f"{jobs}:4: does not fit job type 'greet'" in one_error_line(err)
    jobs.write_text('{"name": "a"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    code, _, err = run(runner, "--config", str(offline), "enqueue", "greet", "--file", str(jobs))
    assert code == 2
    assert f"{jobs}:2: invalid JSON: nested too deeply" in one_error_line(err)


def test_usage_errors_from_typer_exit_2(runner: CliRunner) -> None:
    result = runner.invoke(app, ["worker", "--concurrency", "0"])
    assert result.exit_code == 2
    result = runner.invoke(app, ["--log-level", "loud", "handlers"])
    assert result.exit_code == 2
    result = runner.invoke(app, ["frobnicate"])
    assert result.exit_code == 2


def test_an_unreachable_broker_is_one_line_without_the_password(
    runner: CliRunner, offline: Path
) -> None:
    code, _, err = run(runner, "--config", str(offline), "enqueue", "greet", '{"name": "ada"}')
    assert code == 1
    line = one_error_line(err)
    assert "cannot reach RabbitMQ at amqp://guest:***@127.0.0.1:1/" in line
    assert "s3cret" not in err


def _fake_entry_points(monkeypatch: pytest.MonkeyPatch, *values: tuple[str, str]) -> None:
    eps = [importlib.metadata.EntryPoint(n, v, "queuey.handlers") for n, v in values]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **_: eps)


def test_a_plugin_that_fails_to_import_stops_start_up_naming_it(
    runner: CliRunner, offline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_entry_points(monkeypatch, ("broken", "queuey_no_such_module:handlers"))
    line = refused(runner, "--config", str(offline), "handlers")
    assert "entry point 'broken'" in line
    assert "failed to load" in line


def test_two_handlers_for_one_job_type_stop_start_up_naming_both(
    runner: CliRunner, offline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_entry_points(
        monkeypatch,
        ("first", "queuey_example_handlers:greet"),
        ("second", "queuey_example_handlers:greet"),
    )
    line = refused(runner, "--config", str(offline), "handlers")
    assert "'greet'" in line
    assert "entry point 'first'" in line
    assert "entry point 'second'" in line


def test_discovery_finds_every_example(monkeypatch: pytest.MonkeyPatch) -> None:
    names = {d.handler.job_type.NAME for d in discover()}
    assert names == {"greet", "flaky", "snooze", "doomed", "nap"}
    assert BASE  # the shared config template stays importable


def test_config_overlays_merge_over_the_base_file(
    runner: CliRunner, offline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overlay = tmp_path / "dev.toml"
    overlay.write_text("[worker]\nconcurrency = 3\n[queues.alpha]\nprefetch = 2\n")
    code, out, _ = run(runner, "--config", str(offline), "--config", str(overlay), "config", "show")
    assert code == 0
    assert '"concurrency": 3' in out
    assert '"prefetch": 2' in out
    assert '"max_priority": 10' in out, "what the overlay leaves alone comes from the base"

    monkeypatch.setenv("QUEUEY_CONFIG", f"{offline}{os.pathsep}{overlay}")
    code, out, _ = run(runner, "config", "show")
    assert code == 0
    assert '"prefetch": 2' in out
