"""``queuey dashboard``: its options, its refusals, and the hint when the extra is missing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from typer.testing import CliRunner

from queuey_cli.main import app


def run(config: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["--config", str(config), "dashboard", *args])
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    return result.exit_code, output


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A configuration on a SQLite file: the dashboard opens it without a server."""
    path = tmp_path / "queuey.toml"
    path.write_text(f'[broker]\nurl = "sqlite:///{tmp_path}/q.db"\n\n[queues.alpha]\n')
    return path


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What uvicorn would have served, instead of serving it."""
    got: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: got.update(app=app, **kw))
    return got


def test_it_serves_on_loopback_by_default(config: Path, served: dict[str, Any]) -> None:
    code, output = run(config)
    assert code == 0, output
    assert (served["host"], served["port"]) == ("127.0.0.1", 8180)
    assert served["app"].state.dashboard.read_only is False


def test_options_override_the_settings(config: Path, served: dict[str, Any]) -> None:
    code, output = run(
        config, "--host", "::1", "--port", "9001", "--read-only", "--root-path", "/queuey"
    )
    assert code == 0, output
    assert (served["host"], served["port"], served["root_path"]) == ("::1", 9001, "/queuey")
    assert served["app"].state.dashboard.read_only is True


def test_a_public_address_without_a_token_is_one_line_and_exit_2(
    config: Path, served: dict[str, Any]
) -> None:
    code, output = run(config, "--host", "0.0.0.0")
    assert code == 2
    assert "without a token" in output
    assert len(output.strip().splitlines()) <= 3
    assert "app" not in served


def test_a_public_address_with_a_token_is_served_and_the_token_never_printed(
    config: Path, served: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "tok-" + "x" * 20
    monkeypatch.setenv("QUEUEY_DASHBOARD__TOKEN", token)
    code, output = run(config, "--host", "0.0.0.0")
    assert code == 0, output
    assert served["host"] == "0.0.0.0"
    assert token not in output


def test_without_the_extra_it_says_how_to_install_it(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "queuey_dashboard", None)
    code, output = run(config)
    assert code == 1
    assert "pip install 'queuey[dashboard]'" in output


def test_a_root_path_must_be_a_path(config: Path, served: dict[str, Any]) -> None:
    code, output = run(config, "--root-path", "queuey/")
    assert code == 2
    assert "--root-path" in output
