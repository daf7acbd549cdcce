"""A workflow's store out of reach while its members end: on RabbitMQ with a SQLite
store locked by another process's transaction, and with a PostgreSQL store behind a
network cut, each member is held (deferred, its end not lost) until the store is back,
and then the workflow finishes with one callback (docs/workflows.md, "Guarantees")."""

from __future__ import annotations

import sqlite3
import tempfile
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from queuey_core.errors import JobStoreError
from queuey_core.workflows import Workflow
from queuey_core.workflows import group
from queuey_core.workflows import step
from tests.backend_kinds import PG_URL
from tests.backend_kinds import drop_schema
from tests.conftest import require_broker
from tests.harness import RabbitEnv
from tests.integration.tcp_cut import Cuttable
from tests.workflows.support import Add
from tests.workflows.support import Rig
from tests.workflows.support import Total

pytestmark = pytest.mark.integration


@pytest.fixture
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="queuey-wf-down-") as name:
        yield Path(name)


def test_members_ending_while_the_store_is_locked_finish_the_workflow_once_it_is_free(
    folder: Path,
) -> None:
    require_broker()
    path = folder / "store.db"
    # A short busy timeout: a locked store answers "database is locked" in 0.2 s.
    rig = Rig(RabbitEnv(), f"sqlite:///{path}?busy_timeout=0.2")
    lock = sqlite3.connect(path, isolation_level=None)
    try:
        locked = threading.Event()

        def once_locked() -> None:  # each member ends once the store is locked
            locked.wait(30)

        rig.before_add = once_locked
        rig.start()
        shape = group(Add(x=1), Add(x=2), Add(x=3)).then(step(Total(), receives="parts"))
        wid = rig.flows.start(Workflow(shape))
        rig.h.wait_for(lambda: len(rig.runs("wf.add")) == 3)
        lock.execute("BEGIN EXCLUSIVE")  # another process holds the file from here
        locked.set()
        try:
            rig.h.wait_for(lambda: rig.hook.held >= 6)
        finally:
            lock.execute("COMMIT")
        done = rig.wait_state(wid, "succeeded")
        rig.h.wait_for(lambda: len(rig.runs("wf.total")) == 1)
        assert rig.runs("wf.total")[0].payload["parts"] == [1, 2, 3], "every end recorded"
        assert [n.state for n in done.nodes] == ["succeeded"] * 4
        reruns = rig.runs("wf.add")[3:]
        assert all(r.started_before for r in reruns), "every rerun is told"
        rig.h.elapse(1)
        assert len(rig.runs("wf.total")) == 1, "the callback ran once"
    finally:
        lock.close()
        rig.stop()
        rig.h.close()


def test_members_ending_while_postgresql_is_cut_off_finish_the_workflow_once_it_is_back() -> None:
    require_broker()
    pg = urllib.parse.urlsplit(PG_URL)
    proxy = Cuttable(pg.hostname or "127.0.0.1", pg.port or 5432)
    schema = f"queuey_wf_cut_{uuid.uuid4().hex[:12]}"
    netloc = f"{pg.username}@127.0.0.1:{proxy.port}"
    url = urllib.parse.urlunsplit(("postgresql", netloc, pg.path, f"schema={schema}", ""))
    rig = Rig(RabbitEnv(), url)
    cut = threading.Event()

    def once_cut() -> None:  # each member ends once the store is cut off
        cut.wait(30)

    try:
        rig.before_add = once_cut
        rig.start()
        shape = group(Add(x=1), Add(x=2), Add(x=3)).then(step(Total(), receives="parts"))
        wid = rig.flows.start(Workflow(shape))
        rig.h.wait_for(lambda: len(rig.runs("wf.add")) == 3)
        proxy.cut()
        cut.set()
        try:
            rig.h.wait_for(lambda: rig.hook.held >= 6)
        finally:
            proxy.mend()

        def state() -> str:
            try:
                return rig.view(wid).state
            except JobStoreError:  # this thread's connection died in the cut: a new one
                return "?"

        rig.h.wait_for(lambda: state() == "succeeded")
        done = rig.view(wid)
        rig.h.wait_for(lambda: len(rig.runs("wf.total")) == 1)
        assert rig.runs("wf.total")[0].payload["parts"] == [1, 2, 3], "every end recorded"
        assert [n.state for n in done.nodes] == ["succeeded"] * 4
        assert all(r.started_before for r in rig.runs("wf.add")[3:]), "every rerun is told"
        rig.h.elapse(1)
        assert len(rig.runs("wf.total")) == 1, "the callback ran once"
    finally:
        rig.stop()
        rig.h.close()
        proxy.close()
        drop_schema(f"{PG_URL}?schema={schema}")
