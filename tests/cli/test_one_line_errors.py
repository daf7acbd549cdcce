"""Bad input of every kind, through the installed ``queuey`` script: exit 2 and one line
on stderr naming the problem; never a traceback, never Typer's usage box.

The broker in the config cannot be reached, so exit 2 (not 1) also shows that nothing
tried to connect.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import BASE
from tests.cli.conftest import UNREACHABLE

QUEUEY = str(Path(sys.executable).parent / "queuey")
PAYLOAD = '{"name": "ada"}'


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A directory with a queuey.toml (unreachable broker), a non-UTF-8 jobs file, a
    non-UTF-8 config file and a subdirectory."""
    (tmp_path / "queuey.toml").write_text(BASE.format(url=UNREACHABLE))
    (tmp_path / "latin1.jsonl").write_bytes(b'{"name": "caf\xe9"}\n')
    (tmp_path / "latin1.toml").write_bytes(b"[worker]\n# caf\xe9\n")
    (tmp_path / "sub").mkdir()
    return tmp_path


def queuey(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("QUEUEY_")}
    return subprocess.run(
        [QUEUEY, *args],
        cwd=cwd,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


BAD_INPUT: list[tuple[list[str], dict[str, str], str]] = [
    (["enqueue", "greet", PAYLOAD, "--delay", "inf"], {}, "--delay must be finite"),
    (["enqueue", "greet", PAYLOAD, "--delay", "nan"], {}, "--delay is not a number"),
    (["enqueue", "greet", PAYLOAD, "--delay", "1000d"], {}, "longer than the broker can hold"),
    (["enqueue", "greet", PAYLOAD, "--priority", "high"], {}, "'--priority'"),
    (["enqueue", "greet", "--file", "latin1.jsonl"], {}, "latin1.jsonl: not UTF-8 text"),
    (["enqueue", "greet", "--file", "sub"], {}, "'--file': file 'sub' is a directory"),
    (["enqueue", "greet", "--file"], {}, "Option '--file' requires an argument"),
    (["enqueue"], {}, "Missing argument 'job_type'"),
    (["worker", "--job-timeout", "0"], {}, "--job-timeout must be more than 0 seconds"),
    (["worker", "--concurrency", "0"], {}, "'--concurrency'"),
    (["worker", "--nope"], {}, "No such option: --nope"),
    (["frobnicate"], {}, "No such command 'frobnicate'"),
    (["--config", "latin1.toml", "handlers"], {}, "latin1.toml: not UTF-8 text (byte 14)"),
    (["--config", "sub", "handlers"], {}, "file 'sub' is a directory"),
    (["handlers", "--config"], {}, "No such option: --config"),
    (["--config"], {}, "Option '--config' requires an argument"),
    (["handlers"], {"QUEUEY_QUEUES": "notjson"}, "QUEUEY_QUEUES: not valid JSON"),
    (["handlers"], {"QUEUEY_CONFIG": "sub"}, "QUEUEY_CONFIG: sub: is a directory"),
    (["handlers"], {"QUEUEY_CONFIG": "nope.toml"}, "QUEUEY_CONFIG: nope.toml: config file not"),
    (["handlers"], {"QUEUEY_LOG_LEVEL": "loud"}, "QUEUEY_LOG_LEVEL: use debug, info"),
    (
        ["config", "show"],
        {"QUEUEY_BROKER__URL": "amqp://guest:S3cr3tPw!#1@127.0.0.1:5672/%2F"},
        "QUEUEY_BROKER__URL: broker.url: ",
    ),
    (
        ["worker"],
        {"QUEUEY_WORKER__JOB_TIMEOUT": "0"},
        "QUEUEY_WORKER__JOB_TIMEOUT: worker.job_timeout: ",
    ),
    (["--log-level", "loud", "handlers"], {}, "use debug, info, warning or error"),
]


@pytest.mark.parametrize(
    ("args", "env", "expected"), BAD_INPUT, ids=[" ".join(a) or "-" for a, _, _ in BAD_INPUT]
)
def test_bad_input_is_one_line_on_stderr_and_exit_2(
    workdir: Path, args: list[str], env: dict[str, str], expected: str
) -> None:
    done = queuey(workdir, *args, env=env)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert expected in lines[0]
    assert "Traceback" not in done.stderr
    assert "Usage:" not in done.stderr + done.stdout
    assert done.stdout == ""
    assert "S3cr3t" not in done.stderr


def test_help_still_works_and_exits_0(workdir: Path) -> None:
    for args in (["--help"], ["enqueue", "--help"], ["dlq", "--help"]):
        done = queuey(workdir, *args)
        assert done.returncode == 0, done.stderr
        assert "Usage:" in done.stdout
        assert done.stderr == ""


def test_version_exits_0(workdir: Path) -> None:
    done = queuey(workdir, "--version")
    assert (done.returncode, done.stdout.startswith("queuey ")) == (0, True)


@pytest.mark.parametrize("args", [[], ["dlq"], ["workflow"]], ids=["queuey", "dlq", "workflow"])
def test_no_arguments_shows_the_help_as_help(workdir: Path, args: list[str]) -> None:
    done = queuey(workdir, *args)
    # As Click shows it: on stderr, exit 2, and readable: once it was one "error:" line
    # holding the whole help with its newlines escaped.
    assert done.returncode == 2
    assert done.stderr.startswith(f"Usage: queuey {' '.join(args)}".rstrip()), done.stderr
    assert done.stderr.count("\n") > 5
    assert "\\n" not in done.stderr
    assert "error:" not in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unreachable_broker_is_one_line_and_exit_1(workdir: Path) -> None:
    done = queuey(workdir, "enqueue", "greet", PAYLOAD)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("error: cannot reach RabbitMQ at amqp://guest:***@127.0.0.1:1/")
