"""``queuey queues`` shows, per queue, the limits that bind its jobs, the jobs they hold
out of it (parked) and their keys in use; on the embedded file, in process (CliRunner's
stdout is not a terminal: the piped output, keys as notes on stderr)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from queuey_core.errors import LimitStateError
from queuey_core.flow import limit_listing
from queuey_core.flow.limit_setup import limit_book
from queuey_core.flow.limit_setup import limit_state_for
from queuey_core.flow.limit_setup import state_url
from queuey_core.flow.limit_state import Claim
from queuey_core.settings import load_settings
from tests.cli.conftest import run_with_config

CONFIG = """
[broker]
url = "sqlite:///{db}"

[queues.alpha]
prefetch = 4

[queues.beta]
prefetch = 1

[queues.gamma]
prefetch = 1

[limits.mutex]
concurrency = 1
key = "account"
jobs = ["greet"]  # the example plugin's greet, a job of queue alpha

[limits.slow]
rate = "1/min"
queues = ["beta"]
"""


def _one_running_one_parked(config: Path) -> None:
    settings, _ = load_settings(str(config))
    book = limit_book(settings)
    state = limit_state_for(state_url(settings), book)
    try:
        for job in ("j1", "j2"):
            state.acquire(
                job,
                (Claim(book.by_name["mutex"], "acme"),),
                holder="w",
                now_ms=0,
                queue="alpha",
                priority=0,
                enqueued_at=0,
                body=lambda: b"{}",
            )
    finally:
        state.close()


def test_each_queue_shows_its_limits_held_jobs_and_keys_in_use(
    tmp_path: Path, write_config: Callable[[str], Path]
) -> None:
    config = write_config(CONFIG.format(db=tmp_path / "queuey.db"))
    _one_running_one_parked(config)

    code, out, err = run_with_config(config, "queues", "--json")

    assert code == 0, err
    queues = {q["name"]: q for q in json.loads(out)["queues"]}
    alpha = queues["alpha"]
    assert alpha["limits"] == ["mutex"], "bound through its job type greet"
    assert alpha["held_by_limits"] == 1, "one job parked behind the mutex"
    [key] = alpha["limited_keys"]
    assert (key["limit"], key["key"], key["running"], key["parked"]) == ("mutex", "acme", 1, 1)
    assert queues["beta"]["limits"] == ["slow"], "bound by its name"
    assert queues["beta"]["held_by_limits"] == 0
    assert queues["beta"]["limited_keys"] == [], "no key of it in use"
    assert queues["gamma"]["limits"] == [], "no limit binds gamma"
    assert json.loads(out)["limits_error"] is None

    code, out, err = run_with_config(config, "queues")

    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split("\t")[-1] == "held_by_limits", "a column of jobs held by limits"
    assert [line.split("\t")[-1] for line in lines[1:]] == ["1", "0", "0"]
    assert (
        "limited key: queue alpha, limit mutex, key 'acme': 1 running, 0 let go, 1 parked" in err
    ), "the keys in use, on stderr: stdout stays a record a queue"


def test_limits_that_cannot_be_read_are_one_note_and_the_counts_still_show(
    tmp_path: Path, write_config: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(CONFIG.format(db=tmp_path / "queuey.db"))

    def out_of_reach(url: str, book: object) -> None:
        raise LimitStateError(f"limits' state in {url}: database is locked")

    assert run_with_config(config, "enqueue", "greet", '{"name": "ada"}')[0] == 0
    monkeypatch.setattr(limit_listing, "limit_state_for", out_of_reach)

    code, out, err = run_with_config(config, "queues", "--json")

    assert code == 0, err
    found = json.loads(out)
    assert "database is locked" in found["limits_error"]
    assert found["queues"][0]["ready"] == 1, "the counts are there"
    assert {q["held_by_limits"] for q in found["queues"]} == {None}, "unknown, not 0"

    code, out, err = run_with_config(config, "queues")

    assert code == 0, err
    assert "limits: n/a (limits' state in" in err
    assert len(out.splitlines()) == 4, "the header and a line a queue"
