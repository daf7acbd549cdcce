"""The dashboard with real volumes: the overview with 50 queues, and paging through
100,000 dead letters (docs/dashboard.md, "Measured").

    .venv/bin/python bench/dashboard.py --backend rabbitmq   # QUEUEY_TEST_AMQP_URL's vhost
    .venv/bin/python bench/dashboard.py --backend sqlite     # a file in a temporary folder

Each figure is a median over repeated requests through the ASGI app (Starlette's
TestClient: no network, the app's own time), wall and CPU time of this process, with
the peak of Python memory allocated during one page of dead letters (tracemalloc): a
page that loaded the whole queue would show it. ``uptime``'s load is printed beside
them; compare figures of one run only.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import threading
import time
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from queuey_core import Fatal, Handler, Job, Producer, Worker
from queuey_core.backends.open import open_backend
from queuey_core.settings import Settings, load_settings

warnings.simplefilter("ignore", DeprecationWarning)  # Starlette's TestClient on httpx

QUEUE = "bench.dash.dead"


class Doomed(Job):
    """Dead-lettered at once, with one of ten reasons."""

    NAME: ClassVar[str] = "bench.doomed"
    QUEUE: ClassVar[str] = QUEUE
    n: int


def doom(job: Doomed, ctx: object) -> None:
    raise Fatal(f"code {job.n % 10}")


def settings_for(url: str, queues: int) -> Settings:
    tables: dict[str, Any] = {f"bench.dash.q{n:02d}": {} for n in range(queues)}
    tables[QUEUE] = {"prefetch": 200}
    settings, _ = load_settings(os.devnull, overrides={"broker": {"url": url}, "queues": tables})
    return settings


def timed(call: Callable[[], object], times: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds of ``call``."""
    walls, cpus = [], []
    for _ in range(times):
        wall, cpu = time.perf_counter(), time.process_time()
        call()
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    return statistics.median(walls), statistics.median(cpus)


def fill_dead(settings: Settings, backend: Any, count: int) -> float:
    """``count`` dead letters on the bench queue, by a worker; seconds it took."""
    queue_set = settings.queue_set()
    have = backend.inspect([QUEUE]).queues[QUEUE]
    missing = count - (have.dead_letters or 0 if have is not None else 0)
    start = time.monotonic()
    if missing <= 0:
        return 0.0
    producer = Producer(backend, queue_set)
    for first in range(0, missing, 5000):
        producer.enqueue_many([Doomed(n=n) for n in range(first, min(missing, first + 5000))])
    worker = Worker(backend, queue_set, [Handler(Doomed, doom)], consume=[QUEUE])
    thread = threading.Thread(target=worker.run, name="bench-worker")
    thread.start()
    try:
        while (backend.inspect([QUEUE]).queues[QUEUE].dead_letters or 0) < count:
            time.sleep(0.5)
    finally:
        worker.handle.shutdown()
        thread.join()
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["rabbitmq", "sqlite"], default="rabbitmq")
    parser.add_argument("--queues", type=int, default=50)
    parser.add_argument("--dead", type=int, default=100_000)
    parser.add_argument("--times", type=int, default=20)
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)  # a hundred thousand "job failed fatally" errors

    from starlette.testclient import TestClient  # noqa: PLC0415

    from queuey_dashboard import create_app  # noqa: PLC0415

    if args.backend == "rabbitmq":
        url = os.environ.get("QUEUEY_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
    else:
        url = f"sqlite:///{Path(tempfile.mkdtemp()) / 'bench.db'}"
    settings = settings_for(url, args.queues)
    backend = open_backend(settings.broker)
    queue_set = settings.queue_set()
    backend.declare([queue_set[name] for name in queue_set])
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1 and 5 min)")
    filled = fill_dead(settings, backend, args.dead)
    print(f"{args.dead} dead letters on {args.backend} ({filled:.1f}s to make)")

    app = create_app(settings, backend=backend, control_backend=backend)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        client.get("/")  # the first request opens what it needs
        wall, cpu = timed(lambda: client.get("/").raise_for_status(), args.times)
        print(f"overview, {args.queues + 1} queues: median {wall:.1f} ms wall, {cpu:.1f} ms CPU")
        wall, cpu = timed(lambda: client.get("/fragments/queues").raise_for_status(), args.times)
        print(f"overview fragment (the 2 s refresh): median {wall:.1f} ms wall, {cpu:.1f} ms CPU")
        pages = [
            ("first page (50)", "offset=0&limit=50"),
            ("middle page", f"offset={args.dead // 2}&limit=50"),
            ("last page", f"offset={args.dead - 50}&limit=50"),
            ("filtered by reason", "reason=code%207&offset=0&limit=50"),
            ("filtered, deep page", f"reason=code%207&offset={args.dead // 20}&limit=50"),
        ]
        for label, query in pages:
            path = f"/queues/{QUEUE}/dead-letters?{query}"
            times = max(3, args.times // 4)
            wall, cpu = timed(lambda path=path: client.get(path).raise_for_status(), times)
            tracemalloc.start()
            client.get(path).raise_for_status()
            peak = tracemalloc.get_traced_memory()[1] / 1e6
            tracemalloc.stop()
            print(
                f"dead letters, {label}: median {wall:.0f} ms wall, {cpu:.0f} ms CPU, "
                f"peak Python memory {peak:.1f} MB"
            )
    backend.close()
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1 and 5 min)")


if __name__ == "__main__":
    main()
