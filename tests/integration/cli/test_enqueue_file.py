"""``queuey enqueue --file`` as a real process (the console script), on the shared
RabbitMQ in the test vhost: stopped by a signal, it stops between batches, prints what
became of every line and writes the rest for a rerun."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from queuey_core import job_id_for
from tests.conftest import require_broker
from tests.harness import AMQP_URL
from tests.integration.broker import channel
from tests.integration.broker import take_job_ids
from tests.support import counts_line

pytestmark = pytest.mark.integration

CONFIG = """
[broker]
url = "{url}"
publish_timeout = "10s"

[queues.alpha]
prefetch = 4
max_priority = 10

# nap, the example handler of long jobs, is bound to beta
[queues.beta]
prefetch = 1
"""


@pytest.fixture
def config(tmp_path: Path) -> Iterator[Path]:
    require_broker()
    path = tmp_path / "queuey.toml"
    path.write_text(CONFIG.format(url=AMQP_URL))
    _delete_queues()
    yield path
    _delete_queues()


def _delete_queues() -> None:
    with channel() as ch:
        ch.queue_delete("alpha")
        ch.queue_delete("alpha.dlq")
        ch.queue_delete("beta")
        ch.queue_delete("beta.dlq")


def queuey(config: Path, *args: str) -> list[str]:
    script = Path(sys.executable).with_name("queuey")  # the console script itself
    return [str(script), "--config", str(config), "--log-format", "json", *args]


def ready() -> int:
    try:
        with channel() as ch:
            return int(ch.queue_declare("alpha", passive=True).method.message_count)
    except pika.exceptions.ChannelClosedByBroker:
        return 0  # not declared yet


def enqueue_file(config: Path, jobs: Path) -> subprocess.CompletedProcess[str]:
    """``queuey enqueue greet --file JOBS`` to its end, its output captured."""
    return subprocess.run(
        queuey(config, "enqueue", "greet", "--file", str(jobs)),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def write_jobs(path: Path, total: int) -> None:
    path.write_text("".join(json.dumps({"name": f"n{i}"}) + "\n" for i in range(total)))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_a_file_between_batches_and_every_line_is_counted(
    config: Path, tmp_path: Path, signum: signal.Signals
) -> None:
    total = 10_000
    jobs, failed = tmp_path / "jobs.jsonl", tmp_path / "failed.jsonl"
    write_jobs(jobs, total)
    args = ["enqueue", "greet", "--file", str(jobs), "--ids-from-lines", "--failed-to", str(failed)]
    proc = subprocess.Popen(queuey(config, *args), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while ready() == 0:  # the first batch is in
            assert time.monotonic() < deadline, "nothing was enqueued"
            assert proc.poll() is None, "it ended before the signal"
            time.sleep(0.02)
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()

    assert proc.returncode == 130, stderr
    assert f"{signum.name}: stopping after the batches in flight" in stderr
    counts = counts_line(stderr)
    assert counts["unknown"] == counts["refused"] == 0, "a clean stop leaves nothing in doubt"
    assert counts["confirmed"] + counts["not sent"] == total
    assert counts["not sent"] > 0, "stopped in the middle"
    assert ready() == counts["confirmed"], "confirmed means on the queue"
    rest = failed.read_text().splitlines()
    assert len(rest) == counts["not sent"]
    assert all(json.loads(line)["job_id"] for line in rest), "each line keeps its id"

    again = enqueue_file(config, failed)
    assert again.returncode == 0, again.stderr
    ids = take_job_ids("alpha")
    assert len(ids) == len(set(ids)) == total, "every line once, none twice"


def test_a_second_signal_stops_at_once_and_the_batch_in_flight_is_unknown(
    config: Path, tmp_path: Path
) -> None:
    total = 10_000
    jobs, failed = tmp_path / "jobs.jsonl", tmp_path / "failed.jsonl"
    write_jobs(jobs, total)
    args = ["enqueue", "greet", "--file", str(jobs), "--failed-to", str(failed)]
    proc = subprocess.Popen(queuey(config, *args), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while ready() == 0:
            assert time.monotonic() < deadline, "nothing was enqueued"
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()

    counts = counts_line(stderr)
    assert proc.returncode == (4 if counts["unknown"] else 130), stderr
    assert sum(counts[k] for k in ("confirmed", "unknown", "refused", "not sent")) == total
    assert counts["confirmed"] <= ready() <= counts["confirmed"] + counts["unknown"]
    assert len(failed.read_text().splitlines()) == total - counts["confirmed"]


def test_a_file_line_chooses_its_job_id_and_a_bad_one_is_refused_before_connecting(
    config: Path, tmp_path: Path
) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"job_id": "order-1", "name": "a"}\n{"name": "b"}\n')
    done = enqueue_file(config, jobs)
    assert done.returncode == 0, done.stderr
    assert "enqueued 2 jobs" in done.stderr
    assert job_id_for("order-1") in take_job_ids("alpha")

    jobs.write_text('{"job_id": "", "name": "a"}\n')
    bad = enqueue_file(config, jobs)
    assert bad.returncode == 2
    assert f"{jobs}:1: job_id: a job id is a UUID or a non-empty string" in bad.stderr


@pytest.mark.slow
def test_a_large_file_is_enqueued_in_bounded_memory(config: Path, tmp_path: Path) -> None:
    """Streaming passes: the peak resident memory of the run does not grow with the file
    (it held every validated line before, 1.2 KB each: 622 MB for 500,000 lines)."""
    total = 300_000
    jobs = tmp_path / "jobs.jsonl"
    with jobs.open("w") as fh:
        for i in range(total):
            fh.write(json.dumps({"name": f"name-{i:07d}-" + "x" * 40}) + "\n")
    proc = subprocess.Popen(
        queuey(config, "enqueue", "greet", "--file", str(jobs), "--ids-from-lines"),
        stderr=subprocess.PIPE,
        text=True,
    )
    status = Path(f"/proc/{proc.pid}/status")
    peak = 0
    try:
        while proc.poll() is None:
            try:  # VmHWM: the peak resident size so far (kB)
                fields = dict(line.split(":", 1) for line in status.read_text().splitlines())
                peak = max(peak, int(fields["VmHWM"].split()[0]) * 1024)
            except (OSError, KeyError, ValueError):
                break  # (it ended meanwhile)
            time.sleep(0.05)
        _, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert f"enqueued {total} jobs" in stderr
    assert ready() == total
    assert peak < 100 * 2**20, f"peak RSS {peak / 2**20:.0f} MB"


def test_a_file_changed_after_its_check_is_not_published_unchecked(
    config: Path, tmp_path: Path
) -> None:
    """The second pass reads the file again: a file that is no longer the one checked
    stops the run, and no line of it goes out unchecked."""
    from queuey_example_handlers import Greet  # noqa: PLC0415

    from queuey_cli.job_lines import FileChanged  # noqa: PLC0415
    from queuey_cli.job_lines import lines_of  # noqa: PLC0415
    from queuey_cli.job_lines import read_file  # noqa: PLC0415
    from queuey_core.settings import load_settings  # noqa: PLC0415

    jobs = tmp_path / "jobs.jsonl"
    write_jobs(jobs, 3)
    settings, _ = load_settings([config])
    checked = read_file(jobs, Greet, False, settings.queue_set(), None)
    assert checked.jobs == 3
    assert [line.number for line in lines_of(checked)] == [1, 2, 3]
    jobs.write_text('{"name": "a"}\nnot json at all\n{"name": "c"}\n')
    with pytest.raises(FileChanged):
        list(lines_of(checked))
