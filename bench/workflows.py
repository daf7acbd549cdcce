"""The workflow benchmarks: a chain's step-to-step latency, and a group's callback latency.

    .venv/bin/python bench/workflows.py chain [--backend sqlite|rabbitmq] [--steps 200]
    .venv/bin/python bench/workflows.py callback [--backend sqlite|rabbitmq] [--no-results]

``chain``: one chain of ``--steps`` no-op steps, each receiving the one before's result;
the figure is the time from a step's handler returning to the next step's handler
starting (the member's end recorded, the next step written to the outbox, published,
delivered, its start recorded), median and 90th percentile, on one worker in this
process (8 job threads).

``callback``: a group of N no-op members and a callback receiving all their results
(``--no-results``: receiving none); the figure is the time from the last member's
handler returning to the callback's handler starting, for each N, and how it grows with
N. With the results, the callback's payload holds N of them (read in one query, encoded,
published, decoded); without, what is left is the end's own work. The start of the workflow (one
transaction and the publish of N members) is timed too.

``--backend sqlite`` runs on a fresh embedded file (the workflow in the file);
``--backend rabbitmq`` on ``$QUEUEY_TEST_AMQP_URL`` (queue ``bench.workflows``, deleted
after) with the workflow in a SQLite job store on a fresh file, or in PostgreSQL with
``--store $QUEUEY_TEST_PG_URL``. The machine's load (``uptime``) is printed beside.
Never run as a test.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run from the repository root, never with this folder first on the path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import argparse  # noqa: E402
import itertools  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from typing import Any, ClassVar  # noqa: E402

from pydantic import Field  # noqa: E402

from queuey_core import Handler, Job, JobContext, QueueConfig, QueueSet, Worker  # noqa: E402
from queuey_core.workflows import (  # noqa: E402
    WorkflowHook,
    Workflows,
    chain,
    group,
    open_workflow_store,
    step,
)
from queuey_core.workflows.shapes import Workflow  # noqa: E402

QUEUE = "bench.workflows"


class Link(Job):
    NAME: ClassVar[str] = "bench.wf.link"
    QUEUE: ClassVar[str] = QUEUE
    n: int
    prev: int | None = None


class Gather(Job):
    NAME: ClassVar[str] = "bench.wf.gather"
    QUEUE: ClassVar[str] = QUEUE
    parts: list[int] = Field(default_factory=list)


class Clock:
    """When each handler started and returned, by job id (wall clock, seconds)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.starts: dict[uuid.UUID, float] = {}
        self.ends: dict[uuid.UUID, float] = {}
        self.gathered = threading.Event()

    def link(self, job: Link, ctx: JobContext) -> int:
        now = time.time()
        with self.lock:
            self.starts.setdefault(ctx.job_id, now)
        result = job.n + (job.prev or 0)
        with self.lock:
            self.ends[ctx.job_id] = time.time()
        return result

    def gather(self, job: Gather, ctx: JobContext) -> int:
        with self.lock:
            self.starts.setdefault(ctx.job_id, time.time())
        self.gathered.set()
        return len(job.parts)


def open_side(backend_name: str, store: str | None, folder: str) -> tuple[Any, str]:
    if backend_name == "sqlite":
        from queuey_core.backends.sqlite import SqliteBackend  # noqa: PLC0415

        url = f"sqlite:///{folder}/bench.db"
        return SqliteBackend(url), url
    from queuey_core.backends.rabbitmq import RabbitMQBackend  # noqa: PLC0415

    amqp = os.environ.get("QUEUEY_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
    return RabbitMQBackend(amqp), store or f"sqlite:///{folder}/store.db"


def run(backend_name: str, store: str | None, make: Any, measure: Any) -> Any:
    folder = tempfile.mkdtemp(prefix="queuey-bench-wf-")
    backend, url = open_side(backend_name, store, folder)
    queues = QueueSet([QueueConfig(QUEUE, prefetch=64)])
    flows = Workflows(backend, queues, open_workflow_store(url))
    clock = Clock()
    worker = Worker(
        backend,
        queues,
        [Handler(Link, clock.link), Handler(Gather, clock.gather)],
        hooks=[WorkflowHook(flows)],
        concurrency=8,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        began = time.perf_counter()
        workflow_id = flows.start(make())
        started = time.perf_counter() - began
        return measure(flows, clock, workflow_id, started)
    finally:
        worker.handle.shutdown()
        thread.join(60)
        flows.store.close()
        if backend_name == "rabbitmq":
            import pika  # noqa: PLC0415 - RabbitMQ only

            conn = pika.BlockingConnection(
                pika.URLParameters(
                    os.environ.get("QUEUEY_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
                )
            )
            ch = conn.channel()
            ch.queue_delete(QUEUE)
            ch.queue_delete(f"{QUEUE}.dlq")
            conn.close()
        backend.close()


def wait_done(flows: Workflows, workflow_id: uuid.UUID, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while True:
        found = flows.get(workflow_id)
        if found is not None and found.state == "succeeded":
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"workflow {workflow_id} did not finish: {found}")
        time.sleep(0.05)


def bench_chain(backend_name: str, store: str | None, steps: int) -> None:
    def make() -> Workflow:
        first = Link(n=0)
        rest = [step(Link(n=i), receives="prev") for i in range(1, steps)]
        return Workflow(chain(first, *rest))

    def measure(flows: Workflows, clock: Clock, workflow_id: uuid.UUID, _: float) -> list[float]:
        wait_done(flows, workflow_id)
        found = flows.get(workflow_id)
        assert found is not None
        ids = [uuid.UUID(n.job_id) for n in found.nodes]
        return [(clock.starts[b] - clock.ends[a]) * 1000 for a, b in itertools.pairwise(ids)]

    gaps = run(backend_name, store, make, measure)
    cuts = statistics.quantiles(gaps, n=10)
    print(
        f"chain of {steps} on {backend_name}: step end -> next step start "
        f"median {statistics.median(gaps):.1f} ms, p90 {cuts[-1]:.1f} ms, "
        f"min {min(gaps):.1f} ms, max {max(gaps):.1f} ms"
    )


def bench_callback(
    backend_name: str, store: str | None, sizes: list[int], *, receives: bool
) -> None:
    results = []
    for size in sizes:

        def make(size: int = size) -> Workflow:
            members = [Link(n=i) for i in range(size)]
            callback = step(Gather(), receives="parts" if receives else None)
            return Workflow(group(*members).then(callback))

        def measure(
            flows: Workflows, clock: Clock, workflow_id: uuid.UUID, started: float
        ) -> tuple[float, float]:
            if not clock.gathered.wait(900):
                raise SystemExit("the callback never started")
            wait_done(flows, workflow_id)
            found = flows.get(workflow_id)
            assert found is not None
            callback = uuid.UUID(found.nodes[-1].job_id)
            last_end = max(clock.ends.values())
            return (clock.starts[callback] - last_end) * 1000, started

        latency, started = run(backend_name, store, make, measure)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        results.append((size, latency))
        given = "with" if receives else "without"
        print(
            f"group of {size} + callback ({given} the results) on {backend_name}: "
            "last member end -> callback "
            f"start {latency:.1f} ms (start of the workflow {started * 1000:.0f} ms; "
            f"peak RSS so far {rss:.0f} MB)"
        )
    base_size, base = results[0]
    for size, latency in results[1:]:
        print(f"  x{size // base_size} members: callback latency x{latency / base:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["chain", "callback"])
    parser.add_argument("--backend", choices=["sqlite", "rabbitmq"], default="sqlite")
    parser.add_argument("--store", default=None, help="RabbitMQ: the job store's URL")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument(
        "--no-results",
        action="store_true",
        help="callback: a callback that receives nothing (the end's own cost, no payload)",
    )
    args = parser.parse_args()
    load = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout
    print(f"load: {load.strip()}")
    if args.what == "chain":
        bench_chain(args.backend, args.store, args.steps)
    else:
        sizes = [int(s) for s in args.sizes.split(",")]
        bench_callback(args.backend, args.store, sizes, receives=not args.no_results)


if __name__ == "__main__":
    main()
