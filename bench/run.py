"""Run the benchmark: queuey beside Dramatiq, Celery and raw pika, in the same rounds.

    ./scripts/bench [--rounds 5] [--jobs 20000]

Every worker is a process launched as its users launch it (``queuey worker``,
``dramatiq``, ``celery worker``), timed from launch until its queue is empty, its peak
resident memory sampled; within a round the systems run one after the other on the same
broker, in an order that rotates from round to round. Each figure is reported as the
median (and min-max) over rounds of the same-round ratio: this machine is shared and
noisy, so only ratios from one round compare. Writes bench/RESULTS.md, results.json and
throughput.png. Never run as a test.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import procs
import report

HERE = Path(__file__).parent
THREADS = 8
IO_THREADS = 64


def measure(name: str, *args: object) -> dict[str, Any]:
    """One measurement of measure.py, in a fresh process."""
    argv = [sys.executable, str(HERE / "measure.py"), name, *map(str, args)]
    return procs.json_from(argv, f"measure.py {name}")


def worker_figures(n: int, peers: bool, processes: bool) -> dict[str, Callable[[], dict[str, Any]]]:
    """Drain ``n`` no-op jobs: each system at 8 threads, as its users would run it (and
    queuey with ``--processes 2`` once it has that option)."""
    figures: dict[str, Callable[[], dict[str, Any]]] = {
        "queuey": lambda: _drain(
            "fill_queuey", procs.queuey_argv("bench", THREADS), "bench", n, "queuey"
        ),
        "raw pika": lambda: measure("raw_consumer", n),
        "queuey, SQLite file": lambda: _drain_file(n),
    }
    if procs.have_module("opentelemetry.exporter.otlp.proto.http"):
        # The same worker traced as in production (bench/tracing.py: a batching
        # processor, the OTLP/HTTP exporter), on jobs that each carry a trace context.
        figures["queuey, traced"] = lambda: _traced_drain(n)
    if processes:
        figures["queuey, 2 processes"] = lambda: _drain(
            "fill_queuey",
            procs.queuey_argv("bench", THREADS, "--processes", "2"),
            "bench",
            n,
            "queuey-2p",
        )
    if peers:
        figures["dramatiq"] = lambda: _drain(
            "fill_dramatiq", procs.dramatiq_argv(THREADS), "bench_dramatiq", n, "dramatiq"
        )
        figures["celery"] = lambda: _drain(
            "fill_celery", procs.celery_argv(THREADS), "bench_celery", n, "celery"
        )
    return figures


def io_figures(n: int, peers: bool) -> dict[str, Callable[[], dict[str, Any]]]:
    """Drain ``n`` jobs that each wait 20 ms without using the CPU, at 64 threads."""
    figures: dict[str, Callable[[], dict[str, Any]]] = {
        "queuey": lambda: _drain(
            "fill_queuey",
            procs.queuey_argv("bench_io", IO_THREADS),
            "bench_io",
            n,
            "queuey-io",
            kind="io",
        ),
    }
    if peers:
        figures["dramatiq"] = lambda: _drain(
            "fill_dramatiq",
            procs.dramatiq_argv(IO_THREADS),
            "bench_dramatiq_io",
            n,
            "dramatiq-io",
            kind="io",
        )
    return figures


def publish_figures(n: int, peers: bool) -> dict[str, Callable[[], dict[str, Any]]]:
    """Publish ``n`` jobs: queuey's confirmed enqueue_many beside unconfirmed sends."""
    figures = {
        "queuey": lambda: measure("queuey_enqueue_many", n),
        "raw pika": lambda: measure("raw_publish", n),
        "raw pika confirmed": lambda: measure("raw_publish_windowed", n),
    }
    if peers:
        figures["dramatiq"] = lambda: measure("dramatiq_send", n)
    return figures


def _drain(
    fill: str, argv: list[str], queue: str, n: int, label: str, kind: str = "noop"
) -> dict[str, Any]:
    procs.purge(queue)
    measure(fill, n, kind)
    return procs.drain(argv, queue, n, log=label)


def _drain_file(n: int) -> dict[str, Any]:
    """The same worker and jobs on the embedded backend: a fresh SQLite file a run."""
    import latency  # noqa: PLC0415 - its config() writes the file's queuey.toml

    config = latency.config("sqlite")
    db = config.parent / "queuey.db"
    try:
        measure("fill_queuey_file", n, db)
        argv = procs.queuey_argv("bench", THREADS)
        argv[argv.index("--config") + 1] = str(config)
        return procs.drain_file(argv, db, "bench", n, log="queuey-file")
    finally:
        shutil.rmtree(config.parent, ignore_errors=True)


def _traced_drain(n: int) -> dict[str, Any]:
    import tracing  # noqa: PLC0415 - it imports this module

    argv = tracing.worker_argv("otlp", tracing.shared_sink().endpoint)
    return _drain("fill_queuey", argv, "bench", n, "queuey-traced", kind="traced")


def rounds(
    title: str, figures: dict[str, Callable[[], dict[str, Any]]], count: int
) -> list[dict[str, dict[str, Any]]]:
    """``count`` rounds of every figure, the order rotating from one round to the next."""
    names = list(figures)
    out = []
    for r in range(count):
        order = names[r % len(names) :] + names[: r % len(names)]
        got: dict[str, dict[str, Any]] = {}
        for name in order:
            got[name] = figures[name]()
        out.append(got)
        shown = ", ".join(f"{k} {v['rate']:,.0f}/s" for k, v in got.items())
        print(f"{title}: round {r + 1}: {shown}", flush=True)
    return out


def latency(rate: float, seconds: float) -> dict[str, float]:
    """Enqueue-to-start waits of Stamped jobs at ``rate`` a second into a running
    ``queuey worker`` (defaults, 8 threads): p50, p99, max in ms."""
    procs.purge("bench")
    run = procs.Run(procs.queuey_argv("bench", THREADS), log="queuey-latency")
    counter = procs.Counter()
    try:
        # Started once its consumer is registered (the queue shows a consumer).
        deadline = time.monotonic() + 30
        while counter.consumers("bench") == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        sent = measure("publish_stamped", float(rate), float(seconds))["sent"]
        deadline = time.monotonic() + 60
        while len(run.lines) < sent and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        run.stop()
        counter.close()
    waits = sorted(int(line) / 1000 for _, line in run.lines if line.isdigit())
    if len(waits) < sent:
        raise RuntimeError(f"latency: {len(waits)} of {sent} jobs reported")
    return {
        "p50": statistics.median(waits),
        "p99": waits[max(0, int(len(waits) * 0.99) - 1)],
        "max": waits[-1],
        "rate": rate,
    }


def has_processes() -> bool:
    """Whether ``queuey worker`` takes ``--processes`` (the scale-out issue) yet."""
    help_text = subprocess.run(
        [str(procs.BIN / "queuey"), "worker", "--help"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout
    return "--processes" in help_text


def cpu_figures(n: int, work: int) -> dict[str, Callable[[], dict[str, Any]]]:
    """CPU-bound jobs (``work`` rounds of pure Python each): 1 process against 2."""
    return {
        f"processes {p}": (
            lambda p=p: _drain(
                "fill_queuey",
                procs.queuey_argv("bench", THREADS, "--processes", str(p)),
                "bench",
                n,
                f"queuey-cpu{p}",
                kind=f"cpu{work}",
            )
        )
        for p in (1, 2)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--io-jobs", type=int, default=6_400)
    parser.add_argument("--latency-seconds", type=float, default=4.0)
    parser.add_argument(
        "--redraw", action="store_true", help="Rewrite RESULTS.md and redraw from results.json."
    )
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="Only queuey's worker with tracing off and on, and their ratio.",
    )
    args = parser.parse_args()
    if args.tracing:
        tracing(args.jobs, args.rounds)
        return
    if args.redraw:
        kept = json.loads((HERE / "results.json").read_text())
        (HERE / "RESULTS.md").write_text(report.markdown(kept))
        report.draw(kept, HERE / "throughput.png")
        return
    procs.compile_sources()
    peers = procs.have("dramatiq") and procs.have("celery")
    if not peers:
        print("Dramatiq and Celery are not installed (pip install -e '.[bench]'): raw pika only")
    load_before = os.getloadavg()
    started = time.monotonic()
    results: dict[str, Any] = {
        "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip(),
        "machine": machine(),
        "rounds": args.rounds,
        "jobs": args.jobs,
        "io_jobs": args.io_jobs,
    }
    processes = has_processes()
    results["worker"] = rounds("worker", worker_figures(args.jobs, peers, processes), args.rounds)
    results["io"] = rounds("I/O-bound", io_figures(args.io_jobs, peers), args.rounds)
    results["publish"] = rounds("publish", publish_figures(args.jobs, peers), args.rounds)
    queuey_rate = statistics.median(r["queuey"]["running_rate"] for r in results["worker"])
    busy = round(queuey_rate * 0.8, -1)
    results["latency"] = [latency(busy, args.latency_seconds) for _ in range(args.rounds)]
    if processes:
        results["cpu"] = rounds("CPU-bound", cpu_figures(args.jobs // 10, 20_000), args.rounds)
    else:
        results["cpu"] = None
        print("queuey worker has no --processes yet: the CPU-bound figure is skipped")
    results["load"] = {
        "before": load_before,
        "after": os.getloadavg(),
        "minutes": (time.monotonic() - started) / 60,
    }
    (HERE / "results.json").write_text(json.dumps(results, indent=1))
    text = report.markdown(results)
    (HERE / "RESULTS.md").write_text(text)
    print(text)
    report.draw(results, HERE / "throughput.png")


def tracing(n: int, count: int) -> None:
    """Tracing's cost: queuey's worker off and on, in the same rounds, as ratios."""
    procs.compile_sources()
    figures = worker_figures(n, peers=False, processes=False)
    got = rounds("tracing", {k: figures[k] for k in ("queuey", "queuey, traced")}, count)
    for i, r in enumerate(got, start=1):
        shown = ", ".join(
            f"{k}: running {v['running_rate']:,.0f}/s, {v['cpu_us']:.0f} us CPU a job"
            for k, v in r.items()
        )
        print(f"round {i}: {shown}")
    print(report.tracing_line(got))


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = []
    for dist in ("pika", "dramatiq", "celery"):
        try:
            from importlib.metadata import version  # noqa: PLC0415

            versions.append(f"{dist} {version(dist)}")
        except Exception:
            pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, Python {platform.python_version()}, "
        f"RabbitMQ {rabbit_version()}, {', '.join(versions)}"
    )


def rabbit_version() -> str:
    try:
        from queuey_core.backends.rabbitmq import RabbitMQBackend  # noqa: PLC0415

        backend = RabbitMQBackend(procs.URL)
        version = backend.server_version
        backend.close()
        return version
    except Exception:
        return "?"


if __name__ == "__main__":
    main()
