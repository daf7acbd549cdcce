"""``queuey enqueue --file``: a bulk run that says what became of every line.

Owns: reading and checking a JSON-lines file (a ``job_id`` key sets a line's id;
``--ids-from-lines`` derives one from the file's SHA-256 and the line number), publishing
it in batches with SIGINT / SIGTERM handlers installed for the run (the first stops it
between batches, a second at once), and, whatever ends it, the counts (confirmed,
unknown, refused, not sent), the republished count, the ``--failed-to`` file and the
exit code. Also the helpers the one-job path shares: parsing a payload, the backend.
A line refused as a duplicate (another job holds its unique key: on the embedded
backend, a line whose job id was enqueued before) is counted as such, never sent again
and never written to ``--failed-to``.

The file is read in streaming passes, so that a run holds a few batches, not the file,
at any size: the first checks every line (and hashes the file) before anything is
published, the second publishes batch by batch (the next ones handed over while the
oldest waits for its confirms, in file order), and ``--failed-to`` reads the lines never sent
once more. A file that changes between the passes is refused, or stops the run with
what was published so far said (never a line published unchecked).
Must never: report a line as confirmed that the broker did not confirm, or as not sent
one that was.
"""

from __future__ import annotations

import itertools
import json
import signal
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from queuey_cli.common import backend, warn
from queuey_cli.job_lines import (
    CheckedFile,
    FileChanged,
    Line,
    Outcome,
    lines_of,
)
from queuey_cli.output import Exit, console_of, err, error
from queuey_core import (
    BackendError,
    DuplicateJobError,
    EnqueueUnknownError,
    NotEnqueuedError,
    Producer,
    QueueSet,
    QueueyError,
)
from queuey_core.backends.capabilities import Republishes
from queuey_core.flow.unique_setup import check_key_store, producer_options
from queuey_core.pending import PendingBatch, PublishError
from queuey_core.results.setup import results_url, store_for
from queuey_core.results.store import JobStore
from queuey_core.settings import Settings

BATCH = 2000
#: Batches handed over and not yet confirmed, at most: more are handed over while the
#: oldest waits for its confirms, so the broker never waits between batches (2: 6-19%
#: faster than one at a time, 3: 17-33%, on a 2-core host; memory 54 -> 63 MB).
IN_FLIGHT = 3


@dataclass
class Run:
    """How far a --file run got: counts, and the lines of a batch that failed."""

    file: CheckedFile
    counts: Counter[Outcome] = field(default_factory=Counter)
    #: Lines of the batches the broker did not confirm (at most IN_FLIGHT batches).
    failed: list[Line] = field(default_factory=list)
    #: The number of the last line handed to the broker (the rest were never sent).
    sent_through: int = 0
    republished: int = 0
    #: Jobs confirmed but not recorded as queued (the job store refused them).
    unrecorded: int = 0
    stopped: bool = False  # by a signal
    seconds: float = 0.0

    @property
    def path(self) -> Path:
        return self.file.path

    def count(self, outcome: Outcome) -> int:
        if outcome is Outcome.NOT_SENT:
            return self.file.jobs - sum(n for o, n in self.counts.items() if o is not outcome)
        return self.counts[outcome]


class _Stop:
    """SIGINT / SIGTERM while a --file runs: the first stops it after the batches in
    flight; a second stops it at once (their outcome is then unknown)."""

    def __init__(self) -> None:
        self.requested = False
        self._holding = False
        self._held = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            if self._holding:
                self._held = True
                return
            raise KeyboardInterrupt
        self.requested = True
        err.print(
            f"{signal.Signals(signum).name}: stopping after the batches in flight "
            "(again to stop at once)",
            highlight=False,
        )

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """A second signal waits for the end of this block (a run's bookkeeping: a batch
        moved from "in flight" to counted must be counted once, whatever interrupts)."""
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
        if self._held:
            raise KeyboardInterrupt


@contextmanager
def _signals(stop: _Stop) -> Iterator[None]:
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def publish_all(
    settings: Settings, queue_set: QueueSet, run: Run, delay: float | None, priority: int | None
) -> None:
    started = time.monotonic()
    stop = _Stop()
    rabbit: Any = None
    # Imported here: loading the command line (for `queuey worker` too) skips Rich.
    from rich.progress import (  # noqa: PLC0415
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    progress = Progress(
        TextColumn("enqueue"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console_of(err),
        transient=True,
    )
    check_key_store(settings)  # before connecting: nothing sent
    store = _job_store(settings)
    producer: Producer | None = None
    try:
        with _signals(stop), progress:
            rabbit = backend(settings)
            # Each batch is recorded as queued once confirmed, by the call that counts
            # it: the writes overlap the batches still in flight, and none is dropped.
            producer = Producer(
                rabbit,
                queue_set,
                job_store=store,
                record_now=True,
                **producer_options(rabbit, settings),
            )
            task = progress.add_task("enqueue", total=run.file.jobs)
            _publish_batches(
                run, producer, stop, delay, priority, lambda n: progress.advance(task, n)
            )
    except BackendError as exc:  # could not connect or declare: nothing was sent
        error(str(exc))
    finally:
        run.stopped = stop.requested
        run.seconds = time.monotonic() - started
        if producer is not None and producer.recorder is not None:
            run.unrecorded = producer.recorder.unrecorded
        if store is not None:
            store.close()
        if rabbit is not None:
            run.republished = rabbit.republished if isinstance(rabbit, Republishes) else 0
            rabbit.close()


def _job_store(settings: Settings) -> JobStore | None:
    """The job store the run records its jobs as queued in; None without one, or (with
    a warning: the jobs can still be enqueued) when it cannot be opened."""
    if results_url(settings) is None:
        return None
    try:
        return store_for(settings)
    except QueueyError as exc:
        warn(f"the jobs will not be recorded as queued: {exc}")
        return None


def _publish_batches(
    run: Run,
    producer: Producer,
    stop: _Stop,
    delay: float | None,
    priority: int | None,
    advance: Callable[[int], None],
) -> None:
    """Hand the file's batches over in order, the next while the last one waits for its
    confirms (at most :data:`IN_FLIGHT`), until the file ends, a batch fails or a signal
    stops the run; every batch handed over gets its outcome."""
    lines = lines_of(run.file)
    pending: deque[tuple[list[Line], PendingBatch]] = deque()
    handing: list[Line] = []
    try:
        while not stop.requested:
            try:
                # Every line gets its id before it is sent, so that an outcome can be
                # traced back to its line.
                handing = list(itertools.islice(lines, BATCH))
            except FileChanged as exc:
                error(str(exc))
                break
            if not handing:
                break
            run.sent_through = handing[-1].number
            sent = producer.begin_enqueue_many(
                [line.job for line in handing],
                delay=delay,
                priority=priority,
                job_ids=[line.job_id for line in handing],
            )
            with stop.deferred():
                pending.append((handing, sent))
                handing = []
            if len(pending) == IN_FLIGHT and not _outcome(run, pending, stop, advance):
                break
        while pending:
            _outcome(run, pending, stop, advance)
    except BaseException as exc:
        # A second signal (KeyboardInterrupt), or worse: what was handed over is in
        # doubt, never "not sent".
        for batch in [*(b for b, _ in pending), handing]:
            _settle(run, batch, Outcome.UNKNOWN)
        if not isinstance(exc, KeyboardInterrupt):
            raise


def _outcome(
    run: Run,
    pending: deque[tuple[list[Line], PendingBatch]],
    stop: _Stop,
    advance: Callable[[int], None],
) -> bool:
    """Wait for the oldest batch in flight, count its outcome and take it off
    ``pending``; whether every line of it was confirmed."""
    batch, sent = pending[0]
    failure: PublishError | None = None
    duplicates: dict[Any, Any] = {}
    try:
        sent.result()
    except (EnqueueUnknownError, NotEnqueuedError) as exc:
        failure = exc
    except DuplicateJobError as exc:  # the others confirmed
        duplicates = exc.duplicates
    with stop.deferred():  # counted and taken off together, never twice or not at all
        pending.popleft()
        if failure is None:
            _settle(run, [line for line in batch if line.job_id in duplicates], Outcome.DUPLICATE)
            run.counts[Outcome.CONFIRMED] += sum(1 for x in batch if x.job_id not in duplicates)
        else:
            _sort(run, batch, failure)
    if failure is not None:
        error(str(failure))
        return False
    advance(len(batch))
    return True


def _settle(run: Run, lines: list[Line], outcome: Outcome) -> None:
    """``lines`` (of a batch that was sent) ended as ``outcome``."""
    for line in lines:
        line.outcome = outcome
    run.counts[outcome] += len(lines)
    if outcome not in (Outcome.CONFIRMED, Outcome.DUPLICATE):
        run.failed.extend(lines)


def _sort(run: Run, batch: list[Line], exc: EnqueueUnknownError | NotEnqueuedError) -> None:
    """Each line of a failed batch as the error says (unknown when it does not say)."""
    unknown, refused, confirmed = set(exc.unknown), set(exc.not_enqueued), set(exc.confirmed)
    for line in batch:
        if line.job_id in exc.duplicates:
            outcome = Outcome.DUPLICATE
        elif line.job_id in unknown:
            outcome = Outcome.UNKNOWN
        elif line.job_id in refused:
            outcome = Outcome.REFUSED
        elif line.job_id in confirmed:
            outcome = Outcome.CONFIRMED
        elif isinstance(exc, EnqueueUnknownError):
            outcome = Outcome.UNKNOWN
        else:
            outcome = Outcome.REFUSED
        _settle(run, [line], outcome)


def report(run: Run, failed_to: Path | None) -> Exit:
    """Print how the run went, write --failed-to, and choose the exit code."""
    total = run.file.jobs
    duplicates = run.count(Outcome.DUPLICATE)
    left = total - run.count(Outcome.CONFIRMED) - duplicates
    if not left and duplicates:
        err.print(
            f"{run.path}: {run.count(Outcome.CONFIRMED):,} confirmed, {duplicates:,} "
            f"duplicates of jobs that hold their unique keys (not enqueued again), of "
            f"{total:,} jobs",
            highlight=False,
        )
    elif not left:
        err.print(
            f"enqueued {total} jobs from {run.path} in {run.seconds:.2f}s "
            f"({total / max(run.seconds, 1e-9):,.0f}/s), every one confirmed by the broker",
            highlight=False,
        )
    else:
        # Duplicates only where there are some: the line is the same as ever without.
        shown = [o for o in Outcome if o is not Outcome.DUPLICATE or duplicates]
        counts = ", ".join(f"{run.count(o):,} {o.value}" for o in shown)
        err.print(f"{run.path}: {counts}, of {total:,} jobs", highlight=False)
    if run.republished:
        err.print(
            f"{run.republished:,} messages were republished after a lost connection: they "
            "may be on the queue twice, with the same job id",
            highlight=False,
        )
    if run.unrecorded:
        warn(
            f"{run.unrecorded:,} jobs were enqueued but not recorded as queued in the job "
            "store (see the log above)"
        )
    if failed_to is not None:
        written = _write_failed(failed_to, run)
        if left:
            err.print(
                f"the {written:,} jobs not confirmed are in {failed_to}: run again with "
                f"--file {failed_to} (and the same options)",
                highlight=False,
            )
    if not left:
        return Exit.DUPLICATE if duplicates else Exit.OK
    if run.count(Outcome.UNKNOWN):
        return Exit.UNKNOWN
    if run.stopped:
        return Exit.FORCED
    return Exit.FAILURE


def _write_failed(path: Path, run: Run) -> int:
    """The lines not confirmed, as given, each with the job id it was (or would have
    been) sent with: the failed batch's, then every line never sent (read once more)."""
    written = 0
    with path.open("w", encoding="utf-8") as fh:
        rest: Iterator[Line] = iter(())
        if run.count(Outcome.NOT_SENT):
            rest = lines_of(run.file, after=run.sent_through)
        try:
            for line in itertools.chain(run.failed, rest):
                if line.pinned or "job_id" in line.data:
                    fh.write(line.text + "\n")
                else:
                    fh.write(json.dumps({"job_id": str(line.job_id), **line.data}) + "\n")
                written += 1
        except FileChanged as exc:
            error(f"{exc}: {path} holds only the lines read before")
    return written
