"""What expiring finished workflows costs: one call of the store's expiry (a worker's
sweep makes it at most once a minute) over 5,000 finished workflows of 10 members.

    .venv/bin/python bench/workflow_expiry.py [STORE_URL]

Without a URL, on a fresh embedded file; with ``postgresql://...?schema=NAME``, in that
schema (dropped after). The rows are written straight into the tables (succeeded, last
changed at 1 ms after the epoch), then one ``expire`` call deletes them, 100 workflows a
transaction. Never run as a test.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.workflows import WorkflowStore, open_workflow_store

WORKFLOWS, MEMBERS = 5000, 10


def fill(store: WorkflowStore) -> None:
    """Write WORKFLOWS finished workflows of MEMBERS members, the last waiting on the rest."""
    with store.transaction() as cur:
        for w in range(WORKFLOWS):
            wid = f"w{w}"
            cur.execute(
                store.sql(
                    "INSERT INTO {w} (workflow_id, name, state, on_failure, members, "
                    "created_at, updated_at) VALUES (?, '', 'succeeded', 'cancel', ?, 1, 1)"
                ),
                [wid, MEMBERS],
            )
            cur.executemany(
                store.sql(
                    "INSERT INTO {m} (job_id, workflow_id, position, role, job_type, state, "
                    "waiting, receives, takes, envelope, ready_at) "
                    "VALUES (?, ?, ?, 'member', 't', 'succeeded', 0, NULL, 'one', '{}', NULL)"
                ),
                [(f"{wid}m{i}", wid, i) for i in range(MEMBERS)],
            )
            cur.executemany(
                store.sql("INSERT INTO {e} (parent, child, position) VALUES (?, ?, ?)"),
                [(f"{wid}m{i}", f"{wid}m{MEMBERS - 1}", i) for i in range(MEMBERS - 1)],
            )


def main(url: str | None) -> None:
    if url is None:
        url = f"sqlite:///{tempfile.mkdtemp()}/bench.db"
        SqliteBackend(url).close()  # a queuey file of the current schema
    store = open_workflow_store(url)
    try:
        fill(store)
        started = time.perf_counter()
        gone = store.expire(10)
        took = time.perf_counter() - started
        print(
            f"{url.partition('://')[0]}: {gone} workflows of {MEMBERS} members expired in "
            f"{took * 1000:.0f} ms ({took / (gone / 100) * 1000:.1f} ms a transaction of 100)"
        )
        if url.startswith("postgres"):
            with store.transaction() as cur:
                cur.execute(store.sql("DROP TABLE {e}, {m}, {w}"))
    finally:
        store.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
