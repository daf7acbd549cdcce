"""A broker URL list (a RabbitMQ cluster): parsing, validation, redaction, shuffling and
the order in which a connection tries the nodes. No broker needed."""

from __future__ import annotations

import collections
import json
import random
from pathlib import Path

import pika
import pytest
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_core import ConfigError
from queuey_core.backends.rabbitmq import RabbitMQBackend
from queuey_core.backends.rabbitmq.nodes import Nodes
from queuey_core.backends.rabbitmq.nodes import Picker
from queuey_core.backends.rabbitmq.nodes import Target
from queuey_core.backends.rabbitmq.nodes import as_urls
from queuey_core.settings import load_settings
from queuey_core.urls import check_urls
from queuey_core.urls import redact_all
from queuey_core.urls import split_urls

#: Never printed by queuey on its own: finding it anywhere is a leak.
SECRET = "Zx9,s3cr%23t"
A = f"amqp://guest:{SECRET}@rabbit-a:5672/prod"
B = f"amqp://guest:{SECRET}@rabbit-b:5672/prod"
C = f"amqp://guest:{SECRET}@rabbit-c:5672/prod"


def settings_of(tmp_path: Path, url_line: str) -> object:
    path = tmp_path / "queuey.toml"
    path.write_text(f"[broker]\n{url_line}\n")
    return load_settings(path)[0]


# -- parsing ---------------------------------------------------------------------------


def test_a_comma_separated_list_splits_only_where_a_url_starts() -> None:
    # The password holds a comma: it is not a separator, since no scheme:// follows it.
    assert split_urls(f"{A},{B}") == [A, B]
    assert split_urls(f" {A} ,  {B} , {C} ") == [A, B, C]
    assert split_urls(f"{A},,{B},") == [A, B], "stray commas are dropped"
    assert split_urls(A) == [A]
    assert split_urls(" , ") == []


def test_a_toml_array_gives_one_url_per_node(tmp_path: Path) -> None:
    settings = settings_of(tmp_path, f'url = ["{A}", "{B}", "{C}"]')
    assert settings.broker.urls() == [A, B, C]  # type: ignore[attr-defined]


def test_the_environment_takes_the_same_list_separated_by_commas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUEUEY_BROKER__URL", f"{A}, {B}")
    settings = settings_of(tmp_path, 'url = "amqp://guest:guest@elsewhere/prod"')
    assert settings.broker.urls() == [A, B]  # type: ignore[attr-defined]


def test_one_url_is_still_one_url(tmp_path: Path) -> None:
    settings = settings_of(tmp_path, f'url = "{A}"')
    assert settings.broker.urls() == [A]  # type: ignore[attr-defined]
    assert settings.redacted()["broker"]["url"] == "amqp://guest:***@rabbit-a:5672/prod"  # type: ignore[attr-defined]


# -- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("url = []", "give at least one URL"),
        (f'url = ["{A}", ""]', "URL 2 of 2 is empty"),
        (f'url = ["{A}", 5]', "must be a URL or a list of URLs"),
        (f'url = ["{A}", "rabbit-b:5672"]', "URL 2 of 2: must be a URL starting with"),
        (f'url = ["{A}", "http://rabbit-b"]', "URL 2 of 2: must start with amqp:// or amqps://"),
        (f'url = ["{A}", "amqp://guest:{SECRET}@rabbit-b:x/prod"]', "URL 2 of 2: has a port"),
        (f'url = ["{A}", "amqps://guest:{SECRET}@rabbit-b/prod"]', "every node is reached"),
        (f'url = ["{A}", "amqp://guest:{SECRET}@rabbit-b/test"]', "another virtual host"),
        (f'url = ["{A}", "{B}", "{A}"]', "URL 3 of 3 repeats an earlier one"),
    ],
)
def test_every_url_of_a_list_is_checked_and_no_message_quotes_a_password(
    tmp_path: Path, line: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_of(tmp_path, line)
    message = str(caught.value)
    assert problem in message, message
    assert "broker.url" in message
    assert "Zx9" not in message, message
    assert "s3cr" not in message, message


def test_a_bad_url_in_the_environment_list_is_blamed_on_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUEUEY_BROKER__URL", f"{A},amqp://guest:{SECRET}@/prod")
    with pytest.raises(ConfigError) as caught:
        settings_of(tmp_path, "")
    assert str(caught.value).startswith("QUEUEY_BROKER__URL: broker.url: URL 2 of 2: has no host")
    assert "Zx9" not in str(caught.value)


def test_check_urls_takes_one_url_alone() -> None:
    check_urls([A], ("amqp", "amqps"))
    with pytest.raises(ValueError, match="give at least one URL"):
        check_urls([], ("amqp", "amqps"))


# -- redaction -------------------------------------------------------------------------


def test_settings_show_every_url_redacted(tmp_path: Path) -> None:
    settings = settings_of(tmp_path, f'url = ["{A}", "{B}"]')
    shown = settings.redacted()["broker"]["url"]  # type: ignore[attr-defined]
    assert shown == ["amqp://guest:***@rabbit-a:5672/prod", "amqp://guest:***@rabbit-b:5672/prod"]


def test_config_show_prints_the_list_without_a_password(tmp_path: Path) -> None:
    path = tmp_path / "queuey.toml"
    path.write_text(f'[broker]\nurl = ["{A}", "{B}", "{C}"]\n')
    done = CliRunner().invoke(app, ["--config", str(path), "config", "show"])
    assert done.exit_code == 0, done.output
    assert "Zx9" not in done.output
    assert "s3cr" not in done.output
    assert json.loads(done.stdout)["broker"]["url"] == [
        f"amqp://guest:***@rabbit-{n}:5672/prod" for n in "abc"
    ]


def test_a_bad_list_is_one_line_and_exit_2_without_a_password(tmp_path: Path) -> None:
    path = tmp_path / "queuey.toml"
    path.write_text(f'[broker]\nurl = ["{A}", "amqps://guest:{SECRET}@rabbit-b/prod"]\n')
    done = CliRunner().invoke(app, ["--config", str(path), "queues"])
    assert done.exit_code == 2, done.output
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "URL 2 of 2 starts with amqps://" in done.stderr
    assert "Zx9" not in done.output + done.stderr


def test_messages_name_every_node_redacted() -> None:
    assert redact_all([A]) == "amqp://guest:***@rabbit-a:5672/prod"
    assert redact_all([A, B]) == (
        "any of amqp://guest:***@rabbit-a:5672/prod, amqp://guest:***@rabbit-b:5672/prod"
    )


def test_the_backend_refuses_a_bad_url_of_a_list_before_connecting() -> None:
    with pytest.raises(ConfigError) as caught:
        RabbitMQBackend([A, f"amqp://guest:{SECRET}@rabbit-b:notaport/prod"], connect_timeout=1)
    assert "invalid broker URL" in str(caught.value)
    assert "Zx9" not in str(caught.value)
    with pytest.raises(ConfigError, match="empty"):
        as_urls([A, ""])


# -- shuffling and the order of attempts --------------------------------------------------


def test_each_process_shuffles_the_list_so_a_fleet_spreads_over_the_nodes() -> None:
    firsts = collections.Counter(
        Nodes([A, B, C], rng=random.Random(seed)).order[0] for seed in range(300)
    )
    assert set(firsts) == {0, 1, 2}
    assert min(firsts.values()) >= 60, f"each node should come first about 100 times: {firsts}"
    for seed in range(20):
        assert sorted(Nodes([A, B, C], rng=random.Random(seed)).order) == [0, 1, 2]


def test_without_shuffle_the_order_is_the_lists() -> None:
    assert Nodes([A, B, C], shuffle=False).order == [0, 1, 2]


def picker(nodes: Nodes) -> Picker:
    return nodes.picker(pika.URLParameters)


def host(target: Target) -> str:
    """``a``, ``b`` or ``c``: which node a target is."""
    return str(target.params.host).removeprefix("rabbit-")


def test_a_connection_tries_the_next_node_at_once_and_backs_off_after_a_round() -> None:
    p = picker(Nodes([A, B, C], shuffle=False))
    assert host(p.current()) == "a"
    assert p.failed() is False, "B is untried: no back-off yet"
    assert host(p.current()) == "b"
    assert p.failed() is False
    assert host(p.current()) == "c"
    assert p.failed() is True, "every node tried: back off"
    assert host(p.current()) == "a", "the next round starts over"
    assert "***" in p.current().where
    assert "Zx9" not in p.current().where


def test_with_one_node_every_failure_backs_off_as_before() -> None:
    p = picker(Nodes([A]))
    for _ in range(3):
        assert host(p.current()) == "a"
        assert p.failed() is True


def test_the_node_one_connection_reached_is_where_the_others_start() -> None:
    nodes = Nodes([A, B, C], shuffle=False)
    consumer, publisher = picker(nodes), picker(nodes)
    consumer.failed()  # A is gone
    assert host(consumer.current()) == "b"
    consumer.opened()
    assert host(publisher.current()) == "b", "the publisher skips the node found gone"
    assert [host(t) for t in publisher.in_order()] == ["b", "c", "a"]


def test_a_failure_of_a_node_no_longer_preferred_does_not_move_the_others() -> None:
    nodes = Nodes([A, B, C], shuffle=False)
    slow, fast = picker(nodes), picker(nodes)
    assert host(slow.current()) == "a"  # slow connects to A ...
    fast.failed()
    fast.opened()  # ... fast finds A gone and reaches B ...
    slow.failed()  # ... and slow loses A later
    assert nodes.preferred() == 1, "B stays preferred"
    assert host(slow.current()) == "b"


@pytest.mark.parametrize(
    "value",
    [
        "amqp://guest:guest@rabbit-a/prod,rabbit-b:5672",  # the second lost its scheme://
        "amqp://guest:guest@rabbit-a,rabbit-b/prod",
    ],
)
def test_a_comma_after_the_user_info_is_refused_not_read_as_a_virtual_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("QUEUEY_BROKER__URL", value)
    with pytest.raises(ConfigError, match="start every URL of a list with its scheme://"):
        settings_of(tmp_path, "")
