"""A command line scripts can drive: --json on every read command, plain text when
piped, queues not declared yet named instead of failing, and ``queues --watch``.

Every command runs in-process on a MemoryBackend (the CLI's ``backend`` is replaced):
CliRunner's stdout is not a terminal, so what it captures is the piped output.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_cli import queue_samples
from queuey_cli import watch
from queuey_cli.main import app
from queuey_core import BackendError
from queuey_core import Envelope
from queuey_core.backends.base import ConsumerEnded
from queuey_core.backends.base import Delivery
from queuey_core.backends.capabilities import Inspection
from queuey_core.backends.memory import MemoryBackend
from queuey_core.clock import ManualClock
from queuey_core.handlers import discover
from queuey_core.management_api import Unacked
from queuey_core.queues import QueueConfig
from tests.cli.conftest import UNREACHABLE

CONFIG = f"""
[broker]
url = "{UNREACHABLE}"
connect_timeout = "1s"

[queues.there]
prefetch = 4
max_priority = 5

[queues.absent]
prefetch = 1
"""

THERE = QueueConfig(name="there", prefetch=4, max_priority=5)


class KeptOpen(MemoryBackend):
    """A MemoryBackend that outlives the commands closing it, so a test can look after."""

    def __init__(self) -> None:
        super().__init__(clock=ManualClock())  # delays wait for the test, never for real
        self.closes = 0

    def close(self) -> None:
        self.closes += 1


@pytest.fixture
def memory(monkeypatch: pytest.MonkeyPatch) -> KeptOpen:
    """The backend every command gets; queue ``there`` declared, ``absent`` not."""
    mem = KeptOpen()
    mem.declare([THERE])
    for module in ("queuey_cli.dlq", "queuey_cli.queues"):
        monkeypatch.setattr(f"{module}.backend", lambda settings: mem)
    return mem


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "queuey.toml"
    path.write_text(CONFIG)
    return path


def envelope(job_type: str = "greet", queue: str = "there") -> Envelope:
    return Envelope(
        job_id=uuid.uuid4(), job_type=job_type, queue=queue, enqueued_at=1, payload={"n": 1}
    )


def publish(mem: MemoryBackend, count: int, **kwargs: str) -> list[Envelope]:
    sent = [envelope(**kwargs) for _ in range(count)]
    for env in sent:
        mem.publish(env)
    return sent


def kill_all(mem: MemoryBackend, reason: str) -> None:
    """Dead-letter every message ready on ``there``, with ``reason``."""

    def sink(d: Delivery | ConsumerEnded) -> None:
        if not isinstance(d, ConsumerEnded):
            d.dead_letter(reason)

    mem.consume(THERE, sink).cancel()


def run(runner: CliRunner, config: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["--config", str(config), *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, result.stdout, result.stderr


def tsv(out: str) -> list[dict[str, str]]:
    """Plain output read the way a script would: a header, then a record a line."""
    header, *lines = out.splitlines()
    names = header.split("\t")
    records = [line.split("\t") for line in lines]
    assert all(len(r) == len(names) for r in records), (names, records)
    return [dict(zip(names, r, strict=True)) for r in records]


# -- queues ------------------------------------------------------------------------------


def test_queues_json_counts_each_queue_and_names_one_not_declared_yet(
    runner: CliRunner, config: Path, memory: KeptOpen
) -> None:
    publish(memory, 2)
    kill_all(memory, "fatal error: x")
    publish(memory, 3)
    code, out, err = run(runner, config, "queues", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc == {
        "queues": [
            {
                "name": "there",
                "exists": True,
                "ready": 3,
                "unacked": None,
                "consumers": 0,
                "dead_letters": 2,
                "paused": False,
            },
            {
                "name": "absent",
                "exists": False,
                "ready": None,
                "unacked": None,
                "consumers": None,
                "dead_letters": None,
                "paused": False,
            },
        ],
        "held": 0,
        "unroutable": 0,
        "unacked_error": (
            "set broker.management_url, e.g. https://rabbit:15671, to see unacked counts"
        ),
    }
    assert err == "", "nothing but the document, and nothing on stderr"
    assert memory.closes == 1


def test_queues_counts_what_the_delay_ladder_holds(
    runner: CliRunner, config: Path, memory: KeptOpen
) -> None:
    memory.publish(envelope(), delay=3600)
    memory.defer(envelope(), 60)
    code, out, err = run(runner, config, "queues", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["held"] == 2
    assert doc["queues"][0]["ready"] == 0, "held, not ready"
    code, out, err = run(runner, config, "queues")
    assert "held in the delay ladder (all queues): 2" in err


def test_queues_piped_is_a_header_and_a_tab_separated_record_a_queue(
    runner: CliRunner, config: Path, memory: KeptOpen
) -> None:
    publish(memory, 2)
    code, out, err = run(runner, config, "queues")
    assert code == 0, err
    assert tsv(out) == [
        {
            "name": "there",
            "ready": "2",
            "unacked": "n/a",
            "consumers": "0",
            "dead_letters": "0",
            "paused": "no",
        },
        {
            "name": "absent",
            "ready": "not declared yet",
            "unacked": "-",
            "consumers": "-",
            "dead_letters": "-",
            "paused": "no",
        },
    ]
    assert "held in the delay ladder (all queues): 0" in err, "notes go to stderr when piped"


def test_queues_on_a_terminal_is_a_table_with_its_notes(
    runner: CliRunner, config: Path, memory: KeptOpen, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("queuey_cli.output.is_terminal", lambda: True)
    code, out, _ = run(runner, config, "queues")
    assert code == 0
    assert "┃ queue" in out
    assert "not declared yet" in out
    assert "held in the delay ladder (all queues): 0" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--watch", "--json"], "error: --watch and --json do not go together"),
        (["--interval", "2s"], "error: --interval goes with --watch"),
        (["--watch", "--interval", "0"], "error: --interval: '0': must be at least 100ms"),
        (["--watch", "--interval", "soon"], "error: --interval: 'soon' is not a duration"),
        (["--watch", "--interval", "nan"], "error: --interval: 'nan': must be at least 100ms"),
    ],
)
def test_bad_watch_options_are_one_line_and_exit_2_before_connecting(
    runner: CliRunner, config: Path, args: list[str], message: str
) -> None:
    # No backend replaced: the broker in CONFIG cannot be reached, so exit 2 (not 1)
    # proves nothing tried to connect.
    code, out, err = run(runner, config, "queues", *args)
    assert code == 2
    [line] = err.splitlines()
    assert line.startswith(message), line
    assert out == ""


# -- queues --watch ----------------------------------------------------------------------


class Clock:
    """Stands in for the watch's sleep and the samples' clock: each sleep moves time
    on by the interval, runs ``between`` (what happens while it waits), and after
    ``stop_after`` sleeps raises KeyboardInterrupt, as Ctrl-C would."""

    def __init__(self, stop_after: int, between: Callable[[int], None]) -> None:
        self.now = 1000.0
        self.sleeps = 0
        self.stop_after = stop_after
        self.between = between

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        if self.sleeps >= self.stop_after:
            raise KeyboardInterrupt
        self.now += seconds
        self.between(self.sleeps)


def watching(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> None:
    monkeypatch.setattr(watch, "sleep", clock.sleep)
    monkeypatch.setattr(queue_samples, "monotonic", lambda: clock.now)


def watching_backend(monkeypatch: pytest.MonkeyPatch, backend: object, *, stop_after: int) -> None:
    """The watch samples ``backend``, and Ctrl-C comes after ``stop_after`` sleeps."""
    monkeypatch.setattr("queuey_cli.queues.backend", lambda settings: backend)
    watching(monkeypatch, Clock(stop_after=stop_after, between=lambda n: None))


def test_watch_piped_prints_each_refresh_with_rates_and_ctrl_c_exits_0(
    runner: CliRunner, config: Path, memory: KeptOpen, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(memory, 10)

    def between(n: int) -> None:
        publish(memory, 4)  # 4 more ready in 2 s: +2/s
        kill_all(memory, "fatal")  # and all 14 dead: ready 0, dead +14 in 2 s

    clock = Clock(stop_after=2, between=between)
    watching(monkeypatch, clock)
    code, out, err = run(runner, config, "queues", "--watch", "--interval", "2s")
    assert code == 0, err
    records = tsv(out)
    assert [(r["name"], r["ready"], r["dead_letters"]) for r in records] == [
        ("there", "10", "0"),
        ("absent", "not declared yet", "-"),
        ("there", "0", "14"),
        ("absent", "not declared yet", "-"),
    ]
    assert [(r["ready_per_s"], r["dead_per_s"]) for r in records[::2]] == [
        ("-", "-"),
        ("-5/s", "+7/s"),
    ], "per second over the 2 s between the samples"
    assert {r["held"] for r in records} == {"0"}
    assert records[0]["time"] <= records[2]["time"]
    assert memory.closes == 1


class Flaky:
    """A backend that is lost for the second and third samples, then comes back."""

    def __init__(self, mem: MemoryBackend) -> None:
        self.mem = mem
        self.calls = 0
        self.closes = 0

    def inspect(self, names: Sequence[str]) -> Inspection:
        self.calls += 1
        if self.calls in (2, 3):
            raise BackendError("cannot reach RabbitMQ at amqp://guest:***@h/: connection refused")
        return self.mem.inspect(names)

    def close(self) -> None:
        self.closes += 1


def test_watch_shows_a_lost_broker_and_keeps_asking_until_it_answers(
    runner: CliRunner, config: Path, memory: KeptOpen, monkeypatch: pytest.MonkeyPatch
) -> None:
    flaky = Flaky(memory)
    watching_backend(monkeypatch, flaky, stop_after=4)
    code, out, err = run(runner, config, "queues", "--watch", "--interval", "1")
    assert code == 0, err
    assert flaky.calls == 4
    assert [r["name"] for r in tsv(out)] == ["there", "absent"] * 2, "samples 1 and 4"
    lost = [line for line in err.splitlines() if "broker lost" in line]
    assert len(lost) == 2, err
    assert "connection refused; asking again every 1s" in lost[0]
    assert flaky.closes == 1


def test_watch_on_a_terminal_keeps_the_last_counts_and_says_the_broker_is_lost(
    runner: CliRunner, config: Path, memory: KeptOpen, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CliRunner's stdout is no terminal to Rich: the live display shows its last state
    # when it stops, which is what this test reads.
    monkeypatch.setattr(watch, "is_terminal", lambda: True)
    publish(memory, 2)
    flaky = Flaky(memory)
    watching_backend(monkeypatch, flaky, stop_after=3)
    code, out, err = run(runner, config, "queues", "--watch", "--interval", "1s")
    assert code == 0, err
    assert flaky.calls == 3, "samples 2 and 3 found the broker lost"
    assert "ready/s" in out
    assert "not declared yet" in out
    assert "every 1s, sample 1 at" in out, "the counts of the last sample that worked"
    assert "broker lost at" in out
    assert "connection refused; asking again every 1s" in out
    assert "held in the delay ladder (all queues): 0" in out
    assert flaky.closes == 1


def test_watch_rates_are_the_change_per_second_between_two_samples(memory: KeptOpen) -> None:
    none = Unacked(None, "no management API")
    first = queue_samples.Sample(10.0, memory.inspect(["there"]), none)
    publish(memory, 3)
    second = queue_samples.Sample(11.5, memory.inspect(["there"]), none)
    assert watch.rows(second, first) == [["there", 3, "n/a", 0, 0, None, "+2/s", "0/s"]]
    assert watch.rows(first, None) == [["there", 0, "n/a", 0, 0, None, "-", "-"]]


# -- dlq ---------------------------------------------------------------------------------


def test_dlq_list_names_a_queue_not_declared_yet_and_lists_the_others(
    runner: CliRunner, config: Path, memory: KeptOpen
) -> None:
    [env] = publish(memory, 1)
    kill_all(memory, "fatal error: tab\there")
    code, out, err = run(runner, config, "dlq", "list")
    assert code == 0, err
    [record] = tsv(out)
    assert record == {
        "handle": str(env.job_id),
        "job_type": "greet",
        "dlq_of": "there",
        "attempt": "1",
        "reason": "fatal error: tab\\there",
        "dead_at": record["dead_at"],
    }, "a tab in a value is escaped: it cannot split the record"
    assert err.strip() == "queue 'absent': not declared yet, no dead letters"

    code, out, err = run(runner, config, "dlq", "list", "--json")
    assert code == 0
    [dead] = json.loads(out)
    assert (dead["job_id"], dead["reason"]) == (str(env.job_id), "fatal error: tab\there")
    assert "queue 'absent': not declared yet" in err, "the array holds dead letters only"


def test_dlq_list_of_only_a_queue_not_declared_yet_is_empty_not_a_failure(
    runner: CliRunner, config: Path, memory: KeptOpen
) -> None:
    code, out, err = run(runner, config, "dlq", "list", "--queue", "absent")
    assert code == 0
    assert out == "handle\tjob_type\tdlq_of\tattempt\treason\tdead_at\n"
    assert "not declared yet" in err
    code, out, _ = run(runner, config, "dlq", "list", "--queue", "absent", "--json")
    assert (code, json.loads(out)) == (0, [])


@pytest.mark.parametrize("queue", [[], ["--queue", "there"], ["--queue", "absent"]])
def test_dlq_requeue_of_an_id_that_is_not_there_says_so_and_exits_2(
    runner: CliRunner, config: Path, memory: KeptOpen, queue: list[str]
) -> None:
    [env] = publish(memory, 1)
    kill_all(memory, "fatal")
    missing = str(uuid.uuid4())
    code, out, err = run(runner, config, "dlq", "requeue", missing, *queue)
    assert code == 2
    assert out.strip() == "requeued 0"
    assert err.strip() == f"error: no dead letter with job id {missing}"
    assert [d.handle for d in memory.list_dead_letters("there")] == [str(env.job_id)]


def test_dlq_show_and_config_show_take_json_too(
    runner: CliRunner, config: Path, memory: KeptOpen
) -> None:
    [env] = publish(memory, 1)
    kill_all(memory, "fatal")
    plain = run(runner, config, "dlq", "show", str(env.job_id))
    as_json = run(runner, config, "dlq", "show", str(env.job_id), "--json")
    assert plain == as_json
    shown = json.loads(as_json[1])
    assert (shown["job_id"], shown["priority"], shown["enqueued_at"]) == (str(env.job_id), 0, 1)
    plain = run(runner, config, "config", "show")
    assert plain == run(runner, config, "config", "show", "--json")
    assert json.loads(plain[1])["queues"]["absent"]["prefetch"] == 1


# -- handlers ----------------------------------------------------------------------------


@pytest.fixture
def handlers_config(tmp_path: Path) -> Path:
    """A config declaring whatever queues the installed example handlers are bound to."""
    names = sorted({d.handler.job_type.QUEUE for d in discover()})
    path = tmp_path / "handlers.toml"
    path.write_text(
        f'[broker]\nurl = "{UNREACHABLE}"\n' + "".join(f"[queues.{n}]\n" for n in names)
    )
    return path


def test_handlers_json_and_piped_list_the_same_records(
    runner: CliRunner, handlers_config: Path
) -> None:
    expected = [
        {
            "job_type": d.handler.job_type.NAME,
            "queue": d.handler.job_type.QUEUE,
            "entry_point": d.entry_point,
            "distribution": d.distribution,
        }
        for d in discover()
    ]
    assert expected, "the example handlers are installed"
    code, out, _ = run(runner, handlers_config, "handlers", "--json")
    assert (code, json.loads(out)) == (0, expected)
    code, out, _ = run(runner, handlers_config, "handlers")
    assert (code, tsv(out)) == (0, expected)


# -- hostile text, piped and on a terminal -------------------------------------------------

HOSTILE = ["tab\there", "new\nline", "\x1b[2J", "[bold]x[/bold]", "[/]"]


def test_piped_records_stay_one_a_line_whatever_their_text(
    runner: CliRunner, config: Path, memory: KeptOpen
) -> None:
    for text in HOSTILE:
        memory.publish(envelope(job_type="greet").model_copy(update={"job_type": text}))
    kill_all(memory, "fatal: \t\n\x1b")
    code, out, err = run(runner, config, "dlq", "list")
    assert code == 0, err
    records = tsv(out)  # checks every line has as many fields as the header
    assert [r["job_type"] for r in records] == [
        "tab\\there",
        "new\\nline",
        "\\x1b[2J",
        "[bold]x[/bold]",
        "[/]",
    ]
    assert {r["reason"] for r in records} == {"fatal: \\t\\n\\x1b"}
    assert "\x1b" not in out


def test_terminal_tables_show_hostile_text_literally(
    runner: CliRunner, config: Path, memory: KeptOpen, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("queuey_cli.output.is_terminal", lambda: True)
    for text in HOSTILE:
        memory.publish(envelope().model_copy(update={"job_type": text}))
    kill_all(memory, "[red]reason[/red]")
    code, out, err = run(runner, config, "dlq", "list")
    assert code == 0, err
    assert "┃ job id / handle" in out
    for shown in ("tab\\there", "new\\nline", "\\x1b[2J", "[bold]x[/bold]", "[/]"):
        assert shown in out, shown
    assert out.count("[red]reason[/red]") == len(HOSTILE)
    assert "\x1b" not in out


class SwallowsCtrlC(Flaky):
    """A backend whose inspect is interrupted by Ctrl-C and turns it into a broker error,
    as a failing channel close in pika's cleanup did: the watch must end all the same."""

    def inspect(self, names: Sequence[str]) -> Inspection:
        self.calls += 1
        if self.calls == 2:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)  # the handler runs here, well before this ends
            except KeyboardInterrupt:
                raise BackendError("NOT_FOUND - no queue 'queuey.delay.1'") from None
            raise AssertionError("SIGINT did not interrupt the sample")
        return self.mem.inspect(names)


def test_watch_ends_on_ctrl_c_even_when_the_interrupt_is_turned_into_a_broker_error(
    runner: CliRunner, config: Path, memory: KeptOpen, monkeypatch: pytest.MonkeyPatch
) -> None:
    swallows = SwallowsCtrlC(memory)
    watching_backend(monkeypatch, swallows, stop_after=10)
    before = signal.getsignal(signal.SIGINT)
    code, out, err = run(runner, config, "queues", "--watch", "--interval", "1")
    assert code == 0, err
    assert swallows.calls == 2, "no sample after the Ctrl-C"
    assert "broker lost" not in err, "the swallowed Ctrl-C is no lost broker"
    assert [r["name"] for r in tsv(out)] == ["there", "absent"]
    assert swallows.closes == 1
    assert signal.getsignal(signal.SIGINT) is before, "the handler is put back"
