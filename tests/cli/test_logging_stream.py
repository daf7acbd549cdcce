"""The command line's log handler writes to the stderr of the moment.

A caller that swaps ``sys.stderr`` (``CliRunner``, an application embedding the command
line) closes its stream afterwards, while a worker thread may still log: a handler
holding the stream it was made with then fails on every record ("I/O operation on closed
file"), and that failure reached a worker's run loop in CI.
"""

from __future__ import annotations

import logging

import pytest
from typer.testing import CliRunner

from queuey_cli.main import app


def test_a_record_after_a_cli_run_goes_to_the_stderr_of_the_moment(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = CliRunner().invoke(app, ["--log-format", "json", "handlers", "--json"])
    assert result.exit_code == 0
    capsys.readouterr()
    logging.getLogger("queuey.test").warning("after the run")
    err = capsys.readouterr().err
    assert "Logging error" not in err
    assert '"message": "after the run"' in err
