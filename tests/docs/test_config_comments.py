"""The shipped configuration's comments say what its settings do.

queuey.toml and the overlays in config/ are copied into deployments with their comments,
which readers trust over the docs: a comment that promised 30 min where the setting
said 45, or "about 30s" for a retry that jitter can halve, is a bug of the file.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from queuey_core.backends.sqlite import parse_url
from queuey_core.settings.loading import load_settings

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "queuey.toml"
OVERLAYS = sorted((REPO / "config").glob("*.toml"))


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_each_overlay_loads_over_queuey_toml_as_its_comment_says(overlay: Path) -> None:
    text = overlay.read_text()
    assert "merged over queuey.toml" in text.lower(), "each overlay says what it overlays"
    for line in re.findall(r"^#\s+(?:QUEUEY_CONFIG=|queuey --config)(.*)$", text, re.M):
        assert f"config/{overlay.name}" in line, line
    settings, sources = load_settings([BASE, overlay])
    assert sources == [BASE, overlay]
    assert settings.queue_set()  # every queue of the overlay still builds


def test_the_embedded_overlays_options_are_shown_at_their_defaults() -> None:
    text = (REPO / "config" / "embedded.toml").read_text()
    assert "at their defaults" in comments(REPO / "config" / "embedded.toml")
    options = re.findall(r"^#\s+\?(\w+)=(\S+)\s", text, re.MULTILINE)
    assert {key for key, _ in options} == {"lease", "poll", "busy_timeout", "synchronous"}
    default = parse_url("sqlite:///q.db")
    for key, value in options:
        assert parse_url(f"sqlite:///q.db?{key}={value}") == default, f"{key}={value}"
    settings, _ = load_settings([BASE, REPO / "config" / "embedded.toml"])
    assert settings.broker.url.get_secret_value() == "sqlite:///queuey.db"


def _retry_ranges(queue: str) -> list[tuple[float, float]]:
    """The shortest and longest wait before each retry of ``queue`` in queuey.toml."""
    settings, _ = load_settings([BASE])
    policy = settings.queue_set()[queue].retry
    backoff = policy.backoff
    return [(backoff.delay(n, 0.0), backoff.delay(n, 1.0)) for n in range(1, policy.max_attempts)]


def comments(path: Path) -> str:
    """The comments of ``path`` as one line of prose (a phrase may wrap)."""
    lines = re.findall(r"^\s*#\s?(.*)$", path.read_text(), re.MULTILINE)
    return " ".join(" ".join(lines).split())


def test_queuey_tomls_queue_comments_are_its_settings() -> None:
    text = comments(BASE)
    settings, _ = load_settings([BASE])
    queues = settings.queue_set()
    prefetch = " + ".join(str(queues[name].prefetch) for name in ("alpha", "beta"))
    assert f"prefetch ({prefetch} here)" in text
    assert queues["alpha"].retry.max_attempts == 3
    assert "dead-lettered to alpha.dlq after its third attempt" in text
    assert _retry_ranges("alpha")[:2] == [(0.25, 0.5), (0.5, 1.0)]
    assert "retried after 0.25-0.5s, then 0.5-1s (jitter)" in text
    assert _retry_ranges("beta") == [(15, 30), (30, 60), (60, 120), (120, 240)]
    assert "Slow retries (15-30s, then 30s-1m, 1-2m, 2-4m: jitter), then beta.dlq" in text
    assert queues["alpha"].max_priority == 10
    assert "priorities 0 to 10" in text


def test_the_brokers_consumer_timeout_outlasts_the_longest_job() -> None:
    path = REPO / "config" / "rabbitmq.conf"
    found = re.search(r"^consumer_timeout = (\d+)$", path.read_text(), re.MULTILINE)
    assert found is not None
    timeout_ms = int(found.group(1))
    assert f": {timeout_ms // 60_000} min, in ms" in comments(path)
    longest = 0.0
    for overlay in [None, *OVERLAYS]:
        settings, _ = load_settings([BASE] if overlay is None else [BASE, overlay])
        worker = settings.worker
        timeouts = [q.job_timeout or worker.job_timeout for q in settings.queue_set().values()]
        known = [t for t in [*timeouts, worker.job_timeout] if t is not None]
        longest = max(longest, *known)
        assert timeout_ms / 1000 > longest + worker.timeout_grace, overlay
    assert longest == 30 * 60
    assert "beta's 30 min in queuey.toml" in comments(path)


def test_the_configuration_pages_example_is_the_shipped_queuey_toml() -> None:
    page = (REPO / "docs" / "configuration.md").read_text()
    assert "These are the shipped `queuey.toml`'s two example queues" in page
    block = re.search(r"```toml\n(.*?)```", page, re.DOTALL)
    assert block is not None
    shown = tomllib.loads(block.group(1))
    shipped = tomllib.loads(BASE.read_text())
    assert shown["queues"] == shipped["queues"]
    for table in ("broker", "worker"):
        for key, value in shown[table].items():
            assert shipped[table].get(key, value) == value, f"{table}.{key}"
    overlays = {p.name for p in OVERLAYS} | {"rabbitmq.conf"}
    assert overlays == {p.name for p in (REPO / "config").iterdir()}
    assert "one for the embedded backend" in " ".join(page.split())
