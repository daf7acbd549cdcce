"""``[schedules.NAME]`` in queuey.toml: what loads, and one line naming what does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from queuey_core import ConfigError
from queuey_core.handlers import Handler
from queuey_core.schedules import CatchUp
from queuey_core.schedules import Cron
from queuey_core.schedules import Every
from queuey_core.schedules import Schedule
from queuey_core.schedules import build_schedules
from queuey_core.schedules import job_models
from queuey_core.settings import load_settings
from tests.support import Greet
from tests.support import Ping
from tests.support import seed_queues

QUEUES = """
[queues."test.alpha"]
max_priority = 10
[queues."test.beta"]
"""

MODELS = job_models([Handler(Greet, lambda j, c: None), Handler(Ping, lambda j, c: None)])


def load(tmp_path: Path, text: str) -> list[Schedule]:
    path = tmp_path / "queuey.toml"
    path.write_text(QUEUES + text)
    settings, _ = load_settings(path)
    return build_schedules(settings.schedules, MODELS, settings.queue_set())


def test_schedules_load_with_their_triggers_and_payloads(tmp_path: Path) -> None:
    built = load(
        tmp_path,
        """
[schedules.greet-ada]
job = "test.greet"
payload = { name = "ada" }
cron = "*/5 * * * *"
timezone = "Europe/Paris"
priority = 3

[schedules.ping]
job = "test.ping"
payload = { seq = 1 }
every = "90s"
catch_up = "all"
""",
    )
    greet, ping = built
    assert greet == Schedule(
        "greet-ada", Greet(name="ada"), Cron("*/5 * * * *", "Europe/Paris"), 3, CatchUp.LATEST
    )
    assert ping == Schedule("ping", Ping(seq=1), Every(90), None, CatchUp.ALL)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            'job = "test.greet"\npayload = { nam = "ada" }\nevery = "1m"',
            "schedules.broken.payload: does not fit job type 'test.greet': name: Field required",
        ),
        (
            'job = "test.nope"\nevery = "1m"',
            "schedules.broken.job: unknown job type 'test.nope' (known: test.greet, test.ping)",
        ),
        (
            'job = "test.ping"\npayload = { seq = 1 }\nevery = "1m"\npriority = 3',
            "schedules.broken: priority 3 is not allowed on queue 'test.beta'",
        ),
        (
            'job = "test.greet"\npayload = { name = "ada" }\nevery = "1m"\ncron = "* * * * *"',
            "schedules.broken: give either cron or every",
        ),
        ('job = "test.greet"\npayload = { name = "ada" }', "give either cron or every"),
        (
            'job = "test.greet"\npayload = { name = "ada" }\ncron = "*/5 * * *"',
            "schedules.broken: cron '*/5 * * *' must have five fields",
        ),
        (
            'job = "test.greet"\npayload = { name = "ada" }\ncron = "0 3 * * *"\n'
            'timezone = "Paris"',
            "unknown time zone 'Paris'",
        ),
        (
            'job = "test.greet"\npayload = { name = "ada" }\nevery = "1m"\ntimezone = "UTC"',
            "timezone applies to cron only",
        ),
        (
            'job = "test.greet"\npayload = { name = "ada" }\nevery = "500ms"',
            "at least 1s",
        ),
        (
            'job = "test.greet"\npayload = { name = "ada" }\nevery = "1m"\ncatch_up = "some"',
            "schedules.broken.catch_up: Input should be 'none', 'latest' or 'all'",
        ),
        (
            'job = "test.greet"\npayload = { name = "ada" }\nevery = "1m"\ncatchup = "all"',
            "schedules.broken.catchup: unknown key",
        ),
    ],
)
def test_a_broken_schedule_is_one_line_naming_it(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, f"[schedules.broken]\n{table}\n")
    text = str(caught.value)
    assert message in text, text
    assert "\n" not in text


def test_a_schedule_name_must_be_plain(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="schedule name 'a b'"):
        load(
            tmp_path, '[schedules."a b"]\njob = "test.ping"\npayload = { seq = 1 }\nevery = "1m"\n'
        )


def test_no_schedules_is_fine(tmp_path: Path) -> None:
    assert load(tmp_path, "") == []
    assert seed_queues()  # the queues the jobs above are bound to
