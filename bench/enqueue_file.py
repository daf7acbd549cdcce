"""``queuey enqueue --file`` on a generated file: lines a second, CPU and peak memory.

    .venv/bin/python bench/enqueue_file.py [--lines 500000]

Writes a JSON-lines file of ``greet`` jobs (the example handlers), runs ``queuey enqueue
greet --file`` on it as a user would (every line checked, then published with confirms,
on the vhost of ``QUEUEY_BENCH_URL``), samples the process's resident memory, and
deletes the queue afterwards. Issue 25's targets: under 100 MB at any size, at least
15,000 lines a second. Never run as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pika
import psutil

sys.path.insert(0, str(Path(__file__).parent))

import procs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=500_000)
    args = parser.parse_args()
    procs.compile_sources()
    work = Path(tempfile.mkdtemp())
    config = work / "queuey.toml"
    # The example handlers' greet jobs go to "alpha": the bench's own name for it here.
    config.write_text(f'[broker]\nurl = "{procs.URL}"\n\n[queues.alpha]\nprefetch = 4\n')
    jobs = work / "jobs.jsonl"
    with jobs.open("w") as fh:
        for i in range(args.lines):
            fh.write(json.dumps({"name": f"name-{i:07d}"}) + "\n")
    _delete()
    argv = [str(procs.BIN / "queuey"), "--config", str(config), "--log-format", "json"]
    argv += ["enqueue", "greet", "--file", str(jobs)]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    watched = psutil.Process(proc.pid)
    peak, cpu = 0, 0.0
    while proc.poll() is None:
        try:
            peak = max(peak, watched.memory_info().rss)
            times = watched.cpu_times()
            cpu = times.user + times.system
        except psutil.Error:
            break
        time.sleep(0.02)
    _, stderr = proc.communicate()
    took = time.perf_counter() - started
    _delete()
    if proc.returncode:
        raise SystemExit(f"enqueue --file failed ({proc.returncode}):\n{stderr[-2000:]}")
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"{args.lines:,} lines ({jobs.stat().st_size / 2**20:.0f} MB): {took:.1f} s, "
        f"{args.lines / took:,.0f} lines/s, CPU {cpu / args.lines * 1e6:.0f} us a line "
        f"(at least), peak RSS {peak / 2**20:.0f} MB (load average {load})"
    )


def _delete() -> None:
    conn = pika.BlockingConnection(pika.URLParameters(procs.URL))
    ch = conn.channel()
    for name in ("alpha", "alpha.dlq"):
        ch.queue_delete(name)
    conn.close()


if __name__ == "__main__":
    main()
