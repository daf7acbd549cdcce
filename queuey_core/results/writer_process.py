"""The job store's writer in a process of its own, beside a worker that records.

A recorder writing in its own thread spends the worker's GIL on turning events into rows
and on the database driver: a tenth of a no-op job's time on PostgreSQL. Handed to a
child process, that work runs on another core; the worker's thread only writes each
batch down a pipe as one line of JSON and reads back one line saying what was written.

Owns: :class:`WriterProcess` (the parent's end: starting the child, a batch's round
trip, starting another child when one ended, stopping it) and :func:`main` (the
child's loop, ``python -m queuey_core.results.writer_process``). The store's URL goes
down the pipe, never on the command line (``ps`` would show its password). JSON both
ways: no pickle, no marshal. Must never: outlive its parent (it ends at the end of its
input: a parent that dies closes it), or end before the batches its parent sent are
written (SIGINT and SIGTERM are ignored: a Ctrl-C reaches the whole process group, and
the parent stops it once the last batch is written).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, cast

from queuey_core.errors import ConfigError, JobStoreError
from queuey_core.results.records import JobEvent, JobState

#: Seconds a child must have lived before another is started at once when it ends; a
#: child that keeps ending sooner costs the batches meanwhile (counted) instead of a
#: process start per batch.
RESPAWN_AFTER = 1.0

_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_STATES = {state.value: state for state in JobState}
_new = tuple.__new__


class WriterProcess:
    """The parent's end of a writer process for the store at ``url``.

    Used from one thread (the recorder's writer), which starts the child as it starts:
    a worker's start waits for no process, and its first record for no connection.
    """

    def __init__(self, url: str, *, retention: float) -> None:
        self._config = _ENCODE({"url": url, "retention": retention}).encode() + b"\n"
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: io.BufferedReader | None = None
        self._started = 0.0
        self._lock = threading.Lock()  # the child's start and stop

    @property
    def pid(self) -> int | None:
        """The running child's pid, or None."""
        proc = self._proc
        return None if proc is None or proc.poll() is not None else proc.pid

    def start(self) -> bool:
        """Start the child now, rather than on the first batch (it connects to the store
        at once): whether it could be started. A failure is the first batch's to tell."""
        try:
            self._running()
        except JobStoreError:
            return False
        return True

    def write(self, host: str, pid: int, taken: Sequence[tuple[Any, ...]]) -> None:
        """Have the child write ``taken``, the recorder's queued events: (job, state,
        at, error, result, ran), with ``job`` an envelope or a JobInfo.

        Raises:
            JobStoreError: the store refused the batch, or the child ended before saying
                (the batch may be written or not: it is counted as not).
        """
        line = _ENCODE(
            [
                host,
                pid,
                [
                    (
                        j.job_id.int,
                        j.job_type,
                        j.queue,
                        state._value_,
                        at,
                        j.enqueued_at,
                        j.attempt,
                        error,
                        result,
                        ran,
                    )
                    for j, state, at, error, result, ran in taken
                ],
            ]
        )
        proc, reader = self._running()
        try:
            _write_all(proc.stdin, line.encode() + b"\n")
            reply = reader.readline()
        except (OSError, ValueError):
            reply = b""
        if not reply:
            raise JobStoreError(self._ended(proc))
        error = json.loads(reply)
        if error:
            raise JobStoreError(str(error))

    def _running(self) -> tuple[subprocess.Popen[bytes], io.BufferedReader]:
        with self._lock:
            proc, reader = self._proc, self._reader
            if proc is not None and reader is not None and proc.poll() is None:
                return proc, reader
            now = time.monotonic()
            if proc is not None and now - self._started < RESPAWN_AFTER:
                raise JobStoreError(
                    "the writer process keeps ending: another starts "
                    f"{RESPAWN_AFTER:g}s after the last"
                )
            self._started = now
            if not sys.executable:
                raise JobStoreError(
                    "no Python interpreter to start the writer process with (an embedded "
                    "Python): set [results] writer = 'thread'"
                )
            try:
                # Unbuffered: close() closes the child's input while the writer thread
                # may be blocked on it, which a buffered stream's lock would not allow.
                proc = subprocess.Popen(
                    [sys.executable, "-m", __name__],
                    bufsize=0,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    env=_child_env(),
                    close_fds=True,
                )
            except OSError as exc:
                raise JobStoreError(f"could not start the writer process: {exc}") from None
            reader = io.BufferedReader(cast("io.FileIO", proc.stdout))
            self._proc, self._reader = proc, reader
            with contextlib.suppress(OSError, ValueError):  # ended already: the trip says
                _write_all(proc.stdin, self._config)
            return proc, reader

    def _ended(self, proc: subprocess.Popen[bytes]) -> str:
        try:
            code = proc.wait(5.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        return f"the writer process ended (exit code {code}) before saying whether it wrote"

    def close(self, timeout: float = 5.0) -> None:
        """End the child once it has written what it was sent (``timeout`` seconds at
        most, then it is killed); idempotent."""
        with self._lock:
            proc, reader, self._proc, self._reader = self._proc, self._reader, None, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # the end of its input: it writes what it has, and ends
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if reader is not None:
            with contextlib.suppress(OSError):
                reader.close()


def _write_all(stream: IO[bytes] | None, data: bytes) -> None:
    """All of ``data`` to an unbuffered stream (a write may take only part of it)."""
    if stream is None:
        raise ValueError("no stream")
    view = memoryview(data)
    while view:
        view = view[stream.write(view) or 0 :]


def _child_env() -> dict[str, str]:
    """The parent's environment, with the folder queuey_core was imported from first on
    PYTHONPATH: a parent that found it through sys.path (a checkout, a test run) has a
    child that finds the same one."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    paths = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = root if not paths else f"{root}{os.pathsep}{paths}"
    return env


def _events(host: str, pid: int, rows: list[list[Any]]) -> list[JobEvent]:
    """The recorder's rows as events: a row is a JobEvent without host and pid, its id
    an integer and its state a text."""
    states, make_id = _STATES, uuid.UUID
    return [
        _new(JobEvent, (make_id(int=r[0]), *r[1:3], states[r[3]], *r[4:7], host, pid, *r[7:]))
        for r in rows
    ]


def serve(source: IO[bytes], sink: IO[bytes]) -> None:
    """The child's loop: the store's URL on the first line, then a batch a line; for
    each batch a line back, ``""`` when written, else why not. Ends at the end of
    ``source``, closing the store."""
    # Imported here: the parent's end above needs none of the stores.
    from queuey_core.results.store import JobStore, open_job_store  # noqa: PLC0415

    config = json.loads(source.readline() or b"null")
    if not isinstance(config, dict):
        return
    store: JobStore | None = None
    with contextlib.suppress(Exception):  # not there yet: each batch tries again
        store = open_job_store(config["url"], retention=config["retention"])
    try:
        for line in source:
            try:
                host, pid, rows = json.loads(line)
                events = _events(host, pid, rows)
                if store is None:
                    store = open_job_store(config["url"], retention=config["retention"])
                store.write(events)
                error = ""
            except Exception as exc:  # every failure is a batch not written
                known = isinstance(exc, (JobStoreError, ConfigError))
                error = (str(exc) if known else "") or f"the batch failed: {type(exc).__name__}"
            sink.write(_ENCODE(error).encode() + b"\n")
            sink.flush()
    finally:
        if store is not None:
            store.close()


def main() -> None:
    """Run as the child of a :class:`WriterProcess`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    replies = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print() anywhere must not become a reply
    with contextlib.suppress(OSError, ValueError):  # the parent is gone: nobody to tell
        serve(sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
