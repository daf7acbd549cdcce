"""Instructions recording costs the worker per job, counted by callgrind (load-immune).

    .venv/bin/python bench/results_instructions.py [--jobs 2000] [--small 500]
        [--kinds off,sqlite,sqlite-file,postgres] [--pg URL] [--linger 0.5]

Wall-clock and CPU-time figures (bench/results.py) move with the machine's load;
instruction counts do not. For each kind this runs bench/results.py's ``run`` (one
process: the embedded backend, one worker of 8 job threads, no-op handlers returning a
small result, from the worker's start until every job is settled and every record
written) under ``valgrind --tool=callgrind``, twice: ``--small`` and ``--jobs`` jobs.
The difference divided by the difference in jobs is what one job costs the process
(start-up and imports cancel out). ``sqlite`` records into the broker's own file,
``sqlite-file`` into a file of its own, ``discard`` into a store that keeps nothing
(the cost of the hooks and the writer thread alone). For ``postgres`` only the worker
process is counted, not the server's work. The writer's linger is stretched by
valgrind's slowdown (``--linger``, see :data:`SLOWDOWN`) so that a write carries about
as many events as at full speed. The ratio printed is instructions per job with
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

#: The writer's linger at full speed (queuey_core.results.recording.LINGER), and about
#: how much slower a job runs under callgrind: the linger is stretched by as much, so
#: that a write carries about as many events as at full speed (each line says how many:
#: compare with bench/results.py's). Unstretched, a write carries a handful of events
#: and the figure depends on the machine's load, through how many jobs end in 10 ms.
LINGER = 0.01
SLOWDOWN = 50


def one(kind: str, jobs: int, pg: str, linger: float) -> None:
    """Run ``jobs`` jobs of ``kind`` in this process (what callgrind counts)."""
    sys.path.insert(0, str(HERE))
    import results  # noqa: PLC0415 - bench/results.py, beside this file

    from queuey_core.results import recording  # noqa: PLC0415

    recording.LINGER = linger

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


def count(kind: str, jobs: int, pg: str, linger: float) -> tuple[int, float]:
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
        "--linger",
        str(linger),
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
    parser.add_argument(
        "--linger",
        type=float,
        default=LINGER * SLOWDOWN,
        help="the writer's linger under valgrind (default: the real one times 50)",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one(args.one, args.jobs, args.pg, args.linger)
        return
    per_job: dict[str, float] = {}
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    for kind in args.kinds.split(","):
        small, _ = count(kind, args.small, args.pg, args.linger)
        large, per_write = count(kind, args.jobs, args.pg, args.linger)
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
