"""Values out of range are refused where they come in: config, environment, Deferred."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from queuey_core import Backoff
from queuey_core import ConfigError
from queuey_core import Deferred
from queuey_core import QueueConfig
from queuey_core.backends.rabbitmq import topology
from queuey_core.limits import MAX_DELAY_MS
from queuey_core.limits import MAX_DELAY_SECONDS
from queuey_core.limits import MAX_QUEUE_NAME_BYTES
from queuey_core.limits import MAX_SHORT_STRING_BYTES
from queuey_core.limits import check_delay
from queuey_core.limits import check_positive
from queuey_core.settings import load_settings

SECRET = "S3cr3tPw!#1"


def refusal(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    message = str(caught.value)
    assert "\n" not in message, "one line"
    return message


# -- the limits themselves -------------------------------------------------------------


def test_the_limits_match_the_delay_ladder() -> None:
    assert MAX_DELAY_MS == topology.MAX_DELAY_MS
    assert MAX_DELAY_SECONDS * 86_400 > 0
    assert topology.delay_ms(MAX_DELAY_SECONDS) == MAX_DELAY_MS, "the longest delay fits"


@pytest.mark.parametrize(
    ("seconds", "problem"),
    [
        (-1, "cannot be negative"),
        (math.nan, "not a number"),
        (math.inf, "must be finite"),
        (-math.inf, "must be finite"),
        (MAX_DELAY_SECONDS + 0.001, "longer than the broker can hold"),
        (86_400_000, "1000 days is longer than the broker can hold"),
        ("10", "must be a number of seconds"),
        (True, "must be a number of seconds"),
    ],
)
def test_check_delay_refuses_what_the_ladder_cannot_hold(seconds: object, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        check_delay(seconds, "--delay")  # type: ignore[arg-type]


def test_check_delay_takes_everything_from_0_to_the_top_of_the_ladder() -> None:
    assert check_delay(0, "d") == 0.0
    assert check_delay(0.0001, "d") == 0.0001
    assert check_delay(MAX_DELAY_SECONDS, "d") == MAX_DELAY_SECONDS


@pytest.mark.parametrize("seconds", [0, -1, math.nan, math.inf])
def test_check_positive_refuses_zero_and_non_finite(seconds: float) -> None:
    with pytest.raises(ValueError, match="timeout"):
        check_positive(seconds, "timeout")


@pytest.mark.parametrize("delay", [math.nan, math.inf, -1, MAX_DELAY_SECONDS * 2])
def test_a_deferral_the_broker_cannot_hold_is_refused_in_the_handler(delay: float) -> None:
    with pytest.raises(ValueError, match="a deferral's delay"):
        Deferred(delay, "later")


def test_a_deferral_in_range_keeps_its_delay_and_reason() -> None:
    d = Deferred(30, "rate limit")
    assert (d.delay, d.reason) == (30.0, "rate limit")
    assert Deferred(MAX_DELAY_SECONDS).delay == MAX_DELAY_SECONDS


@pytest.mark.parametrize(
    "kwargs", [{"initial": math.nan}, {"max": math.inf}, {"multiplier": math.nan}]
)
def test_a_backoff_with_a_non_finite_number_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="finite"):
        Backoff(**kwargs)  # type: ignore[arg-type]


def test_a_queue_name_leaves_room_for_the_delay_bits_in_a_routing_key() -> None:
    longest = "q" * MAX_QUEUE_NAME_BYTES
    key = topology.delay_routing_key(MAX_DELAY_MS, QueueConfig(longest).name)
    assert len(key.encode()) == MAX_SHORT_STRING_BYTES
    with pytest.raises(ConfigError, match=f"at most {MAX_QUEUE_NAME_BYTES} characters"):
        QueueConfig(longest + "q")


@pytest.mark.parametrize("timeout", [0, math.nan, math.inf])
def test_a_queue_job_timeout_must_be_positive_and_finite(timeout: float) -> None:
    with pytest.raises(ConfigError, match="job_timeout"):
        QueueConfig("q", job_timeout=timeout)


# -- the configuration file ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ('[queues.q]\nretry = { initial = "1000d", max = "1000d" }', "retry.initial", "1000 days"),
        ('[queues.q]\nretry = { max = "900d" }', "retry.max", "longer than the broker"),
        ("[queues.q]\nretry = { initial = nan }", "retry.initial", "finite"),
        ("[queues.q]\nretry = { max = inf }", "retry.max", "finite"),
        ('[queues.q]\nretry = { initial = "0s" }', "retry.initial", "more than 0"),
        ('[queues.q]\nretry = { initial = "2m", max = "1m" }', "retry", "below initial"),
        ("[queues.q]\nretry = { multiplier = inf }", "retry.multiplier", "finite"),
        ("[queues.q]\nprefetch = 0", "queues.q.prefetch", "greater than or equal to 1"),
        ("[queues.q]\nprefetch = 70000", "queues.q.prefetch", "less than or equal to 65535"),
        ("[queues.q]\nmax_priority = 256", "queues.q.max_priority", "255"),
        ('[queues.q]\njob_timeout = "0s"', "queues.q.job_timeout", "more than 0"),
        ('[worker]\njob_timeout = "0s"', "worker.job_timeout", "more than 0"),
        ("[worker]\njob_timeout = inf", "worker.job_timeout", "finite"),
        ("[worker]\nshutdown_timeout = 0", "worker.shutdown_timeout", "more than 0"),
        ("[worker]\ntimeout_grace = nan", "worker.timeout_grace", "finite"),
        ("[broker]\nheartbeat = 70000", "broker.heartbeat", "65535"),
        ("[broker]\nconnect_timeout = 0", "broker.connect_timeout", "more than 0"),
    ],
)
def test_values_out_of_range_are_refused_naming_the_file_and_key(
    write_config: Callable[[str], Path], text: str, key: str, problem: str
) -> None:
    path = write_config(text)
    message = refusal(path)
    assert message.startswith(f"{path}: "), message
    assert key in message
    assert problem in message


def test_values_at_the_limits_are_taken(write_config: Callable[[str], Path]) -> None:
    path = write_config(
        "[queues.q]\nprefetch = 1\nmax_priority = 255\n"
        f"retry = {{ initial = 0.001, max = {MAX_DELAY_SECONDS} }}\n"
    )
    settings, _ = load_settings(path)
    assert settings.queue_set()["q"].retry.backoff.max == MAX_DELAY_SECONDS


def test_a_password_with_a_hash_is_refused_without_quoting_it(
    write_config: Callable[[str], Path],
) -> None:
    message = refusal(write_config(f'[broker]\nurl = "amqp://guest:{SECRET}@127.0.0.1:5672/%2F"\n'))
    assert "broker.url" in message
    assert "percent-encode" in message
    assert "S3cr3t" not in message


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://h:15672", "must start with http:// or https://"),
        ("http://", "no host"),
        (f"http://admin:{SECRET}@h:15672", "percent-encode"),
    ],
)
def test_a_bad_management_url_is_refused_without_quoting_it(
    write_config: Callable[[str], Path], url: str, problem: str
) -> None:
    message = refusal(write_config(f'[broker]\nmanagement_url = "{url}"\n'))
    assert "broker.management_url" in message
    assert problem in message
    assert "S3cr3t" not in message


def test_redacted_settings_mask_both_passwords(write_config: Callable[[str], Path]) -> None:
    path = write_config(
        '[broker]\nurl = "amqps://app:br%23oker@rabbit:5671/prod"\n'
        'management_url = "https://admin:m%2Fgmt@rabbit:15671"\n'
    )
    settings, _ = load_settings(path)
    shown = settings.redacted()["broker"]
    assert shown["url"] == "amqps://app:***@rabbit:5671/prod"
    assert shown["management_url"] == "https://admin:***@rabbit:15671"


# -- the environment -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("QUEUEY_WORKER__JOB_TIMEOUT", "0", "QUEUEY_WORKER__JOB_TIMEOUT: worker.job_timeout: "),
        (
            "QUEUEY_QUEUES__DEFAULT__RETRY__INITIAL",
            "1000d",
            "QUEUEY_QUEUES__DEFAULT__RETRY__INITIAL: queues.default.retry.initial: ",
        ),
        ("QUEUEY_QUEUES__DEFAULT__PREFETCH", "0", "QUEUEY_QUEUES__DEFAULT__PREFETCH: "),
        ("QUEUEY_QUEUES", "notjson", "QUEUEY_QUEUES: not valid JSON"),
        ("QUEUEY_WORKER", "{bad", "QUEUEY_WORKER: not valid JSON"),
        ("QUEUEY_BROKER__URL", f"amqp://guest:{SECRET}@h/", "QUEUEY_BROKER__URL: broker.url: "),
    ],
)
def test_a_bad_environment_variable_is_named_not_the_file(
    write_config: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    value: str,
    expected: str,
) -> None:
    path = write_config("[queues.default]\nprefetch = 4\n")
    monkeypatch.setenv(name, value)
    message = refusal(path)
    assert message.startswith(expected), message
    assert str(path) not in message, "the file is not to blame"
    assert "S3cr3t" not in message


def test_file_and_environment_problems_are_each_named(
    write_config: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config("[queues.default]\nprefetch = 0\n")
    monkeypatch.setenv("QUEUEY_WORKER__SHUTDOWN_TIMEOUT", "0")
    message = refusal(path)
    assert f"{path}: queues.default.prefetch" in message
    assert "QUEUEY_WORKER__SHUTDOWN_TIMEOUT: worker.shutdown_timeout" in message


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "queuey.toml"
    path.write_bytes(b"[worker]\n# caf\xe9\n")
    assert refusal(path) == f"{path}: not UTF-8 text (byte 14)"


def test_a_directory_given_as_config_file_is_one_line(tmp_path: Path) -> None:
    assert refusal(tmp_path) == f"{tmp_path}: is a directory, not a config file"
