"""What tracing costs a running ``queuey worker``: untraced and traced, in the same rounds.

    .venv/bin/python bench/tracing.py [--rounds 4] [--jobs 20000] [--exporter otlp]
    .venv/bin/python bench/tracing.py --callgrind [--jobs 1000]

The traced worker runs as a user would run it in production: the SDK's
``BatchSpanProcessor`` with its default settings around the OTLP/HTTP (protobuf)
exporter (``--exporter drop``: the same processor, an exporter that drops each batch),
sending to a receiver in this harness that reads and counts every span (a collector's
work is not the worker's, but it runs on the same cores). Its jobs each carry a trace
context of their own, as jobs enqueued by a traced producer, one request each, do.

Four kinds of job, each drained by both workers in every round (the order swaps from
one round to the next): no-op jobs, jobs that spin the CPU for about 1 ms and 10 ms
(calibrated here first), and jobs that wait 20 ms without the CPU (64 threads, as
bench/run.py's I/O figure). For each kind: the same-round ratios of the traced worker to
the untraced one (CPU per job, and the running rate, launch left out) and the CPU a job
the traced one spends more, medians over rounds. Writes bench/TRACING.md.

``--callgrind``: the same two workers on no-op jobs under ``valgrind --tool=callgrind``,
which counts the instructions the whole process executes (every thread: the SDK's
export thread too) and is blind to the machine's load: instructions per job are the
difference between a run of ``--jobs`` and one of three times as many, divided by the
jobs between them (start-up cancels out). Slow: minutes a run. Never run as a test.
"""

from __future__ import annotations

import argparse
import datetime
import http.server
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import procs
from queuey_bench_handlers import spin
from run import IO_THREADS, THREADS, measure

HERE = Path(__file__).parent
#: The processor's schedule delay (the default is 5 s): a drain's last batch goes out
#: this soon after the queue is empty; batches of 512 spans go out as they fill, as
#: with the default.
SCHEDULE_DELAY_MS = 400
#: Seconds both workers run on, idle, after their queue is empty, before their CPU is read.
TAIL = 1.0


class Sink:
    """An OTLP/HTTP receiver (``/v1/traces``) that decodes and counts every span it is
    sent, and keeps none."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: PLC0415
            ExportTraceServiceRequest,
        )

        sink = self
        self.spans = 0
        self._lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = ExportTraceServiceRequest.FromString(body)
                n = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
                with sink._lock:
                    sink.spans += n
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{port}/v1/traces"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()


_SHARED: list[Sink] = []


def shared_sink() -> Sink:
    """One sink for the whole harness process (bench/run.py's traced figure)."""
    if not _SHARED:
        _SHARED.append(Sink())
    return _SHARED[0]


def calibrate(ms: float) -> int:
    """Rounds of :func:`spin` that take about ``ms`` of CPU here."""
    rounds = 200_000
    started = time.process_time()
    spin(rounds)
    took = time.process_time() - started
    return max(1, round(rounds * ms / 1e3 / took))


def worker_argv(
    exporter: str | None,
    endpoint: str,
    schedule_delay_ms: int = SCHEDULE_DELAY_MS,
    queue: str = "bench",
) -> list[str]:
    """The bench's ``queuey worker`` (8 threads; 64 for ``bench_io``, as bench/run.py
    runs them), traced to ``exporter`` or not."""
    argv = procs.queuey_argv(queue, IO_THREADS if queue == "bench_io" else THREADS)
    if exporter is None:
        return argv
    return [
        "env",
        f"QUEUEY_BENCH_TRACING={exporter}",
        f"QUEUEY_BENCH_OTLP={endpoint}",
        f"OTEL_BSP_SCHEDULE_DELAY={schedule_delay_ms}",
        *argv,
    ]


def drain(kind: str, n: int, exporter: str | None, sink: Sink) -> dict[str, Any]:
    """Fill ``bench`` with ``n`` jobs of ``kind`` and drain it with one worker.

    Time is counted from the first job on (a traced launch imports the SDK and the
    exporter: a cost paid once, not per job) until the queue is empty; CPU until
    ``TAIL`` seconds later, for both workers alike, so that the traced one's last
    batch, exported by then, is counted too.
    """
    queue = "bench_io" if kind == "io" else "bench"
    procs.purge(queue)
    measure("fill_queuey", n, kind if exporter is None else f"traced-{kind}")
    counter = procs.Counter()
    argv = worker_argv(exporter, sink.endpoint, queue=queue)
    run = procs.Run(argv, log=f"tracing-{exporter or 'off'}")
    before = sink.spans
    try:
        run.wait_until(lambda: run.first_job() == run.first_job(), timeout=120, every=0.001)
        cpu0, t0 = run.cpu_seconds(), time.perf_counter()
        run.wait_until(lambda: counter.ready(queue) == 0, timeout=900)
        took = time.perf_counter() - t0
        # Both workers idle as long, enough for the traced one's last batch to go out.
        time.sleep(TAIL)
        cpu = run.cpu_seconds() - cpu0
    finally:
        run.stop()
        counter.close()
    return {
        "cpu_us": cpu / (n - 1) * 1e6,
        "running_rate": (n - 1) / took,
        "spans": sink.spans - before,
        "jobs": n,
    }


def rounds(
    count: int, jobs: int, exporter: str, sink: Sink, only: list[str] | None
) -> dict[str, list[dict[str, Any]]]:
    """Every kind of job, untraced and traced, ``count`` rounds; the order swaps."""
    one_ms = calibrate(1)
    kinds = {
        "no-op": ("noop", jobs),
        "1 ms CPU": (f"cpu{one_ms}", max(500, jobs // 8)),
        "10 ms CPU": (f"cpu{one_ms * 10}", max(200, jobs // 60)),
        "20 ms I/O wait": ("io", jobs // 2),
    }
    if only:
        kinds = {k: v for k, v in kinds.items() if v[0].rstrip("0123456789") in only}
    out: dict[str, list[dict[str, Any]]] = {label: [] for label in kinds}
    for r in range(count):
        for label, (kind, n) in kinds.items():
            order: list[str | None] = [None, exporter] if r % 2 == 0 else [exporter, None]
            got = {str(e): drain(kind, n, e, sink) for e in order}
            got["load"] = {"load": os.getloadavg()[0]}
            out[label].append(got)
            off, on = got["None"], got[exporter]
            print(
                f"round {r + 1}, {label} ({n} jobs): CPU a job {off['cpu_us']:.0f} -> "
                f"{on['cpu_us']:.0f} us, running {off['running_rate']:,.0f} -> "
                f"{on['running_rate']:,.0f}/s, {on['spans']} spans exported, "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    return out


def summary(results: dict[str, list[dict[str, Any]]], exporter: str) -> list[str]:
    """One table row per kind of job: medians of the same-round figures."""
    rows = [
        "| job | CPU a job, untraced | traced | CPU ratio (min-max) | "
        "traced costs more a job | running rate ratio (min-max) | spans exported |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, got in results.items():
        cpu = [g[exporter]["cpu_us"] / g["None"]["cpu_us"] for g in got]
        more = [g[exporter]["cpu_us"] - g["None"]["cpu_us"] for g in got]
        rate = [g[exporter]["running_rate"] / g["None"]["running_rate"] for g in got]
        spans = sum(g[exporter]["spans"] for g in got)
        jobs = sum(g[exporter]["jobs"] for g in got)
        rows.append(
            f"| {label} | {statistics.median(g['None']['cpu_us'] for g in got):,.0f} us | "
            f"{statistics.median(g[exporter]['cpu_us'] for g in got):,.0f} us | "
            f"{statistics.median(cpu):.3f} ({min(cpu):.2f}-{max(cpu):.2f}) | "
            f"{statistics.median(more):+.0f} us | "
            f"{statistics.median(rate):.3f} ({min(rate):.2f}-{max(rate):.2f}) | "
            f"{spans:,} of {jobs:,} |"
        )
    return rows


# -- instruction counts ----------------------------------------------------------------


def instructions(n: int, exporter: str | None, sink: Sink, out: Path, kind: str = "noop") -> int:
    """Instructions a worker under callgrind executes, launch to stop, for ``n`` jobs."""
    procs.purge("bench")
    measure("fill_queuey", n, kind if exporter is None else f"traced-{kind}")
    # The default schedule delay: under callgrind a worker is some 50 times slower,
    # and its batches would otherwise go out half full.
    argv = worker_argv(exporter, sink.endpoint, schedule_delay_ms=5000)
    env_part = argv[: argv.index(str(procs.BIN / "queuey"))]
    queuey = argv[len(env_part) :]
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    procs.drain([*env_part, *valgrind, sys.executable, *queuey], "bench", n, log="callgrind")
    for line in out.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no instruction count in {out}")


def callgrind(jobs: int, exporter: str, sink: Sink, kind: str) -> list[str]:
    """Instructions per job, untraced and traced, from two runs each."""
    folder = Path(tempfile.mkdtemp(prefix="queuey-callgrind-"))
    per_job: dict[str, float] = {}
    for e in (None, exporter):
        counts = [instructions(n, e, sink, folder / f"{e}-{n}.out", kind) for n in (jobs, 3 * jobs)]
        per_job[str(e)] = (counts[1] - counts[0]) / (2 * jobs)
        print(f"{e or 'untraced'}: {counts} instructions -> {per_job[str(e)]:,.0f} a job")
    off, on = per_job["None"], per_job[exporter]
    return [
        f"| worker, {kind} jobs | instructions a job (callgrind) |",
        "|---|---|",
        f"| untraced | {off:,.0f} |",
        f"| traced ({exporter}) | {on:,.0f} |",
        f"| traced / untraced | {on / off:.3f} |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=20_000, help="no-op jobs a drain")
    parser.add_argument("--exporter", choices=["otlp", "drop"], default="otlp")
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument(
        "--callgrind-kind",
        default="noop",
        help="the jobs --callgrind runs: noop, or cpuN (N rounds of spin: 8000 are about "
        "7 M instructions, 1 ms of CPU on the bench machine)",
    )
    parser.add_argument(
        "--kinds",
        nargs="*",
        choices=["no-op", "1 ms", "10 ms", "20 ms I/O wait"],
        help="default: all three",
    )
    parser.add_argument("--out", type=Path, default=HERE / "TRACING.md")
    args = parser.parse_args()
    procs.compile_sources()
    sink = Sink()
    load = os.getloadavg()
    started = datetime.datetime.now(datetime.UTC)
    try:
        if args.callgrind:
            rows = callgrind(args.jobs, args.exporter, sink, args.callgrind_kind)
        else:
            got = rounds(args.rounds, args.jobs, args.exporter, sink, args.kinds)
            rows = summary(got, args.exporter)
    finally:
        sink.close()
    text = "\n".join(
        [
            f"`bench/tracing.py{' --callgrind' if args.callgrind else ''} --exporter "
            f"{args.exporter}`, {started:%Y-%m-%d %H:%M} UTC, commit {commit()}, "
            f"{args.rounds if not args.callgrind else 1} round(s); load average "
            f"{load[0]:.1f} before, {os.getloadavg()[0]:.1f} after.",
            "",
            *rows,
        ]
    )
    print(text)
    if not args.callgrind:
        args.out.write_text("# Tracing's cost (bench/tracing.py)\n\n" + text + "\n")


def commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=HERE,
        check=False,
    )
    return re.sub(r"\s", "", out.stdout) or "unknown"


if __name__ == "__main__":
    main()
