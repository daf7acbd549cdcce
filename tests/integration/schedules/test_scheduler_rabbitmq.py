"""Schedulers on a real RabbitMQ: the election, the stored ticks, and hand-overs between
real ``queuey scheduler`` processes (killed, frozen), counting firings by job id.

Everything runs in the virtual host of ``QUEUEY_TEST_AMQP_URL``.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_core import Envelope
from queuey_core.backends.rabbitmq.election import LEADER_QUEUE
from queuey_core.backends.rabbitmq.election import RabbitElection
from queuey_core.backends.rabbitmq.schedule_state import RabbitScheduleState
from queuey_core.backends.rabbitmq.schedule_state import state_queue
from queuey_core.schedules import firing_id
from tests.conftest import require_broker
from tests.harness import AMQP_URL
from tests.harness import VHOST
from tests.integration.broker import channel
from tests.integration.broker import rabbitmqctl
from tests.integration.broker import scratch_queue
from tests.integration.broker import unique
from tests.integration.observability.test_observability import check
from tests.integration.observability.test_observability import sample
from tests.integration.observability.test_observability import scrape
from tests.integration.processes import JsonLogProcess
from tests.integration.processes import module_command

pytestmark = pytest.mark.integration


def wait_until(cond: Any, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: never happened within {timeout}s")
        time.sleep(0.01)


def delete(*queues: str) -> None:
    with channel() as ch:
        for q in queues:
            ch.queue_delete(q)


def close_connection_of(candidate: str) -> None:
    """Close one connection abruptly from the broker's side (CONNECTION_FORCED)."""
    listing = rabbitmqctl("-q", "list_connections", "-p", VHOST, "pid", "client_properties")
    [pid] = [line.split("\t")[0] for line in listing.splitlines() if candidate in line]
    rabbitmqctl("close_connection", pid, "scheduler election test")


# -- in process ------------------------------------------------------------------------


@pytest.fixture
def leader_queue() -> Iterator[str]:
    with scratch_queue("it.sched.leader") as name:
        yield name


def test_the_token_moves_to_the_waiting_candidate_when_the_leaders_connection_dies(
    leader_queue: str,
) -> None:
    a = RabbitElection(AMQP_URL, heartbeat=2, queue=leader_queue)
    b = RabbitElection(AMQP_URL, heartbeat=2, queue=leader_queue)
    changes = threading.Event()
    try:
        a.start(changes.set)
        wait_until(a.is_leader, what="the first candidate leads")
        b.start(changes.set)
        assert a.confirm()
        assert not b.confirm(), "only one leader"
        assert not b.is_leader()

        close_connection_of(a.name)
        started = time.monotonic()
        wait_until(b.is_leader, timeout=5, what="the second candidate takes over")
        took = time.monotonic() - started
        assert took < 3, f"hand-over took {took:.2f}s"
        assert b.confirm()
        time.sleep(1.0)  # the first one reconnects (its link recovers) and waits in line
        assert not a.is_leader()
        assert not a.confirm()

        b.close()
        wait_until(a.is_leader, timeout=5, what="leadership comes back on a clean stop")
        assert a.error is None
    finally:
        a.close()
        b.close()


def test_the_last_fired_tick_is_kept_on_the_broker() -> None:
    require_broker()
    name = unique("it-sched-state")
    writer = RabbitScheduleState(AMQP_URL)
    reader = RabbitScheduleState(AMQP_URL)
    try:
        assert writer.last_fired([name]) == {}
        writer.record(name, 1_000)
        writer.record(name, 2_000)
        assert reader.last_fired([name]) == {name: 2_000}, "a new reader sees the latest"
        assert reader.last_fired([name]) == {name: 2_000}, "reading does not consume it"
        with channel() as ch:
            # A reader holds the old tick unacked while the leader records a new one;
            # given back, the old one sits beside the new for a moment: the latest wins.
            method, _props, body = ch.basic_get(state_queue(name), auto_ack=False)
            assert json.loads(body)["tick"] == 2_000
            writer.record(name, 3_000)
            ch.basic_nack(method.delivery_tag, requeue=True)
        assert reader.last_fired([name, f"{name}-never"]) == {name: 3_000}
    finally:
        writer.close()
        reader.close()
        delete(state_queue(name), state_queue(f"{name}-never"))


# -- real processes --------------------------------------------------------------------

SCHEDULE = "it-tick"
CONFIG = f"""
[broker]
url = "{AMQP_URL}"
heartbeat = 10

[queues.alpha]
prefetch = 4
max_priority = 10

# nap, the example handler of long jobs, is bound to beta
[queues.beta]
prefetch = 1

[scheduler]
heartbeat = 1

[schedules.{SCHEDULE}]
job = "greet"
payload = {{ name = "tick" }}
every = "1s"
"""


class Proc(JsonLogProcess):
    """``queuey ...`` as a subprocess, its JSON logs read as they come."""

    def __init__(self, config: Path, *args: str) -> None:
        super().__init__(module_command(config, *args))

    def seen(self, message: str) -> list[tuple[float, dict[str, Any]]]:
        return [(t, e) for t, e in self.timed() if message in e["message"]]

    def fired(self) -> list[int]:
        return [int(e["tick"]) for _, e in self.seen(f"schedule {SCHEDULE} fired")]

    def leads(self) -> bool:
        return bool(self.seen("now the leader"))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
        return self.proc.wait(15)


@pytest.fixture
def config(tmp_path: Path) -> Iterator[Path]:
    require_broker()
    queues = ("alpha", "alpha.dlq", "beta", "beta.dlq", LEADER_QUEUE, state_queue(SCHEDULE))
    delete(*queues)
    path = tmp_path / "queuey.toml"
    path.write_text(CONFIG)
    yield path
    delete(*queues)


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for p in started:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait(10)


def firings_in_queue() -> Counter[str]:
    """Every job id in the ``alpha`` queue, counted (taken with acks: the test's end)."""
    ids: Counter[str] = Counter()
    with channel() as ch:
        while True:
            method, _props, body = ch.basic_get("alpha", auto_ack=True)
            if method is None:
                return ids
            ids[str(Envelope.decode(body).job_id)] += 1


def each_tick_fired_once(*schedulers: Proc) -> None:
    """The queue holds one job for every tick from the first any of them fired to the
    last: none fired twice, none lost."""
    fired = [tick for p in schedulers for tick in p.fired()]
    ids = firings_in_queue()
    assert ids, "nothing fired"
    assert max(ids.values()) == 1, f"a tick fired twice: {ids.most_common(3)}"
    assert set(ids) == expected_ids(min(fired), max(fired)), "every tick fired, none lost"


def expected_ids(first: int, last: int) -> set[str]:
    return {str(firing_id(SCHEDULE, t)) for t in range(first, last + 1, 1000)}


def start_two(config: Path, procs: list[Proc]) -> tuple[Proc, Proc]:
    a = Proc(config, "scheduler")
    procs.append(a)
    wait_until(lambda: len(a.fired()) >= 1, what="the first scheduler fires")
    b = Proc(config, "scheduler")
    procs.append(b)
    wait_until(lambda: b.seen("standing for election"), what="the second one stands")
    count = len(a.fired())
    wait_until(lambda: len(a.fired()) >= count + 2, what="two more ticks")
    assert not b.leads()
    return a, b


def takes_over(b: Proc, *, since: float, timeout: float) -> float:
    """Wait until ``b`` leads: how long after ``since`` it said so."""
    wait_until(b.leads, timeout=timeout, what="the waiting scheduler takes over")
    return b.seen("now the leader")[0][0] - since


def test_killing_the_leading_process_hands_over_and_no_tick_fires_twice(
    config: Path, procs: list[Proc]
) -> None:
    a, b = start_two(config, procs)
    # Kill it just after a firing was recorded (the log comes after the record), as a
    # crash between the enqueue and the record is the one case that re-fires a tick.
    count = len(a.fired())
    wait_until(lambda: len(a.fired()) > count, what="a tick")
    a.proc.kill()
    took = takes_over(b, since=time.monotonic(), timeout=10)
    wait_until(lambda: len(b.fired()) >= 3, what="the new leader fires")
    assert b.stop() == 0

    each_tick_fired_once(a, b)
    assert took < 3, f"hand-over took {took:.2f}s"
    print(f"hand-over after SIGKILL: {took * 1000:.0f} ms")


def test_a_frozen_leader_is_replaced_and_fires_nothing_when_it_wakes(
    config: Path, procs: list[Proc]
) -> None:
    a, b = start_two(config, procs)
    a.proc.send_signal(signal.SIGSTOP)
    took = takes_over(b, since=time.monotonic(), timeout=15)
    wait_until(lambda: len(b.fired()) >= 2, what="the new leader fires")
    before = len(a.fired())
    a.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: a.seen("no longer the leader"), what="the old leader notices")
    wait_until(lambda: len(b.fired()) >= 4, what="two more ticks")
    assert len(a.fired()) == before, "the woken leader fired nothing"
    assert b.stop() == 0
    assert a.stop() == 0

    each_tick_fired_once(a, b)
    assert took < 8, f"hand-over after a freeze took {took:.2f}s (heartbeat 1s)"
    print(f"hand-over after SIGSTOP with a 1s heartbeat: {took:.1f} s")


def test_a_worker_with_the_scheduler_fires_and_runs_the_jobs(
    config: Path, procs: list[Proc]
) -> None:
    w = Proc(config, "worker", "--with-scheduler")
    procs.append(w)
    wait_until(lambda: len(w.fired()) >= 2, what="the worker's scheduler fires")
    fired_ids = {str(firing_id(SCHEDULE, t)) for t in w.fired()}
    wait_until(
        lambda: fired_ids <= {e.get("job_id") for _, e in w.seen("job succeeded")},
        what="the worker runs what its scheduler fired",
    )
    assert w.stop() == 0
    assert w.seen("stepped down as the active scheduler")
    assert uuid.UUID(next(iter(fired_ids))).version == 5


def metrics_base(proc: Proc) -> str:
    """Where a process started with ``--metrics-port 0`` serves its metrics."""
    wait_until(lambda: proc.seen("serving /metrics"), what="the metrics server starts")
    url = str(proc.seen("serving /metrics")[0][1]["metrics_url"])
    return url.replace("0.0.0.0", "127.0.0.1")


def firings_scraped(base: str) -> float:
    return sample(scrape(base), "queuey_schedule_firings_total", schedule=SCHEDULE)


def test_a_lone_scheduler_counts_its_firings_on_its_metrics_port(
    config: Path, procs: list[Proc]
) -> None:
    p = Proc(config, "scheduler", "--metrics-port", "0")
    procs.append(p)
    base = metrics_base(p)
    wait_until(
        lambda: len(p.fired()) >= 2 and firings_scraped(base) == len(p.fired()),
        what="two firings, counted as logged",
    )
    got = scrape(base)
    assert sample(got, "queuey_schedule_firing_failures_total", schedule=SCHEDULE) == 0
    assert sample(got, "queuey_scheduler_leader") == 1
    assert sample(got, "process_resident_memory_bytes") > 0, "the process's own metrics"
    status, body = check(base, "/readyz")
    assert (status, body["scheduler"], body["schedules"]) == (200, "active", [SCHEDULE])
    assert check(base, "/healthz")[0] == 200
    assert p.stop() == 0


def test_a_worker_with_the_scheduler_counts_firings_beside_its_jobs(
    config: Path, procs: list[Proc]
) -> None:
    w = Proc(config, "worker", "--with-scheduler", "--metrics-port", "0")
    procs.append(w)
    base = metrics_base(w)
    wait_until(
        lambda: len(w.fired()) >= 2 and firings_scraped(base) == len(w.fired()),
        what="two firings, counted as logged",
    )
    wait_until(
        lambda: (
            sample(scrape(base), "queuey_jobs_total", job_type="greet", outcome="succeeded") >= 2
        ),
        what="the worker runs them, counted in the same registry",
    )
    assert sample(scrape(base), "queuey_scheduler_leader") == 1
    assert w.stop() == 0


# -- queuey schedules, in process ------------------------------------------------------


def invoke(config: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["--config", str(config), "--log-format", "json", *args])
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def test_schedules_lists_the_last_and_next_firing_and_fires_one_now(config: Path) -> None:
    code, out, err = invoke(config, "schedules", "--json")
    assert code == 0, err
    [row] = json.loads(out)
    assert (row["name"], row["job_type"], row["trigger"]) == (SCHEDULE, "greet", "every 1s")
    assert row["last_firing"] is None
    assert row["next_firing_ms"] - time.time() * 1000 <= 1000

    store = RabbitScheduleState(AMQP_URL)
    try:
        store.record(SCHEDULE, 1_796_000_000_000)
    finally:
        store.close()
    code, out, _ = invoke(config, "schedules", "--json")
    [row] = json.loads(out)
    assert row["last_firing_ms"] == 1_796_000_000_000
    assert row["last_firing"] == "2026-11-30T00:53:20+00:00"
    code, out, _ = invoke(config, "schedules")
    assert code == 0
    assert SCHEDULE in out
    assert "2026-11-30T00:53:20+00:00" in out

    code, out, err = invoke(config, "schedules", "fire", SCHEDULE)
    assert code == 0, err
    job_id = out.strip()
    assert firings_in_queue() == Counter({job_id: 1})
    code, out, _ = invoke(config, "schedules", "--json")
    assert json.loads(out)[0]["last_firing_ms"] == 1_796_000_000_000, "a manual firing is no tick"
