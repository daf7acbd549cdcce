"""``queuey enqueue --wait [TIMEOUT]``: record the job as queued, wait for its end,
print its result.

``--wait`` alone waits with no limit; ``--wait 30s`` / ``--wait=30`` give up after that
long (``--timeout 30s`` says the same, for the scripts that used it). The rule for the
word after a bare ``--wait``: it is the timeout when it is a number, with or without a
unit (``500ms``, ``30``, ``1.5m``), and anything else otherwise (``--wait
'{"name": "ada"}'`` leaves the payload a payload):
:class:`~queuey_cli.enqueue_args.EnqueueCommand` applies it before Click parses, as
Click's options take a value always or never.

Exit codes with ``--wait``: 0 the job succeeded (its result on stdout, as JSON, after
its id), 5 it was dead-lettered or cancelled (the reason on stderr), 6 it had not
finished within the timeout. Without a job store, ``--wait`` is a usage error (exit 2)
before anything is enqueued, with the one line that says how to configure one. With a
store and no ``--wait``, the job is recorded as queued all the same.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import typer

from queuey_cli.common import usage, warn
from queuey_cli.output import Exit, error, say
from queuey_core.errors import JobFailed, JobWaitTimeout, QueueyError
from queuey_core.results import JobStore, result_of, wait_for_record
from queuey_core.results.producing import record_enqueued
from queuey_core.results.setup import results_url, store_for
from queuey_core.settings import NO_STORE, Settings, duration


@dataclass(frozen=True)
class Waiting:
    """Whether to wait, and for how long (None: no limit)."""

    wait: bool
    timeout: float | None


def wait_options(wait: str | None, timeout: str | None, *, single: bool) -> Waiting:
    """``--wait [TIMEOUT]`` and ``--timeout`` checked (usage errors before anything is
    sent); ``wait`` is None without ``--wait``, "" for a bare one."""
    if timeout is not None and wait is None:
        raise usage("--timeout goes with --wait")
    if wait is not None and not single:
        raise usage("--wait is for one job, not --file")
    if wait and timeout is not None:
        raise usage("give the timeout once: --wait 30s, or --wait --timeout 30s")
    given, option = (wait, "--wait") if wait else (timeout, "--timeout")
    seconds = None
    if given is not None:
        try:
            seconds = duration(given)
        except ValueError as exc:
            raise usage(f"{option}: {exc}") from None
    return Waiting(wait is not None, seconds)


def store_before_enqueue(settings: Settings, waiting: Waiting) -> JobStore | None:
    """With ``--wait``, the job store, opened before the job is enqueued (none
    configured is a usage error, one that cannot be reached a failure: nothing is sent).
    Without it, None: :func:`after_enqueue` opens the store once the job is sent."""
    if not waiting.wait:
        return None
    if results_url(settings) is None:
        raise usage(f"--wait: {NO_STORE}")
    return store_for(settings)


def after_enqueue(
    settings: Settings,
    store: JobStore | None,
    job_id: uuid.UUID,
    job_type: str,
    queue: str,
    waiting: Waiting,
) -> None:
    """Record the job as queued (a store that cannot be reached is a warning: the job is
    enqueued), then, with ``--wait``, wait for it and exit by its outcome."""
    if store is None:
        if results_url(settings) is None:
            return
        try:
            store = store_for(settings)
        except QueueyError as exc:
            warn(f"the job was enqueued but not recorded as queued: {exc}")
            return
    try:
        record_enqueued(store, [(job_id, job_type, queue)])
        if not waiting.wait:
            return
        try:
            record = wait_for_record(store, job_id, timeout=waiting.timeout)
        except JobWaitTimeout as exc:
            error(str(exc))
            raise typer.Exit(Exit.WAIT_TIMEOUT) from None
        try:
            result = result_of(record)
        except JobFailed as exc:
            error(str(exc))
            raise typer.Exit(Exit.JOB_FAILED) from None
        say(json.dumps(result, ensure_ascii=True))
    finally:
        store.close()
