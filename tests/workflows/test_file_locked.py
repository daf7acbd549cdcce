"""The embedded file locked by another process while workflow members end: the file is
both the queue and the workflows' store, so neither an end nor a settle can be written;
once the lock goes, every member's end is recorded (held, or its lease expired and it
ran again) and the workflow finishes with one callback. On the manual clock."""

from __future__ import annotations

import sqlite3
import threading

from queuey_core.backends.sqlite import SqliteBackend
from queuey_core.workflows import Workflow
from queuey_core.workflows import group
from queuey_core.workflows import step
from tests.harness import RecordingSqlite
from tests.harness import SqliteEnv
from tests.workflows.support import Add
from tests.workflows.support import Rig
from tests.workflows.support import Total


class QuickLockEnv(SqliteEnv):
    """A file whose busy timeout is short: a lock held elsewhere answers in 0.2 s."""

    def __init__(self) -> None:
        super().__init__()
        self.inner.close()
        self.url = f"{self.url}?busy_timeout=0.2"
        self.inner = SqliteBackend(self.url, clock=self.manual)
        self.backend = RecordingSqlite(self.inner)


def test_members_ending_while_the_file_is_locked_finish_the_workflow_once_it_is_free() -> None:
    h = QuickLockEnv()
    rig = Rig(h, h.url)
    lock = sqlite3.connect(h.url.removeprefix("sqlite:///").partition("?")[0])
    lock.isolation_level = None
    locked = threading.Event()

    def once_locked() -> None:  # each member ends once the file is locked
        locked.wait(30)

    try:
        rig.before_add = once_locked
        rig.start()
        shape = group(Add(x=1), Add(x=2)).then(step(Total(), receives="parts"))
        wid = rig.flows.start(Workflow(shape))
        h.wait_for(lambda: len(rig.runs("wf.add")) == 2)
        lock.execute("BEGIN EXCLUSIVE")
        locked.set()
        try:
            h.wait_for(lambda: rig.hook.held >= 2)
        finally:
            lock.execute("COMMIT")
        done = rig.wait_state(wid, "succeeded")
        h.wait_for(lambda: len(rig.runs("wf.total")) == 1)
        assert rig.runs("wf.total")[0].payload["parts"] == [1, 2], "both ends recorded"
        assert [n.state for n in done.nodes] == ["succeeded"] * 3
        assert all(r.started_before for r in rig.runs("wf.add")[2:]), "reruns are told"
        h.elapse(60)
        assert len(rig.runs("wf.total")) == 1, "the callback ran once"
    finally:
        lock.close()
        rig.stop()
        h.close()
