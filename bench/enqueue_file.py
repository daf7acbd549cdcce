"""``queuey enqueue --file`` on a generated file: lines a second, CPU and peak memory.

    .venv/bin/python bench/enqueue_file.py [--lines 500000] [--backend rabbitmq|embedded]

Writes a JSON-lines file of ``greet`` jobs (the example handlers), runs ``queuey enqueue
greet --file`` on it as a user would (every line checked, then published with confirms,
on the vhost of ``QUEUEY_BENCH_URL``; or, with ``--backend embedded``, committed into a
fresh SQLite file), samples the process's resident memory, and deletes the queue
afterwards. Issue 25's targets: under 100 MB at any size, at least
15,000 lines a second. Never run as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
    parser.add_argument("--backend", choices=("rabbitmq", "embedded"), default="rabbitmq")
    args = parser.parse_args()
    procs.compile_sources()
    work = Path(tempfile.mkdtemp())
    config = work / "queuey.toml"
    embedded = args.backend == "embedded"
    url = f"sqlite:///{work / 'queuey.db'}" if embedded else procs.URL
    # The example handlers' greet jobs go to "alpha": the bench's own name for it here.
    config.write_text(f'[broker]\nurl = "{url}"\n\n[queues.alpha]\nprefetch = 4\n')
    jobs = work / "jobs.jsonl"
    with jobs.open("w") as fh:
        for i in range(args.lines):
            fh.write(json.dumps({"name": f"name-{i:07d}"}) + "\n")
    if not embedded:
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
    if not embedded:
        _delete()
    if proc.returncode:
        raise SystemExit(f"enqueue --file failed ({proc.returncode}):\n{stderr[-2000:]}")
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    # The command's own line: the publishing pass alone (the check and the launch left out).
    said = re.search(r"in ([\d.]+)s \(([\d,]+)/s\)", stderr)
    publishing = f", publishing {said.group(2)} lines/s" if said else ""
    print(
        f"{args.backend}, {args.lines:,} lines ({jobs.stat().st_size / 2**20:.0f} MB): "
        f"{took:.1f} s, "
        f"{args.lines / took:,.0f} lines/s{publishing}, CPU {cpu / args.lines * 1e6:.0f} us "
        f"a line (at least), peak RSS {peak / 2**20:.0f} MB (load average {load})"
    )
    if not embedded and said:
        # The baseline of the same sitting: what the broker takes from raw pika, as many
        # persistent, mandatory messages with 1,000 confirms in flight, into an empty queue.
        raw = procs.json_from(
            [
                sys.executable,
                str(Path(__file__).parent / "measure.py"),
                "raw_publish_windowed",
                str(args.lines),
            ],
            "raw pika",
        )["rate"]
        ours = float(said.group(2).replace(",", ""))
        print(f"raw pika, 1,000 confirms in flight: {raw:,.0f} msg/s; ours / it: {ours / raw:.2f}")


def _delete() -> None:
    conn = pika.BlockingConnection(pika.URLParameters(procs.URL))
    ch = conn.channel()
    for name in ("alpha", "alpha.dlq"):
        ch.queue_delete(name)
    conn.close()


if __name__ == "__main__":
    main()
