"""Ack coalescing (queuey_core.backends.rabbitmq.acks): a multiple ack never settles a
delivery whose handler has not returned, and the broker's books always match ours.

The broker is modelled as RabbitMQ keeps a channel: a set of unacked delivery tags; a
single ack of a tag it does not hold closes the channel (406), a multiple ack of T
settles every unacked tag up to T.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.stateful import invariant
from hypothesis.stateful import precondition
from hypothesis.stateful import rule

from queuey_core.backends.rabbitmq.acks import Unsettled
from queuey_core.backends.rabbitmq.consumer import PendingAck
from queuey_core.backends.rabbitmq.consumer import send_acks
from queuey_core.errors import BackendError


class BrokerChannel:
    """RabbitMQ's side of one channel: the deliveries it handed out and not settled."""

    def __init__(self) -> None:
        self.unacked: set[int] = set()
        self.next_tag = 1

    def deliver(self) -> int:
        tag = self.next_tag
        self.next_tag += 1
        self.unacked.add(tag)
        return tag

    def ack(self, tag: int, *, multiple: bool = False) -> set[int]:
        """The tags this ack settles; AssertionError where RabbitMQ closes the channel."""
        assert tag in self.unacked, f"406 unknown delivery tag {tag}"
        settled = {t for t in self.unacked if t <= tag} if multiple else {tag}
        self.unacked -= settled
        return settled

    def nack(self, tag: int) -> None:
        assert tag in self.unacked, f"406 unknown delivery tag {tag}"
        self.unacked.discard(tag)


class Coalescing(RuleBasedStateMachine):
    """Deliveries arrive, handlers return in any order, acks go out in batches."""

    def __init__(self) -> None:
        super().__init__()
        self.broker = BrokerChannel()
        self.ours = Unsettled()
        #: Delivered to us, handler still running.
        self.running: set[int] = set()
        #: Handlers returned: these acks wait for the link's next batch.
        self.returned: set[int] = set()
        #: Delivered by the broker and dropped before it reached us (pika does that for
        #: a consumer it no longer knows): nobody will ever settle these.
        self.never_seen: set[int] = set()

    @rule()
    def deliver(self) -> None:
        tag = self.broker.deliver()
        self.ours.delivered(tag)
        self.running.add(tag)

    @rule()
    def deliver_one_we_never_see(self) -> None:
        self.never_seen.add(self.broker.deliver())

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def handlers_return(self, data: st.DataObject) -> None:
        done = data.draw(st.sets(st.sampled_from(sorted(self.running)), min_size=1))
        self.running -= done
        self.returned |= done

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def nack_or_reject_one(self, data: st.DataObject) -> None:
        # A retry that failed to publish (nack) or the poison path's reject: the pending
        # acks are sent first, as the link does before any other request.
        self.send_acks()
        tag = data.draw(st.sampled_from(sorted(self.running)))
        self.running.discard(tag)
        self.broker.nack(tag)
        self.ours.settled(tag)

    @rule()
    def send_acks(self) -> None:
        batch, self.returned = self.returned, set()
        if not batch:
            return
        plan = self.ours.plan(batch)
        settled: set[int] = set()
        if plan.multiple is not None:
            settled |= self.broker.ack(plan.multiple, multiple=True)
            assert plan.multiple not in plan.singles
        for tag in plan.singles:
            settled |= self.broker.ack(tag)
        assert settled == batch, (
            f"the acks settled {sorted(settled)}, the handlers that returned were {sorted(batch)}"
        )

    @invariant()
    def books_match(self) -> None:
        assert self.broker.unacked == self.running | self.returned | self.never_seen
        assert set(self.ours._tags) == self.running | self.returned

    @invariant()
    def a_gap_turns_coalescing_off(self) -> None:
        # Seen as soon as a later tag arrives; until then no multiple ack can reach it.
        if any(tag < self.ours.next_tag for tag in self.never_seen):
            assert not self.ours.coalescing


TestCoalescing = Coalescing.TestCase
TestCoalescing.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)


def test_a_run_at_the_front_becomes_one_multiple_ack() -> None:
    ours = Unsettled()
    for tag in range(1, 11):
        ours.delivered(tag)
    plan = ours.plan([1, 2, 3, 5, 7])
    assert plan.multiple == 3, "1-3 are the front run"
    assert plan.singles == [5, 7], "4 and 6 still run: 5 and 7 go alone"
    follow = ours.plan([4, 6])
    assert follow.multiple == 6, "4-6 are now the front run (5 already settled)"
    assert follow.singles == []


def test_one_ack_alone_is_not_sent_as_multiple() -> None:
    ours = Unsettled()
    ours.delivered(1)
    ours.delivered(2)
    assert ours.plan([1]) == (None, [1])
    assert ours.plan([2]) == (None, [2])


def test_a_nacked_tag_in_the_middle_is_passed_over_not_acked() -> None:
    ours = Unsettled()
    for tag in range(1, 5):
        ours.delivered(tag)
    ours.settled(2)  # nacked back to its queue
    plan = ours.plan([1, 3, 4])
    assert plan.multiple == 4, "2 is settled: the broker no longer holds it"
    assert plan.singles == []
    assert len(ours) == 0


def test_a_skipped_tag_stops_coalescing_on_that_channel() -> None:
    ours = Unsettled()
    ours.delivered(1)
    ours.delivered(3)  # 2 reached the channel and never us
    ours.delivered(4)
    assert ours.plan([1, 3, 4]) == (None, [1, 3, 4])


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=1, max_value=3000))
def test_settled_tags_behind_a_long_job_are_let_go(n: int) -> None:
    ours = Unsettled()
    ours.delivered(1)  # a long job holds the front
    for tag in range(2, n + 2):
        ours.delivered(tag)
        assert ours.plan([tag]).singles == [tag]
    assert len(ours._order) <= 2 * len(ours) + 65, "bounded memory behind the front"
    assert ours.plan([1]) == (None, [1])


# -- the consumer link's side: what send_acks puts on a channel --------------------------


class FakeChannel:
    """Records the acks pika would frame; ``fail_after`` acks, it raises as a closing
    channel does."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.is_open = True
        self.sent: list[tuple[int, bool]] = []
        self.fail_after = fail_after

    def basic_ack(self, tag: int, multiple: bool = False) -> None:
        if self.fail_after is not None and len(self.sent) >= self.fail_after:
            raise RuntimeError("channel closing")
        self.sent.append((tag, multiple))


class FakeSubscription:
    def __init__(self, channel: FakeChannel, delivered: int) -> None:
        self.channel = channel
        self.unsettled = Unsettled()
        for tag in range(1, delivered + 1):
            self.unsettled.delivered(tag)

    def is_current(self, channel: object) -> bool:
        return channel is self.channel


def pending(sub: FakeSubscription, tag: int, failures: list[BaseException]) -> PendingAck:
    return PendingAck(sub, sub.channel, tag, failures.append)  # type: ignore[arg-type]


def test_a_batch_goes_out_as_one_multiple_ack_and_single_ones() -> None:
    ch = FakeChannel()
    sub = FakeSubscription(ch, delivered=6)
    failures: list[BaseException] = []
    acks = [pending(sub, tag, failures) for tag in (2, 1, 3, 5)]
    send_acks(acks)
    assert ch.sent == [(3, True), (5, False)], "1-3 as one, 5 alone (4 still runs)"
    assert all(a.result.done and a.result.error() is None for a in acks)
    assert failures == []


def test_acks_for_a_channel_that_is_gone_are_refused_and_counted() -> None:
    ch = FakeChannel()
    sub = FakeSubscription(ch, delivered=2)
    failures: list[BaseException] = []
    acks = [pending(sub, 1, failures), pending(sub, 2, failures)]
    sub.channel = FakeChannel()  # reconnected: the old channel's tags mean nothing now
    send_acks(acks)
    assert ch.sent == [], "nothing is sent on a channel that is not current"
    assert len(failures) == 2
    assert all(isinstance(a.result.error(), BackendError) for a in acks)


def test_a_channel_that_closes_mid_batch_fails_only_the_acks_not_sent() -> None:
    ch = FakeChannel(fail_after=1)
    sub = FakeSubscription(ch, delivered=5)
    failures: list[BaseException] = []
    acks = [pending(sub, tag, failures) for tag in (1, 2, 4)]
    send_acks(acks)
    assert ch.sent == [(2, True)]
    assert [a.result.error() is None for a in acks] == [True, True, False]
    assert len(failures) == 1, "the ack of 4 was not sent: counted once"
