"""``queuey queues --watch``: the queues' counts, refreshed until Ctrl-C.

On a terminal a live Rich table (``rich.live``); anywhere else, plain lines a sample
(a header once, then one line a queue a refresh, with the time). Rates are the change
of each queue's ready and dead-letter counts per second between two successive samples
(so a queue being drained shows a negative ready rate); the management API's own rates
are not used, so they work without it. A broker that goes away mid-watch is shown, and
asked again at each interval, until it answers or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from rich.live import Live
from rich.table import Table
from rich.text import Text

from queuey_cli.output import (
    NONE,
    Column,
    console_of,
    err,
    is_terminal,
    out,
    plain_lines,
    rows_table,
    say,
    write_lines,
)
from queuey_cli.queue_samples import (
    COLUMNS,
    EMBEDDED_COLUMNS,
    Sample,
    cells,
    held_note,
    records,
)
from queuey_core import QueueyError
from queuey_core.logs import escape_controls

#: Waits between samples; tests replace it.
sleep: Callable[[float], None] = time.sleep

WATCH_COLUMNS = [*COLUMNS, Column("ready/s", "ready_per_s"), Column("dead/s", "dead_per_s")]
PLAIN_COLUMNS = [Column("time", "time"), *WATCH_COLUMNS, Column("held", "held")]


def rate(now: int | None, before: int | None, seconds: float) -> float | None:
    """The change per second between two counts, or None when either is unknown."""
    if now is None or before is None or seconds <= 0:
        return None
    return round((now - before) / seconds, 2)


def _shown_rate(value: float | None) -> str:
    if value is None:
        return NONE
    return "0/s" if value == 0 else f"{value:+g}/s"


def rows(sample: Sample, previous: Sample | None) -> list[list[object]]:
    """Table rows of ``sample``: the queues' counts, then their rates since ``previous``."""
    before = {r["name"]: r for r in records(previous)} if previous else {}
    seconds = sample.at - previous.at if previous else 0.0
    known = sample.unacked.counts is not None
    result: list[list[object]] = []
    for record in records(sample):
        old: dict[str, Any] = before.get(record["name"], {})
        ready = rate(record["ready"], old.get("ready"), seconds)
        dead = rate(record["dead_letters"], old.get("dead_letters"), seconds)
        result.append([*cells(record, unacked_known=known), _shown_rate(ready), _shown_rate(dead)])
    return result


def _clock() -> str:
    return datetime.now(UTC).strftime("%H:%M:%S")


class _View:
    """What the watch shows: the last good sample, and the broker's trouble if any."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.last: Sample | None = None
        self.previous: Sample | None = None
        self.samples = 0
        self.trouble: str | None = None

    def taken(self, sample: Sample) -> None:
        self.previous, self.last = self.last, sample
        self.samples += 1
        self.trouble = None

    def table(self) -> Table:
        shown = rows(self.last, self.previous) if self.last else []
        columns = WATCH_COLUMNS
        if self.last is not None and self.last.embedded:  # a file: running, not unacked
            columns = [*EMBEDDED_COLUMNS, *WATCH_COLUMNS[len(COLUMNS) :]]
        t = rows_table("queues", columns, shown)
        lines = [f"every {self.interval:g}s, sample {self.samples} at {_clock()} UTC; Ctrl-C ends"]
        if self.last is not None:
            lines.append(held_note(self.last))
            if self.last.unacked.counts is None:
                lines.append(f"unacked: n/a ({self.last.unacked.why_not})")
        if self.trouble is not None:
            lines.append(self.trouble)
        t.caption = Text(escape_controls("\n".join(lines), newlines=True))
        return t


def _sample(view: _View, take: Callable[[], Sample]) -> Sample | None:
    try:
        sample = take()
    except QueueyError as exc:
        again = f"asking again every {view.interval:g}s"
        view.trouble = f"broker lost at {_clock()} UTC: {exc}; {again}"
        return None
    view.taken(sample)
    return sample


class _CtrlC:
    """Remembers a Ctrl-C as well as raising it. The KeyboardInterrupt can land inside
    pika, where a cleanup that fails on the way out (closing a channel the broker is
    closing) replaces it with a broker error, which the watch takes for a lost broker and
    carries on; the flag ends the watch all the same."""

    def __init__(self) -> None:
        self.seen = False

    def __call__(self, signum: int, frame: object) -> None:
        self.seen = True
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Handle SIGINT while the block runs, unless SIGINT is not Python's to handle
        (ignored, as in a background job, or taken over by the embedding program)."""
        mine = threading.current_thread() is threading.main_thread() and (
            signal.getsignal(signal.SIGINT) is signal.default_int_handler
        )
        previous = signal.signal(signal.SIGINT, self) if mine else None
        try:
            yield
        finally:
            if mine:
                signal.signal(signal.SIGINT, previous)


def _live(view: _View, take: Callable[[], Sample], ctrl_c: _CtrlC) -> None:
    with Live(view.table(), console=console_of(out), auto_refresh=False) as live:
        while True:
            _sample(view, take)
            if ctrl_c.seen:
                return
            live.update(view.table(), refresh=True)
            sleep(view.interval)


def _plain(view: _View, take: Callable[[], Sample], ctrl_c: _CtrlC) -> None:
    header = True
    while True:
        sample = _sample(view, take)
        if ctrl_c.seen:
            return
        if sample is None:
            say(view.trouble, to=err)
        else:
            stamp = datetime.now(UTC).isoformat(timespec="seconds")
            held = sample.inspection.held
            lines = [[stamp, *row, held] for row in rows(sample, view.previous)]
            write_lines(plain_lines(PLAIN_COLUMNS, lines, header=header))
            header = False
        sleep(view.interval)


def watch_queues(broker: Any, take: Callable[[], Sample], interval: float) -> None:
    """Show ``take()`` every ``interval`` seconds until Ctrl-C, then close ``broker``."""
    view = _View(interval)
    ctrl_c = _CtrlC()
    try:
        with ctrl_c.installed():
            (_live if is_terminal() else _plain)(view, take, ctrl_c)
    except KeyboardInterrupt:
        pass  # the way to stop watching: exit 0
    finally:
        # Ctrl-C may have landed inside pika: whatever state the connection is in, go.
        with contextlib.suppress(Exception):
            broker.close()
