"""Redacting URLs: a password never shows, whatever it holds and however broken the URL."""

from __future__ import annotations

import re

import pytest
from hypothesis import example
from hypothesis import given
from hypothesis import strategies as st

from queuey_core.urls import REDACTED
from queuey_core.urls import check_url
from queuey_core.urls import redact

#: A user name as people write them: no ":" (it ends the name) and no "@", "/", "?", "#".
users = st.text(st.characters(exclude_characters=":@/?#"), max_size=12)
#: A password: anything at all.
passwords = st.text(min_size=1, max_size=40)
#: What follows the last "@": a host, maybe a port, path, query and fragment; no "@".
rests = st.text(st.characters(exclude_characters="@"), max_size=40)


@given(users, passwords, rests)
@example("guest", "S3cr3tPw!#1", "127.0.0.1:5672/%2F")
@example("guest", "a/b?c#d@e%41:f", "127.0.0.1:5672/%2F")
@example("", "@@@", "h")
def test_the_password_never_shows_whatever_it_holds(user: str, password: str, rest: str) -> None:
    shown = redact(f"amqp://{user}:{password}@{rest}")
    assert shown in {f"amqp://{user}:***@{rest}", f"amqp://***@{rest}"}, shown
    if password not in f"amqp://{user}:***@{rest}":
        assert password not in shown


@given(st.text(max_size=80))
def test_redact_never_raises_on_anything(text: str) -> None:
    assert isinstance(redact(text), str)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("amqp://guest:guest@127.0.0.1:5672/%2F", "amqp://guest:***@127.0.0.1:5672/%2F"),
        # urlsplit reads "#1@127..." as a fragment and would print the password whole.
        ("amqp://guest:S3cr3tPw!#1@127.0.0.1:5672/%2F", "amqp://***@127.0.0.1:5672/%2F"),
        ("amqps://u:p/w?x@host:5671/v", "amqps://***@host:5671/v"),
        ("amqp://guest:p%40ss:w@h/", "amqp://guest:***@h/"),
        ("amqp://guest@h/", "amqp://guest@h/"),
        ("amqp://127.0.0.1:5672/%2F", "amqp://127.0.0.1:5672/%2F"),
        ("http://[::1]:15672", "http://[::1]:15672"),
        # No "@": a password that lost its host reads as a port, which is not a number.
        ("amqp://guest:S3cret", REDACTED),
        # No scheme to anchor on: nothing can be told apart.
        ("guest:S3cret@127.0.0.1", REDACTED),
        ("S3cret", REDACTED),
    ],
)
def test_redact_examples(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_redact_takes_anything() -> None:
    assert redact(None) == REDACTED
    assert redact(b"amqp://guest:pw@h") == REDACTED


def _problem(url: str) -> str:
    try:
        check_url(url, ("amqp", "amqps"))
    except ValueError as exc:
        return str(exc)
    return ""


@given(passwords)
def test_check_url_never_quotes_the_password(password: str) -> None:
    marked = f"\N{SNOWMAN}{password}"  # a character no message of check_url holds
    assert "\N{SNOWMAN}" not in _problem(f"amqp://guest:{marked}@127.0.0.1:5672/%2F")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("127.0.0.1:5672", "must be a URL starting with amqp:// or amqps://"),
        ("http://127.0.0.1", "not http://"),
        ("amqp://guest:pw#1@h/", "percent-encode"),
        ("amqp://guest:pw@h/v@x", "percent-encode"),
        ("amqp://guest:pw@h /", "spaces or control characters"),
        ("amqp:///%2F", "no host"),
        ("amqp://guest:pw@h:99999/", "port"),
        ("amqp://guest:pw@h:abc/", "port"),
        ("amqp://guest:pw@[::1/", "IPv6"),
    ],
)
def test_check_url_refuses_what_queuey_could_not_use(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)) as caught:
        check_url(url, ("amqp", "amqps"))
    assert "pw" not in str(caught.value), "the message never quotes the URL"


@pytest.mark.parametrize(
    "url",
    [
        "amqp://guest:guest@127.0.0.1:5672/%2F",
        "AMQPS://u:p%23w@rabbit.example.com:5671/prod",
        "amqp://[::1]:5672/",
        "amqp://localhost",
    ],
)
def test_check_url_takes_good_urls(url: str) -> None:
    check_url(url, ("amqp", "amqps"))
