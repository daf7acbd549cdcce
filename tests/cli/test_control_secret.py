"""``[control] secret``: read from the file or the environment, never printed, and a short
one refused with one line that does not show it either."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_cli import workers as workers_cli
from queuey_cli.main import app
from queuey_core import MemoryBackend
from queuey_core import QueueConfig
from queuey_core import QueueSet
from queuey_core import Worker
from queuey_core.control import worker_statuses
from tests.cli.conftest import BASE
from tests.cli.conftest import UNREACHABLE
from tests.support import start
from tests.support import wait_for

#: Never printed by queuey on its own: finding any part of it is a leak.
SECRET = "Zx9-control-secret-Qw7"


def leaks(text: str) -> bool:
    return "Zx9" in text or "Qw7" in text or "control-secret" in text


def test_config_show_redacts_the_control_secret(
    runner: CliRunner, write_config: Callable[[str], Path]
) -> None:
    path = write_config(BASE.format(url=UNREACHABLE) + f'\n[control]\nsecret = "{SECRET}"\n')
    result = runner.invoke(app, ["--config", str(path), "config", "show"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["control"] == {"secret": "**********"}
    assert not leaks(result.stdout + result.stderr)


def test_a_short_control_secret_is_one_line_that_does_not_show_it(
    runner: CliRunner, offline: Path
) -> None:
    result = runner.invoke(
        app, ["--config", str(offline), "config", "show"], env={"QUEUEY_CONTROL__SECRET": "Zx9Qw7"}
    )
    assert result.exit_code == 2
    assert "control.secret: at least 16 characters" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not leaks(result.stdout + result.stderr)


class _Kept(MemoryBackend):
    """A MemoryBackend the command cannot close (the test's worker runs on it)."""

    def close(self) -> None:
        pass


def test_workers_and_workers_shutdown_sign_with_the_configured_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = _Kept()
    worker = Worker(
        backend, QueueSet([QueueConfig("default", prefetch=1)]), [], control_secret=SECRET
    )
    running = start(worker, None)
    monkeypatch.setattr(workers_cli, "backend", lambda _settings: backend)
    signed, unsigned = tmp_path / "signed.toml", tmp_path / "unsigned.toml"
    signed.write_text(BASE.format(url=UNREACHABLE) + f'\n[control]\nsecret = "{SECRET}"\n')
    unsigned.write_text(BASE.format(url=UNREACHABLE))
    try:
        wait_for(lambda: len(worker_statuses(backend, timeout=0, secret=SECRET)) == 1)
        runner = CliRunner()
        listed = runner.invoke(app, ["--config", str(unsigned), "workers", "--json"])
        assert json.loads(listed.stdout) == [], "without the secret: refused, no answer"
        listed = runner.invoke(app, ["--config", str(signed), "workers", "--json"])
        assert len(json.loads(listed.stdout)) == 1, "signed: answered"
        stop = runner.invoke(app, ["--config", str(unsigned), "workers", "shutdown", "--all"])
        assert stop.exit_code == 1
        assert not worker.handle.is_shutdown()
        stop = runner.invoke(app, ["--config", str(signed), "workers", "shutdown", "--all"])
        assert stop.exit_code == 0, stop.stderr
        assert running.join() is None, "the signed shutdown drained it"
        assert not leaks(listed.stdout + listed.stderr + stop.stdout + stop.stderr)
    finally:
        running.stop()
