"""Where a running ``queuey worker`` spends its time: py-spy samples of the process.

    .venv/bin/python bench/profile.py [--jobs 20000] [--rate 500]

Fills the bench queue with no-op jobs, runs ``queuey worker`` (8 job threads, as in
bench/run.py) under ``py-spy record --gil`` until the queue is empty, and writes
bench/PROFILE.md: the share of the samples holding the GIL (CPython runs one thread's
Python at a time, so that is the worker's budget) spent in each step of a job's path,
inclusive, and the functions that spend it themselves. Sampling slows the worker down;
its shares, not its rates, are the result. Never run as a test.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import procs
from run import THREADS, measure

HERE = Path(__file__).parent

#: The steps of a job's path, each a frame to look for anywhere in a sample's stack
#: (file suffix, function name), in the order a job goes through them.
STEPS: list[tuple[str, str, str]] = [
    (
        "the consumer's I/O thread reading a socket's bytes, then",
        "pika/adapters/utils/io_services_utils.py",
        "_on_socket_readable",
    ),
    (
        "  of which queuey's delivery reader (frames, then the delivery)",
        "backends/rabbitmq/delivery_frames.py",
        "read",
    ),
    (
        "  of which a delivery to the worker (decode the envelope, hand over)",
        "backends/rabbitmq/subscription.py",
        "_delivered",
    ),
    ("    of which the envelope check (pydantic)", "queuey_core/envelope.py", "decode"),
    ("    of which the hand-over to a job thread", "queuey_core/worker/runner.py", "sink"),
    ("job threads, all they do", "queuey_core/worker/runner.py", "_job_loop"),
    ("  of which the dispatch of jobs", "queuey_core/worker/dispatch.py", "_dispatch"),
    ("    of which the handler itself", "queuey_bench_handlers.py", ""),
    ("    of which hooks (job counts for `queuey workers`)", "queuey_core/worker/hooks.py", ""),
    ("    of which log lines", "logging/__init__.py", ""),
    ("the consumer's I/O thread sending acks", "backends/rabbitmq/consumer.py", "send_acks"),
    (
        "the I/O threads writing frames",
        "pika/adapters/utils/io_services_utils.py",
        "_on_socket_writable",
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=500, help="py-spy samples a second")
    parser.add_argument("--out", type=Path, default=HERE / "PROFILE.md")
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="the traced worker (bench/run.py's 'queuey, traced') on jobs that carry a context",
    )
    parser.add_argument("--raw", type=Path, help="keep py-spy's raw stacks in this file too")
    args = parser.parse_args()

    procs.compile_sources()
    procs.purge("bench")
    measure("fill_queuey", args.jobs, "traced" if args.tracing else "noop")
    raw = args.raw or Path(tempfile.mkdtemp()) / "worker.txt"
    pyspy = Path(sys.executable).parent / "py-spy"
    counter = procs.Counter()
    argv = procs.queuey_argv("bench", THREADS)
    if args.tracing:
        argv = ["env", "QUEUEY_BENCH_TRACING=drop", *argv]
    run = procs.Run(argv, log="profile")
    try:
        # Start-up is left out: sampling starts once the worker has taken its first job.
        run.wait_until(lambda: run.first_job() == run.first_job(), timeout=60)
        argv = [str(pyspy), "record", "--gil", "--nonblocking", "--format", "raw"]
        argv += ["--rate", str(args.rate)]
        argv += ["--output", str(raw), "--pid", str(run.proc.pid)]
        spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        before, started = run.cpu_seconds(), time.perf_counter()
        left = counter.ready("bench")
        run.wait_until(lambda: counter.ready("bench") == 0, timeout=900)
        took, cpu = time.perf_counter() - started, run.cpu_seconds() - before
        spy.send_signal(signal.SIGINT)  # py-spy writes its file when interrupted
        spy.wait(60)
    finally:
        run.stop()
        counter.close()
    args.jobs = left
    stacks = parse(raw.read_text())
    args.out.write_text(render(stacks, args, took, cpu))
    print(f"wrote {args.out}")


def parse(text: str) -> list[tuple[list[str], int]]:
    """py-spy's raw format: ``frame;frame;...;frame count`` a line, root first."""
    stacks = []
    for line in text.splitlines():
        frames, _, count = line.rpartition(" ")
        if frames:
            stacks.append((frames.split(";"), int(count)))
    return stacks


def _has(frame: str, suffix: str, function: str) -> bool:
    # A frame reads "function (path/to/file.py:line)".
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    return path.endswith(suffix) and (not function or name.rsplit(".", 1)[-1] == function)


def render(
    stacks: list[tuple[list[str], int]], args: argparse.Namespace, took: float, cpu: float
) -> str:
    total = sum(count for _, count in stacks) or 1
    lines = [
        "# Where a running `queuey worker` spends its time",
        "",
        f"`bench/profile.py`, {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, commit "
        f"{commit()}: a `queuey worker --concurrency {THREADS}` (prefetch 16) draining "
        f"{args.jobs:,} no-op jobs, sampled from its first job on by `py-spy record --gil "
        f"--nonblocking --rate {args.rate}`: {total:,} samples of the thread holding the "
        f"GIL. Under sampling it took {took:.1f} s and "
        f"{cpu / max(args.jobs, 1) * 1e6:.0f} us of CPU a job; the shares are the result, "
        "not the rates.",
        "",
        "| step of a job's path (inclusive) | share of GIL samples |",
        "|---|---|",
    ]
    for label, suffix, function in STEPS:
        n = sum(c for frames, c in stacks if any(_has(f, suffix, function) for f in frames))
        lines.append(f"| {label.replace('  ', '&nbsp;&nbsp;')} | {n / total:.1%} |")
    own: collections.Counter[str] = collections.Counter()
    for frames, count in stacks:
        own[short(frames[-1])] += count
    lines += [
        "",
        "Functions by their own samples (the top 25):",
        "",
        "| function | share |",
        "|---|---|",
    ]
    for name, count in own.most_common(25):
        lines.append(f"| `{name}` | {count / total:.1%} |")
    return "\n".join(lines) + "\n"


def short(frame: str) -> str:
    """``function (file.py:line)`` with the file's path cut to its package."""
    name, _, where = frame.partition(" (")
    path, _, line = where.rstrip(")").rpartition(":")
    for marker in ("site-packages/", "lib/python3.11/", "/work/main/", "bench/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path}:{line})"


def commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=HERE,
        check=False,
    )
    return out.stdout.strip() or "unknown"


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
