"""``queuey`` commands run as a user runs them, on one backend of the contract suite: a
folder with a queuey.toml, the backend's broker URL and its job store."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import ExitStack
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.backend_kinds import BackendKind
from tests.backend_kinds import drop_schema
from tests.backend_kinds import store_url
from tests.conftest import require_broker
from tests.integration.processes import JsonLogProcess
from tests.integration.processes import module_command

#: The example handlers' queues (handlers/), with retries short enough for a test.
CONFIG = """
[worker]
shutdown_timeout = "20s"

[queues.alpha]
prefetch = 4
max_priority = 10
retry = { max_attempts = 2, backoff = "fixed", initial = "100ms", max = "100ms", jitter = false }

[queues.beta]
prefetch = 1
retry = { max_attempts = 2, backoff = "fixed", initial = "100ms", max = "100ms", jitter = false }
"""

QUEUES = ("alpha", "beta")


class Project:
    """A folder whose commands all reach one backend (and its job store)."""

    def __init__(self, root: Path, kind: BackendKind, *, lease: int) -> None:
        assert kind.cli_url is not None, f"no command reaches the {kind.name} backend"
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.kind = kind
        self.config = root / "queuey.toml"
        self.config.write_text(CONFIG)
        url = kind.cli_url(str(root))
        if kind.supports("leases"):
            url = f"{url}?lease={lease}"
        clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("QUEUEY_")}
        self.env = {**clean, "PYTHONUNBUFFERED": "1", "QUEUEY_BROKER__URL": url}
        self.store: str | None = None
        if kind.store in ("sqlite", "postgres"):
            self.store = store_url(kind, None, str(root))
            self.env["QUEUEY_RESULTS__URL"] = self.store

    def run(self, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        """``queuey ARGS`` to its end; it must exit ``code``, and never with a traceback."""
        done = subprocess.run(
            module_command(self.config, *args),
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        crashed = [line for line in done.stderr.splitlines() if line.startswith("Traceback")]
        assert not crashed, done.stderr
        assert done.returncode == code, f"exit {done.returncode}: {done.stderr[-2000:]}"
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json").stdout)

    def enqueue(self, *args: str) -> str:
        """``queuey enqueue ARGS``: the job id it printed."""
        return self.run("enqueue", *args).stdout.strip()

    def start(self, *args: str) -> JsonLogProcess:
        """``queuey ARGS`` running, its JSON log lines read as they come."""
        return JsonLogProcess(module_command(self.config, *args), env=self.env, cwd=self.root)

    def state(self, job_id: str) -> str:
        return str(self.json("job", job_id)["state"])

    def queue(self, name: str) -> dict[str, Any]:
        found = self.json("queues")
        return next(q for q in found["queues"] if q["name"] == name)

    def counts(self, name: str) -> tuple[int, int]:
        """(ready, unacked) of queue ``name``. RabbitMQ tells unacked only through its
        management API, which the project does not set: there it counts as 0."""
        found = self.queue(name)
        return int(found["ready"] or 0), int(found["unacked"] or 0)


def wait(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``cond`` until it holds; generous, for a loaded machine."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)


@contextmanager
def project_on(kind: BackendKind, root: Path, *, lease: int = 1) -> Iterator[Project]:
    """A :class:`Project` on ``kind``; its queues, store and processes are gone after."""
    with ExitStack() as stack:
        if kind.needs_broker:
            require_broker()
            from tests.integration.broker import delete_queues  # noqa: PLC0415

            delete_queues(*QUEUES)
            stack.callback(delete_queues, *QUEUES)
        project = Project(root, kind, lease=lease)
        if kind.store == "postgres":
            assert project.store is not None
            stack.callback(drop_schema, project.store)
        stack.callback(shutil.rmtree, root, True)
        yield project
