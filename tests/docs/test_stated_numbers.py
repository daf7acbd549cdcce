"""Numbers the pages state that are constants in the code: each page that states one
states the code's value.

A page that says "redelivered 5 times" while the code counts to six misleads whoever
plans around it (how often a poison job runs, how long a dead letter's reason can be),
and nothing else would notice the day a constant moves.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from queuey_cli import enqueue_file
from queuey_cli.main import app
from queuey_cli.queue_samples import EMBEDDED_COLUMNS
from queuey_core import limits
from queuey_core.aio import producer as aio_producer
from queuey_core.backends.rabbitmq import control
from queuey_core.backends.rabbitmq import dead_letter_moves
from queuey_core.backends.rabbitmq import dead_letter_writes
from queuey_core.backends.rabbitmq import delivery
from queuey_core.backends.rabbitmq import topology
from queuey_core.control import signing
from queuey_core.flow import limit_gate
from queuey_core.flow import limit_state
from queuey_core.logs.writer import LOG_BATCH_SECONDS
from queuey_core.observability.http_messages import Limits
from queuey_core.process import Exit
from queuey_core.process import children
from queuey_core.process.running import CANCEL_LIMIT
from queuey_core.worker.asyncio_runner import SETTLE_THREADS
from queuey_core.worker.redelivery import MAX_REDELIVERIES
from queuey_core.worker.runner import ASYNC_QUEUE_THREADS

REPO = Path(__file__).resolve().parents[2]
#: Numbers the pages spell out in words.
WORDS: dict[str, float] = {
    "half": 0.5,
    "millisecond": 0.001,
    "three": 3,
    "four": 4,
    "five": 5,
    "fifth": 5,
    "six": 6,
    "sixth": 6,
    "eight": 8,
}


def pages() -> dict[str, str]:
    """Every page of docs/ and the README, each on one line (a phrase may wrap)."""
    found = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return {p.name: " ".join(p.read_text().split()) for p in found}


def stated(pattern: str) -> list[tuple[str, float]]:
    """(page, number) for each match of ``pattern``, whose group is a number or a word."""
    return [
        (name, WORDS.get(n, 0) or float(n.replace(",", "")))
        for name, text in pages().items()
        for n in re.findall(pattern, text)
    ]


@pytest.mark.parametrize(
    ("pattern", "value"),
    [
        # The redelivery guard: the reason, and the redelivery it stops.
        (r"redelivered (\d+) times without being settled", MAX_REDELIVERIES),
        (r"unsettled for the (fifth|sixth) time", MAX_REDELIVERIES),
        (r"at its (fifth|sixth) redelivery", MAX_REDELIVERIES),
        (r"runs? at most (five|six) times", MAX_REDELIVERIES),
        (r"ran at most (five|six) times", MAX_REDELIVERIES),
        (r"its (fifth|sixth) delivery", MAX_REDELIVERIES + 1),
        (r"its (fifth|sixth) claim", MAX_REDELIVERIES + 1),
        # The wire's limits (docs/protocol.md and the pages that repeat them).
        (r"binary ladder of (\d+) levels", topology.DELAY_LEVELS),
        (r"the (\d+) bits of \*d\*", topology.DELAY_LEVELS),
        (r"at most ([\d,]+) characters: `fatal error", topology.MAX_REASON),
        (r"Queue names are at most (\d+) bytes", limits.MAX_QUEUE_NAME_BYTES),
        # An exchange, a quorum queue and two bindings a level (admin.declare_ladder).
        (r"ladder's (\d+) declares and binds", 4 * topology.DELAY_LEVELS),
        (r"\((\d+) declares and binds of the", 4 * topology.DELAY_LEVELS),
        # Async handlers and the asyncio producer (docs/asyncio.md).
        (r"run on one of (eight|\d+) settle threads", SETTLE_THREADS),
        (r"counts for (\d+) threads at most", ASYNC_QUEUE_THREADS),
        (r"The work runs on (four|\d+) threads of the producer's own", aio_producer.THREADS),
        (r"gives them (half) a second", CANCEL_LIMIT),
        (r"\(`enqueue_many` of more than (\d+) jobs\) is published in slices", aio_producer.SLICE),
        (r"each about a (millisecond) of the publishing thread's CPU", aio_producer.SLICE_CPU),
        # The control channel's signatures (docs/operations.md).
        (r"With a secret of at least (\d+) characters", signing.MIN_SECRET),
        (r"signed within (\d+) s of its own clock", signing.MAX_SKEW),
        (r"clocks must be within (\d+) s of the operator's", signing.MAX_SKEW),
        # A nacked settle during a quorum queue's election (docs/scaling.md).
        (r"after a (\d+) s pause the original goes back", delivery.NACK_PAUSE),
        (r"the redelivery guard's (\d+) returns", MAX_REDELIVERIES),
        # Processes and the control channel (docs/workers-and-control.md, scaling.md).
        (r"processes\W+\S*? ?1 to (\d+)", limits.MAX_PROCESSES),
        (r"back-off \((\d+(?:\.\d+)?) s doubling", children.RESTART_INITIAL),
        (r"doubling to (\d+) s\)", children.RESTART_MAX),
        (r"\((\d+) s message TTL", control.QUEUE_ARGUMENTS["x-message-ttl"] // 1000),
        (r"at most (\d+) requests\)", control.QUEUE_ARGUMENTS["x-max-length"]),
        (r"at most (\d+) wait\)", control.QUEUE_ARGUMENTS["x-max-length"]),
        # enqueue --file (docs/enqueueing.md, README.md).
        (r"publishes in batches of ([\d,]+)", enqueue_file.BATCH),
        (r"with up to (three|\d+) batches handed to", enqueue_file.IN_FLIGHT),
        # The command line (docs/cli.md).
        (r"what gathered in (\d+) ms, one write", LOG_BATCH_SECONDS * 1000),
        # Rate and concurrency limits (docs/flow-control.md).
        (r"renews them every (\d+) s", limit_state.SWEEP_EVERY_MS / 1000),
        (r"gives its slots back (\d+) s after its last renewal", limit_state.SLOT_LEASE_MS / 1000),
        (r"comes back within the (\d+) s lease", limit_state.SLOT_LEASE_MS / 1000),
        (r"is deferred by (\d+) s, priority and attempt kept", limit_gate.STORE_DOWN_DELAY),
        (r"waits (\d+) s for it to come back", limit_state.RELEASE_HOLD_MS / 1000),
        (
            r"is published again by any worker\s+after (\d+) s",
            limit_state.REPUBLISH_AFTER_MS / 1000,
        ),
        # The job store's dead letters.
        (r"does not answer within (\d+) s", int(dead_letter_writes.BOUND)),
        (r"claims up to (\d+) rows", dead_letter_moves.BATCH),
    ],
)
def test_a_number_the_pages_state_is_the_codes(pattern: str, value: float) -> None:
    found = stated(pattern)
    assert found, f"no page states {pattern!r} any more: drop it here, or fix the page"
    wrong = [(page, n) for page, n in found if n != value]
    assert not wrong, f"{pattern!r} is {value} in the code; pages say otherwise: {wrong}"


def test_the_embedded_page_names_the_columns_queuey_queues_shows_on_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a terminal the file's table says "running" where RabbitMQ's says "unacked";
    # --json and piped output keep the field's name, "unacked", for both.
    monkeypatch.chdir(tmp_path)  # no queuey.toml: the example queues are not needed
    monkeypatch.setenv("QUEUEY_BROKER__URL", f"sqlite:///{tmp_path / 'q.db'}")
    result = CliRunner().invoke(app, ["queues", "--json"])
    assert result.exit_code == 0, result.stderr
    shown = json.loads(result.stdout)
    fields = {key for queue in shown["queues"] for key in queue} | set(shown)
    titles = {column.title for column in EMBEDDED_COLUMNS}
    text = (REPO / "docs" / "embedded.md").read_text()
    paragraphs = [p for p in text.split("\n\n") if "`queuey queues`" in p and "**" in p]
    said = " ".join(" ".join(paragraphs).split())
    named = set(re.findall(r"\*\*([a-z_ ]+)\*\*", said))
    assert named, "embedded.md names the columns it explains"
    assert named <= titles | fields, f"embedded.md explains {named - titles - fields}"
    running = next(c for c in EMBEDDED_COLUMNS if c.title != c.name and c.name == "unacked")
    assert f"**{running.title}** column" in said, "the table's title on a file"
    assert f"name that count `{running.name}`" in said, "the --json field's name"
    assert running.name in fields


def test_the_exit_codes_the_command_line_page_lists_are_the_codes() -> None:
    text = pages()["cli.md"]
    listed = text.split("Exit codes: ", 1)[1].split("Every error is one line", 1)[0]
    codes = {int(n) for n in re.findall(r"`(\d+)`", listed)}
    assert codes == {int(code) for code in Exit}, f"cli.md lists {sorted(codes)}"


def test_every_metric_queuey_serves_is_in_the_operations_pages_table() -> None:
    # Each metric is made where it is counted: a counter's name gains _total on the wire.
    made = re.compile(r"(Counter|Gauge|Histogram)(?:MetricFamily)?\(\s*\"(queuey_\w+)\"")
    served = set()
    for path in (REPO / "queuey_core").rglob("*.py"):
        for kind, name in made.findall(path.read_text()):
            served.add(f"{name}_total" if kind == "Counter" else name)
    assert len(served) > 20, "the pattern still finds where the metrics are made"
    section = pages()["operations.md"].split("## Every metric", 1)[1]
    table = set(re.findall(r"\| `(queuey_\w+)` \|", section))
    assert served == table, f"missing: {served - table}; gone: {table - served}"


def test_the_metrics_servers_limits_table_is_the_default_limits() -> None:
    section = pages()["operations.md"].split("### The metrics server's limits", 1)[1]
    rows = dict(re.findall(r"\| ([a-z ]+) \| ([^|]+) \|", section.split("Every answer", 1)[0]))
    limits_ = Limits()
    assert rows["a complete request head"].startswith(f"{limits_.request_timeout:g} s")
    assert rows["sending an answer"].startswith(f"{limits_.write_timeout:g} s")
    assert f"at most {limits_.handler_threads} handler threads" in rows["threads"]
    assert rows["open connections"].strip() == str(limits_.max_connections)
    assert rows["listen backlog"].startswith(str(limits_.backlog))
    assert rows["requests waiting for a handler"].strip() == str(limits_.max_pending)
    assert rows["request head"].strip() == f"{limits_.max_head // 1024} KiB"
