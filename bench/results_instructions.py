"""Instructions recording costs the worker per job, counted by callgrind (load-immune).

    .venv/bin/python bench/results_instructions.py [--jobs 2000] [--small 500]
        [--kinds off,sqlite,sqlite-file,postgres] [--pg URL]

Wall-clock and CPU-time figures (bench/results.py) move with the machine's load;
instruction counts do not. For each kind this runs bench/results.py's ``run`` (one
process: the embedded backend, one worker of 8 job threads, no-op handlers returning a
small result, from the worker's start until every job is settled and every record
written) under ``valgrind --tool=callgrind``, twice: ``--small`` and ``--jobs`` jobs.
The difference divided by the difference in jobs is what one job costs the process
(start-up and imports cancel out). ``sqlite`` records into the broker's own file,
``sqlite-file`` into a file of its own, ``discard`` into a store that keeps nothing
(the cost of the hooks and the writer thread alone). For ``postgres`` only the worker process is
counted, not the server's work. The ratio printed is instructions per job with
recording off over those with it on (1.00 = no cost; the target is >= 0.85).
Never run as a test.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

HERE = Path(__file__).parent


def one(kind: str, jobs: int, pg: str) -> None:
    """Run ``jobs`` jobs of ``kind`` in this process (what callgrind counts)."""
    sys.path.insert(0, str(HERE))
    import results  # noqa: PLC0415 - bench/results.py, beside this file

    tmp = Path(tempfile.mkdtemp(prefix="queuey-results-ir-"))
    db = tmp / "broker.db"
    url = {
        "off": None,
        "discard": "discard",
        "sqlite": f"sqlite:///{db}",
        "sqlite-file": f"sqlite:///{tmp / 'jobs.db'}",
        "postgres": f"{pg}?schema=queuey_bench_{uuid.uuid4().hex[:10]}",
    }[kind]
    print(results.run(jobs, url, db), file=sys.stderr)


def count(kind: str, jobs: int, pg: str) -> tuple[int, float]:
    """Instructions (Ir) of one process running ``jobs`` jobs of ``kind``, and how many
    events a write carried (under valgrind, far fewer than at full speed: the writer
    lingers a fixed time, and the jobs run some 50 times slower)."""
    out = Path(tempfile.mkdtemp()) / "callgrind.out"
    argv = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        __file__,
        "--one",
        kind,
        "--jobs",
        str(jobs),
        "--pg",
        pg,
    ]
    ran = subprocess.run(argv, check=True, capture_output=True, text=True)
    found = re.search(r"^(?:summary|totals):\s+(\d+)", out.read_text(errors="replace"), re.M)
    if found is None:
        raise RuntimeError(f"no totals in {out}")
    per_write = re.search(r"'events_per_write': ([\d.]+)", ran.stderr)
    return int(found.group(1)), float(per_write.group(1)) if per_write else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--small", type=int, default=500)
    parser.add_argument("--kinds", default="off,discard,sqlite,sqlite-file,postgres")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one(args.one, args.jobs, args.pg)
        return
    per_job: dict[str, float] = {}
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    for kind in args.kinds.split(","):
        small, _ = count(kind, args.small, args.pg)
        large, per_write = count(kind, args.jobs, args.pg)
        per_job[kind] = (large - small) / (args.jobs - args.small)
        ratio = per_job["off"] / per_job[kind] if "off" in per_job else float("nan")
        print(
            f"{kind}: {per_job[kind] / 1e3:,.0f} k instructions per job, "
            f"ratio to off {ratio:.2f}, {per_write:.0f} events per write "
            f"(load average {load})",
            flush=True,
        )


if __name__ == "__main__":
    main()
