"""The command line against RabbitMQ, in a virtual host of its own.

In-process (CliRunner) for each command, and as real ``queuey`` subprocesses for what
only a process can show: signals, exit codes, logs on stderr.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from typer.testing import CliRunner

from queuey_cli.main import app
from queuey_core.backends.rabbitmq import RabbitMQBackend
from tests import harness
from tests.integration.broker import own_vhost
from tests.integration.processes import JsonLogProcess
from tests.integration.processes import module_command

pytestmark = pytest.mark.integration

# A virtual host of its own (created and deleted here), named after the tests' one so
# that two checkouts sharing a broker never delete each other's.
VHOST = "queuey-cli-test" if harness.VHOST == "/" else f"{harness.VHOST}.cli"
URL = (
    f"amqp://guest:guest@{harness.BROKER_HOST}:{harness.BROKER_PORT}/"
    f"{urllib.parse.quote(VHOST, safe='')}"
)
CONFIG = f"""
[broker]
url = "{URL}"
heartbeat = 10

[worker]
shutdown_timeout = "20s"

[queues.alpha]
prefetch = 4
max_priority = 10
retry = {{ max_attempts = 2, backoff = "fixed", initial = "200ms", max = "200ms" }}

[queues.beta]
kind = "quorum"
prefetch = 4
"""


@pytest.fixture(scope="module")
def vhost() -> Iterator[str]:
    with own_vhost(VHOST) as name:
        yield name


@pytest.fixture
def config(vhost: str, tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "queuey.toml"
    path.write_text(CONFIG)
    yield path
    # Leave the vhost as the next test expects it: no queues, so nothing left over.
    conn = pika.BlockingConnection(pika.URLParameters(URL))
    try:
        ch = conn.channel()
        for name in ("alpha", "alpha.dlq", "beta", "beta.dlq"):
            ch.queue_delete(name)
    finally:
        conn.close()


def counts(queue: str = "alpha") -> tuple[int, int]:
    """(ready, dead letters) of ``queue`` in the test vhost."""
    broker = RabbitMQBackend(URL)
    try:
        return broker.queue_counts(queue)[0], broker.queue_counts(f"{queue}.dlq")[0]
    finally:
        broker.close()


def crash_free(text: str) -> bool:
    """No Python traceback in ``text``, but for the ``traceback`` field that a failed
    job's JSON log record carries on purpose."""
    for line in text.splitlines():
        shown = line
        try:
            record = json.loads(line)
        except ValueError:
            record = None  # not a log record (a table, a line of pretty JSON)
        if isinstance(record, dict) and str(record.get("message")).startswith("job failed"):
            record.pop("traceback", None)
            shown = json.dumps(record)
        if "Traceback" in shown:
            return False
    return True


def invoke(config: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["--config", str(config), "--log-format", "json", *args])
    assert crash_free(result.stdout + result.stderr)
    return result.exit_code, result.stdout, result.stderr


def test_enqueue_then_a_burst_worker_runs_every_example(config: Path) -> None:
    code, out, _ = invoke(config, "enqueue", "greet", '{"name": "ada"}', "--priority", "5")
    assert code == 0
    uuid.UUID(out.strip())  # the job id, alone on stdout
    for job_type, payload in [("flaky", '{"failures": 1}'), ("snooze", '{"seconds": 0.3}')]:
        assert invoke(config, "enqueue", job_type, payload)[0] == 0
    assert invoke(config, "enqueue", "greet", '{"name": "later"}', "--delay", "500ms")[0] == 0
    assert counts() == (3, 0)

    code, _, err = invoke(config, "worker", "--burst")
    assert code == 0, err
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    succeeded = [e for e in events if e["message"] == "job succeeded"]
    assert len(succeeded) == 4, "greet, flaky on its retry, snooze after its deferral, later"
    assert all({"job_id", "job_type", "queue", "attempt"} <= e.keys() for e in succeeded)
    [retried] = [e for e in events if str(e["message"]).startswith("job failed; retrying")]
    assert retried["job_type"] == "flaky"
    assert str(retried["traceback"]).endswith("Retryable: flaky failure 1 of 1"), (
        "a failed job's JSON record carries its traceback at the default level"
    )
    assert counts() == (0, 0)


def test_queues_and_handlers_and_config_show(config: Path) -> None:
    invoke(config, "enqueue", "greet", '{"name": "ada"}')
    code, out, err = invoke(config, "queues")
    assert code == 0
    assert "alpha" in out
    assert "beta" in out
    assert "held in the delay ladder" in err, "piped: notes go to stderr"
    code, out, _ = invoke(config, "config", "show")
    assert code == 0
    assert "guest:***@" in out
    assert "guest:guest" not in out


def test_a_fatal_job_is_listed_shown_requeued_and_purged(config: Path) -> None:
    code, out, _ = invoke(config, "enqueue", "doomed", '{"why": "bad input"}')
    job_id = out.strip()
    assert invoke(config, "worker", "--burst")[0] == 0
    assert counts() == (0, 1)

    code, out, _ = invoke(config, "dlq", "list", "--json")
    assert code == 0
    [dead] = json.loads(out)
    assert (dead["job_id"], dead["job_type"], dead["attempt"]) == (job_id, "doomed", 1)
    assert dead["reason"] == "fatal error: bad input"
    code, out, _ = invoke(config, "dlq", "show", job_id)
    assert code == 0
    assert json.loads(out)["payload"] == {"why": "bad input"}
    code, _, err = invoke(config, "dlq", "show", str(uuid.uuid4()))
    assert code == 2
    assert "no dead letter" in err

    code, out, _ = invoke(config, "dlq", "requeue", job_id)
    assert (code, out.strip()) == (0, "requeued 1")
    assert counts() == (1, 0)
    assert invoke(config, "worker", "--burst")[0] == 0
    assert invoke(config, "dlq", "requeue", "--all")[1].strip() == "requeued 1"
    assert invoke(config, "worker", "--burst")[0] == 0
    code, out, _ = invoke(config, "dlq", "purge", "--queue", "alpha", "--yes")
    assert (code, out.strip()) == (0, "purged 1")
    assert counts() == (0, 0)


def test_enqueue_from_a_file_confirms_every_job(config: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(f'{{"name": "n{i}"}}\n' for i in range(1200)))
    code, _, err = invoke(config, "enqueue", "greet", "--file", str(jobs))
    assert code == 0, err
    assert "enqueued 1200 jobs" in err
    assert counts() == (1200, 0)


def test_wrong_credentials_are_one_line_and_exit_1(config: Path) -> None:
    bad = config.read_text().replace("guest:guest", "guest:wrong-s3cret")
    config.write_text(bad)
    code, _, err = invoke(config, "queues")
    assert code == 1
    assert "refused the credentials" in err
    assert "wrong-s3cret" not in err


# -- real processes -------------------------------------------------------------------


def queuey(config: Path, *args: str) -> list[str]:
    return module_command(config, *args)


def finished(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, check=False, capture_output=True, text=True)


class WorkerProcess(JsonLogProcess):
    """``queuey worker`` as a subprocess, its JSON logs read as they come."""

    def __init__(self, config: Path, *args: str) -> None:
        super().__init__(queuey(config, "worker", *args))

    def count(self, message: str) -> int:
        return sum(1 for e in self.events if e["message"] == message)

    def wait_for(self, message: str, n: int = 1, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.count(message) < n:
            assert self.proc.poll() is None, f"worker exited early: {self.events}"
            assert time.monotonic() < deadline, f"never saw {n} x {message!r}"
            time.sleep(0.02)

    def finish(self, timeout: float = 30) -> int:
        code = self.proc.wait(timeout)
        self.join_reader()
        return code


def enqueue_naps(config: Path, tmp_path: Path, n: int, seconds: float) -> None:
    jobs = tmp_path / "naps.jsonl"
    jobs.write_text(f'{{"seconds": {seconds}}}\n' * n)
    subprocess.run(queuey(config, "enqueue", "nap", "--file", str(jobs)), check=True)


def naps_and_a_worker(
    config: Path, tmp_path: Path, total: int, seconds: float, *, concurrency: int
) -> WorkerProcess:
    """``total`` naps of ``seconds`` enqueued, then a worker started on them."""
    enqueue_naps(config, tmp_path, total, seconds)
    return WorkerProcess(config, "--concurrency", str(concurrency))


def test_a_subprocess_enqueue_prints_the_job_id_and_bad_input_exits_2(config: Path) -> None:
    ok = finished(queuey(config, "enqueue", "greet", '{"name": "ada"}'))
    assert ok.returncode == 0
    uuid.UUID(ok.stdout.strip())
    bad = finished(queuey(config, "enqueue", "greet", '{"name": 1}'))
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: payload: does not fit job type 'greet'")
    assert "Traceback" not in bad.stderr
    assert counts() == (1, 0), "the bad job published nothing"


def test_sigterm_in_the_middle_of_a_batch_leaves_every_job_acked_or_queued(
    config: Path, tmp_path: Path
) -> None:
    total = 60
    worker = naps_and_a_worker(config, tmp_path, total, 0.1, concurrency=2)
    worker.wait_for("job succeeded", 6)
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.finish() == 0, "a graceful stop exits 0"
    ready, dead = counts("beta")
    succeeded = worker.count("job succeeded")
    assert 0 < ready < total, "stopped in the middle of the batch"
    assert succeeded + ready == total, f"{succeeded} acked + {ready} queued != {total}"
    assert dead == 0
    assert worker.count("worker exited") == 1


def test_a_second_signal_stops_at_once_and_the_broker_keeps_the_rest(
    config: Path, tmp_path: Path
) -> None:
    total = 20
    worker = naps_and_a_worker(config, tmp_path, total, 2.0, concurrency=4)
    deadline = time.monotonic() + 20
    while counts("beta")[0] > total - 4:  # four naps taken: they run for 2 s each
        assert time.monotonic() < deadline, "the worker never took its jobs"
        time.sleep(0.05)
    worker.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.finish(10) == 130, "a second signal exits at once with 130"
    deadline = time.monotonic() + 10
    while counts("beta")[0] + worker.count("job succeeded") < total and time.monotonic() < deadline:
        time.sleep(0.1)
    ready, dead = counts("beta")
    # Every job that left the queue was acked, and every acked job had succeeded.
    assert total - ready <= worker.count("job succeeded"), f"{total - ready} gone, lost?"
    assert ready > 0
    assert dead == 0


def test_the_dead_letter_round_trip_from_the_shell(config: Path) -> None:
    def sh(*args: str) -> subprocess.CompletedProcess[str]:
        done = finished(queuey(config, *args))
        assert crash_free(done.stderr)
        return done

    job_id = sh("enqueue", "doomed", '{"why": "from the shell"}').stdout.strip()
    assert sh("worker", "--burst").returncode == 0
    listed = sh("dlq", "list", "--json")
    [dead] = json.loads(listed.stdout)
    assert (dead["job_id"], dead["reason"]) == (job_id, "fatal error: from the shell")
    assert sh("dlq", "requeue", job_id).stdout.strip() == "requeued 1"
    assert counts() == (1, 0), "back on its queue"
