"""Shell completion: Typer's scripts and installer, for a shell named on the command line
(so they work without a terminal or a shell to detect), and the root command's one-line
usage errors unchanged around them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_cli import completion
from queuey_cli.main import app
from tests.support import bash

QUEUEY = str(Path(sys.executable).parent / "queuey")


def script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed ``queuey``, with no terminal: stdin, stdout and stderr are pipes."""
    return subprocess.run(
        [QUEUEY, *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.mark.parametrize(
    ("shell", "marker"),
    [
        ("bash", "complete -o default -F _queuey_completion queuey"),
        ("zsh", "#compdef queuey"),
        ("fish", "complete --command queuey"),
    ],
)
def test_show_completion_prints_the_script_for_the_shell_named(shell: str, marker: str) -> None:
    done = script("--show-completion", shell)
    assert done.returncode == 0, done.stderr
    assert marker in done.stdout
    assert "_QUEUEY_COMPLETE" in done.stdout, "the variable the script calls queuey back with"
    assert done.stderr == ""


def test_show_completion_in_process(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--show-completion", "bash"])
    assert result.exit_code == 0
    assert "complete -o default -F _queuey_completion queuey" in result.stdout


def test_without_a_shell_named_the_one_running_is_used() -> None:
    # `; true` keeps bash from exec-ing queuey in its place: bash stays its parent.
    done = bash(f"{QUEUEY} --show-completion; true")
    assert "complete -o default -F _queuey_completion queuey" in done.stdout


@pytest.mark.parametrize("option", ["--show-completion", "--install-completion"])
def test_without_a_shell_named_or_detected_it_is_one_line_and_exit_2(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    monkeypatch.setattr(completion, "detected_shell", lambda: None)
    result = runner.invoke(app, [option, "--log-level", "info"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: {option}: could not tell which shell this is: name it "
        "(bash, zsh, fish, powershell, pwsh)"
    ]
    assert result.stdout == ""


def test_a_detected_shell_is_used_when_none_is_named(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(completion, "detected_shell", lambda: completion.Shell.ZSH)
    result = runner.invoke(app, ["--show-completion"])
    assert result.exit_code == 0
    assert result.stdout.startswith("#compdef queuey")


def test_the_completion_script_s_callback_completes_commands_and_subcommands() -> None:
    env = {"_QUEUEY_COMPLETE": "complete_bash", "COMP_WORDS": "queuey dlq ", "COMP_CWORD": "2"}
    done = script(env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["list", "show", "requeue", "delete", "purge", "import"]
    env = {"_QUEUEY_COMPLETE": "complete_bash", "COMP_WORDS": "queuey que", "COMP_CWORD": "1"}
    assert script(env=env).stdout.split() == ["queues"]


def test_install_completion_writes_the_script_where_the_shell_reads_it(tmp_path: Path) -> None:
    done = script("--install-completion", "bash", env={"HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    installed = tmp_path / ".bash_completions" / "queuey.sh"
    assert "_queuey_completion" in installed.read_text()
    assert str(installed) in (tmp_path / ".bashrc").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--show-completion", "tcsh"], "error: Invalid value for '--show-completion'"),
        (["--install-completion", "csh"], "error: Invalid value for '--install-completion'"),
        (["--bogus"], "error: No such option: --bogus"),
        (["nosuchcommand"], "error: No such command 'nosuchcommand'."),
    ],
)
def test_usage_errors_stay_one_line_and_exit_2(args: list[str], message: str) -> None:
    done = script(*args)
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith(message), line
    assert done.stdout == ""
