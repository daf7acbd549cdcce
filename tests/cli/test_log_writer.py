"""The command line's JSON log lines: gathered off the job threads, written in batches,
in order, warnings at once, everything by the time a command ends."""

from __future__ import annotations

import logging
import os
import sys
import time

import pytest

from queuey_core.logs import BatchedStderrHandler
from queuey_core.logs import writer


class Recording:
    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def record(level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord("t", level, __file__, 1, message, None, None)


@pytest.fixture
def stderr() -> Recording:
    return Recording()


def handler(monkeypatch: pytest.MonkeyPatch, stderr: Recording) -> BatchedStderrHandler:
    # Swapped in the test itself: pytest sets its own sys.stderr again after fixtures.
    monkeypatch.setattr("sys.stderr", stderr)
    h = BatchedStderrHandler()
    h.setFormatter(logging.Formatter("%(message)s"))
    return h


def test_info_lines_wait_for_the_writer_and_a_warning_writes_them_first_in_order(
    stderr: Recording, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "LOG_BATCH_SECONDS", 3600.0)  # the writer never gets to it
    h = handler(monkeypatch, stderr)
    for n in range(3):
        h.handle(record(logging.INFO, f"job {n} succeeded"))
    assert stderr.writes == [], "gathered, not written by the job's thread"
    h.handle(record(logging.WARNING, "retrying"))
    assert stderr.writes == ["job 0 succeeded\njob 1 succeeded\njob 2 succeeded\nretrying\n"]
    h.handle(record(logging.INFO, "worker stopped"))
    h.flush()  # as logging.shutdown and the end of a command do
    assert stderr.writes[1:] == ["worker stopped\n"]
    h.flush()
    assert len(stderr.writes) == 2, "nothing left to write"


def test_the_writer_thread_writes_what_gathered_in_one_call(
    stderr: Recording, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = handler(monkeypatch, stderr)
    for n in range(50):
        h.handle(record(logging.INFO, f"job {n}"))
    deadline = time.monotonic() + 10
    while not stderr.writes and time.monotonic() < deadline:
        time.sleep(0.01)
    h.flush()
    assert "".join(stderr.writes) == "".join(f"job {n}\n" for n in range(50))
    assert len(stderr.writes) <= 3, "batched, not a write a line"


def test_a_filtered_record_is_not_written(
    stderr: Recording, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = handler(monkeypatch, stderr)
    h.addFilter(lambda r: r.getMessage() != "secret")
    assert h.handle(record(logging.WARNING, "secret")) is False
    h.flush()
    assert stderr.writes == []


def test_a_forked_child_writes_its_own_lines(
    stderr: Recording, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = handler(monkeypatch, stderr)
    h.handle(record(logging.INFO, "parent"))  # the parent's writer thread is started
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its lines must reach its stderr without the parent's thread
        try:
            os.close(read)
            child = Recording()
            sys.stderr = child
            h.handle(record(logging.INFO, "child"))
            deadline = time.monotonic() + 10
            while not child.writes and time.monotonic() < deadline:
                time.sleep(0.01)
            os.write(write, "".join(child.writes).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        written = pipe.read().decode()
    os.waitpid(pid, 0)
    assert written == "child\n", "the parent's gathered line stays with the parent"
