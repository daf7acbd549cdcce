"""The dead-letter logic above the seam (:mod:`queuey_core.backends.dead_letter_query`):
how a window is cut from a stream, what it reads, and what it lets go of."""

from __future__ import annotations

from collections.abc import Generator

from queuey_core import DeadLetter
from queuey_core.backends.capabilities import AnyDeadLetter
from queuey_core.backends.capabilities import DeadLetterWindow
from queuey_core.backends.dead_letter_query import cut
from queuey_core.backends.dead_letter_query import page_of
from tests.support import named_envelope


def letters(n: int) -> list[AnyDeadLetter]:
    return [
        DeadLetter(named_envelope("q", f"j{i}"), "fatal error", None, f"h{i}") for i in range(n)
    ]


class Stream:
    """A backend's stream of dead letters that counts what was read and sees its close."""

    def __init__(self, source: list[AnyDeadLetter]) -> None:
        self.source = source
        self.read = 0
        self.closed = False

    def __iter__(self) -> Generator[AnyDeadLetter, None, None]:
        try:
            for dead in self.source:
                self.read += 1
                yield dead
        finally:
            self.closed = True


def handles(window: DeadLetterWindow) -> list[str]:
    return [d.handle for d in window]


def test_a_window_with_a_known_total_reads_no_further_than_its_end() -> None:
    stream = Stream(letters(1000))
    window = DeadLetterWindow(cut(iter(stream), 10, 5, total=1000), offset=10, limit=5)
    assert handles(window) == [f"h{i}" for i in range(10, 15)]
    assert stream.read == 15, "the first page of a long queue reads only its head"
    assert stream.closed, "what the stream holds is let go of at the window's end"
    assert (window.total, window.next_offset) == (1000, 15)


def test_a_window_without_a_total_walks_the_stream_to_count_it() -> None:
    stream = Stream(letters(40))
    window = DeadLetterWindow(cut(iter(stream), 30, 20), offset=30, limit=20)
    assert handles(window) == [f"h{i}" for i in range(30, 40)]
    assert (stream.read, window.total, window.next_offset) == (40, 40, None)


def test_a_stream_that_skipped_the_offset_is_counted_from_it() -> None:
    stream = Stream(letters(100)[25:])  # a backend that seeks: rows from the 26th
    window = DeadLetterWindow(cut(iter(stream), 25, 10, total=100, skipped=25), offset=25, limit=10)
    assert handles(window) == [f"h{i}" for i in range(25, 35)]
    assert (stream.read, window.next_offset) == (10, 35)


def test_a_window_closed_early_closes_its_stream() -> None:
    stream = Stream(letters(10))
    window = DeadLetterWindow(cut(iter(stream), 0, None, total=10), offset=0, limit=None)
    first = next(iter(window))
    assert first.handle == "h0"
    window.close()
    assert stream.closed
    assert window.total is None, "not known: it did not reach the end"


def test_page_of_counts_every_letter_and_keeps_only_the_page() -> None:
    page = page_of(letters(7), 5, 5)
    assert ([d.handle for d in page.letters], page.total, page.next_offset) == (
        ["h5", "h6"],
        7,
        None,
    )
