"""Which dead letters a filter keeps, and a page cut from an ordered stream of them.

Owns: the meaning of the dead-letter filters every backend offers (a job type matched
exactly, a reason matched as a substring ignoring ASCII case) and :func:`page_of`, the
page of a stream for the backends that walk their dead letters in order (memory,
RabbitMQ). A backend that can ask its store instead (SQLite) must give the same
answers. Must never: hold more than a page of what it walks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from queuey_core.backends.capabilities import AnyDeadLetter, DeadLetter, DeadLetterPage


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    """What a listing keeps: every dead letter when both are None."""

    job_type: str | None = None
    reason: str | None = None

    @property
    def everything(self) -> bool:
        """Whether it keeps every dead letter."""
        return self.job_type is None and self.reason is None

    def keeps(self, dead: AnyDeadLetter) -> bool:
        """Whether ``dead`` matches: its job type is the one asked (an undecodable dead
        letter has none), and its reason contains the text asked, ignoring ASCII case."""
        if self.job_type is not None and (
            not isinstance(dead, DeadLetter) or dead.envelope.job_type != self.job_type
        ):
            return False
        return self.reason is None or ascii_lower(self.reason) in ascii_lower(dead.reason)


#: The filter that keeps everything.
EVERYTHING = DeadLetterFilter()

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(text: str) -> str:
    """``text`` with A-Z folded to a-z and nothing else changed (as SQLite's lower())."""
    return text.translate(_ASCII_LOWER)


def check_page(offset: int, limit: int) -> None:
    """Refuse a negative offset or a limit below 1 (ValueError): a caller's bug."""
    if offset < 0:
        raise ValueError(f"offset must be 0 or more, not {offset}")
    if limit < 1:
        raise ValueError(f"limit must be 1 or more, not {limit}")


def page_of(letters: Iterable[AnyDeadLetter], offset: int, limit: int) -> DeadLetterPage:
    """The page at ``offset`` of ``letters`` (already filtered, in order), counting all.

    Walks the whole stream to count it, keeping only the page.
    """
    check_page(offset, limit)
    page: list[AnyDeadLetter] = []
    total = 0
    for dead in letters:
        if offset <= total < offset + limit:
            page.append(dead)
        total += 1
    following = offset + limit
    return DeadLetterPage(page, total, following if following < total else None)
