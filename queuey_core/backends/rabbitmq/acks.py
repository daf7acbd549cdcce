"""Ack coalescing: which acks of one channel can go out as one ``multiple=True`` ack.

Owns: the delivery tags of one consumer channel that are not settled yet, as the link's
thread sees them (:class:`Unsettled`), and the plan for a batch of acks
(:meth:`Unsettled.plan`): the longest run of acked tags at the front of the unsettled
ones becomes a single ``basic_ack(last, multiple=True)``; every other acked tag is acked
on its own. Pure bookkeeping: no pika, no threads; the consumer link sends the plan.

Why it is safe: a ``multiple`` ack of tag T settles every unacked delivery of the
channel up to T. The plan uses one only when every unsettled tag up to T is being acked
in the same batch, i.e. its handler has returned. A nack or a reject settles its tag
first (:meth:`Unsettled.settled`), so a run never reaches over it. A tag the broker sent
that this channel never saw (pika drops a delivery for a consumer it no longer knows)
would be covered silently: a gap in the tags turns coalescing off for the channel.
Must never: plan a ``multiple`` ack over a tag that is not being acked, or ack a tag
twice.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import NamedTuple


class AckPlan(NamedTuple):
    """What to send for a batch of acks on one channel."""

    multiple: int | None
    """Ack every tag up to this one with ``multiple=True`` (None: no such run)."""
    singles: list[int]
    """Ack each of these on its own, in this order."""


class Unsettled:
    """The unsettled delivery tags of one channel, in delivery order.

    Delivery tags on a channel run 1, 2, 3, ...; :meth:`delivered` is told each one as it
    arrives, :meth:`settled` each nack or reject, and :meth:`plan` each batch of acks.
    """

    __slots__ = ("_order", "_tags", "coalescing", "next_tag")

    def __init__(self) -> None:
        self._tags: set[int] = set()
        # In delivery order; settled tags are dropped lazily from the front.
        self._order: collections.deque[int] = collections.deque()
        self.next_tag = 1
        #: False once a tag was skipped: a multiple ack could cover a delivery never seen.
        self.coalescing = True

    def __len__(self) -> int:
        return len(self._tags)

    def __contains__(self, tag: object) -> bool:
        return tag in self._tags

    def delivered(self, tag: int) -> None:
        """A delivery with ``tag`` arrived on the channel."""
        if tag != self.next_tag:
            self.coalescing = False
        self.next_tag = max(self.next_tag, tag + 1)
        self._tags.add(tag)
        self._order.append(tag)

    def settled(self, tag: int) -> None:
        """``tag`` was settled some other way (nack, reject, a lone ack)."""
        self._tags.discard(tag)
        if len(self._order) > 2 * len(self._tags) + 64:
            self._order = collections.deque(t for t in self._order if t in self._tags)

    def plan(self, acked: Iterable[int]) -> AckPlan:
        """The acks to send for ``acked`` (distinct tags), which count as settled after.

        The run is the unsettled tags, from the oldest, for as long as each is acked; if
        it holds two or more, its last tag is acked with ``multiple``. A tag not known
        as unsettled is acked on its own, as it would be without coalescing.
        """
        wanted = set(acked)
        tags, order = self._tags, self._order
        while order and order[0] not in tags:
            order.popleft()
        run: list[int] = []
        reach = 0  # entries of the order the run passes, settled ones included
        if self.coalescing:
            for tag in order:
                if tag in tags:
                    if tag not in wanted:
                        break
                    run.append(tag)
                reach += 1
        if len(run) < 2:
            run = []
        else:
            for _ in range(reach):
                tags.discard(order.popleft())
        singles = sorted(wanted.difference(run))
        for tag in singles:
            tags.discard(tag)
        if len(order) > 2 * len(tags) + 64:
            # Settled tags behind a long job's: drop them now, not when it ends.
            self._order = collections.deque(t for t in order if t in tags)
        return AckPlan(run[-1] if run else None, singles)
