"""Dead letters at scale, the contract (issue 28): pages, lookups, filters and streaming,
requeue and purge with progress, the same on every backend of tests/backend_kinds.py.

In memory and on SQLite these run with the unit tests; on RabbitMQ in the test vhost.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from collections.abc import Iterator

import pytest

from queuey_core import DeadLetter
from queuey_core import DeadLetterPage
from queuey_core import Envelope
from queuey_core import QueueConfig
from queuey_core.backends.capabilities import AnyDeadLetter
from queuey_core.backends.capabilities import DeadLetterWindow
from tests.backend_kinds import BackendKind
from tests.backend_kinds import ContractEnv
from tests.backend_kinds import dead_letter_params
from tests.conftest import backend_env
from tests.integration.backends.test_backend_contract import Collector
from tests.support import named_envelope

#: How many dead letters each test starts with, and the job type and reason of the i-th.
N = 30


def job_type(i: int) -> str:
    return "dl.even" if i % 2 == 0 else "dl.odd"


def reason(i: int) -> str:
    return f"Fatal error: Boom {i % 3}" if i % 3 else f"max attempts (3) reached: {i}"


@pytest.fixture(params=dead_letter_params())
def env(request: pytest.FixtureRequest) -> Iterator[ContractEnv]:
    kind: BackendKind = request.param
    with backend_env(kind, kind.contract_env) as e:
        yield e


def dead_lettered(env: ContractEnv, n: int = N) -> tuple[QueueConfig, list[Envelope]]:
    """A queue whose dead-letter queue holds ``n`` dead letters, in the order sent."""
    q = env.queue(prefetch=0)
    sent = [named_envelope(q.name, f"j{i}", job_type=job_type(i)) for i in range(n)]
    env.backend.publish_many([(e, None) for e in sent])
    got = Collector(env.now)
    sub = env.backend.consume(q, got)
    env.wait_until(lambda: len(got.deliveries()) == n)
    for i, d in enumerate(got.deliveries()):
        d.dead_letter(reason(i))
    sub.close()
    env.wait_until(lambda: len(env.backend.list_dead_letters(q.name)) == n)
    return q, sent


def ids(letters: Iterable[AnyDeadLetter]) -> list[str]:
    return [d.handle for d in letters]


def test_pages_cut_the_dead_letters_in_order_and_count_them_all(env: ContractEnv) -> None:
    q, sent = dead_lettered(env)
    every = [str(e.job_id) for e in sent]

    first = env.backend.dead_letter_page(q.name, limit=10)
    assert isinstance(first, DeadLetterPage)
    assert (ids(first.letters), first.total, first.next_offset) == (every[:10], N, 10)
    middle = env.backend.dead_letter_page(q.name, offset=10, limit=10)
    assert (ids(middle.letters), middle.next_offset) == (every[10:20], 20)
    last = env.backend.dead_letter_page(q.name, offset=20, limit=10)
    assert (ids(last.letters), last.total, last.next_offset) == (every[20:], N, None)
    past = env.backend.dead_letter_page(q.name, offset=N + 5, limit=10)
    assert (past.letters, past.total, past.next_offset) == ([], N, None)
    assert ids(env.backend.list_dead_letters(q.name)) == every, "paging moved nothing"


def test_filters_by_job_type_and_reason_page_and_count_only_what_they_keep(
    env: ContractEnv,
) -> None:
    q, sent = dead_lettered(env)
    odd = [str(e.job_id) for i, e in enumerate(sent) if job_type(i) == "dl.odd"]
    page = env.backend.dead_letter_page(q.name, limit=5, job_type="dl.odd")
    assert (ids(page.letters), page.total, page.next_offset) == (odd[:5], len(odd), 5)

    boom = [str(e.job_id) for i, e in enumerate(sent) if "boom" in reason(i).lower()]
    page = env.backend.dead_letter_page(q.name, offset=3, limit=100, reason="BOOM")
    assert (ids(page.letters), page.total, page.next_offset) == (boom[3:], len(boom), None)

    both = [
        str(e.job_id)
        for i, e in enumerate(sent)
        if job_type(i) == "dl.even" and reason(i).startswith("max attempts")
    ]
    streamed = env.backend.iter_dead_letters(q.name, job_type="dl.even", reason="max attempts")
    assert ids(list(streamed)) == both
    assert env.backend.dead_letter_page(q.name, job_type="dl.nothing").total == 0


def test_one_dead_letter_is_found_by_its_handle_and_a_missing_one_is_none(
    env: ContractEnv,
) -> None:
    q, sent = dead_lettered(env)
    found = env.backend.get_dead_letter(q.name, str(sent[N - 1].job_id))
    assert isinstance(found, DeadLetter)
    assert found.envelope.payload == {"name": f"j{N - 1}"}
    assert found.reason == reason(N - 1)
    assert env.backend.get_dead_letter(q.name, "3f1c0a57-0000-4000-8000-000000000000") is None
    assert len(env.backend.list_dead_letters(q.name)) == N, "looking moved nothing"


def test_iterating_streams_every_dead_letter_in_order_and_gives_all_back(
    env: ContractEnv,
) -> None:
    q, sent = dead_lettered(env)
    every = [str(e.job_id) for e in sent]
    assert ids(list(env.backend.iter_dead_letters(q.name))) == every
    partial = env.backend.iter_dead_letters(q.name)
    assert ids(list(itertools.islice(partial, 3))) == every[:3]
    partial.close()
    assert ids(env.backend.list_dead_letters(q.name)) == every, "an iterator let go of all"


def test_requeue_of_all_reports_progress_and_moves_each_once(env: ContractEnv) -> None:
    q, sent = dead_lettered(env)
    seen: list[int] = []
    assert env.backend.requeue_dead_letters(q.name, progress=seen.append) == N
    assert seen[-1] == N
    assert seen == sorted(seen), "progress only grows"
    assert env.backend.list_dead_letters(q.name) == []
    back = Collector(env.now)
    sub = env.backend.consume(q, back)
    env.wait_until(lambda: len(back.deliveries()) == N)
    assert sorted(str(d.envelope.job_id) for d in back.deliveries()) == sorted(
        str(e.job_id) for e in sent
    )
    assert {d.envelope.attempt for d in back.deliveries()} == {1}
    for d in back.deliveries():
        d.ack()
    sub.close()


def test_requeue_and_delete_of_one_leave_the_rest_in_order(env: ContractEnv) -> None:
    q, sent = dead_lettered(env)
    every = [str(e.job_id) for e in sent]
    assert env.backend.requeue_dead_letters(q.name, [every[17]]) == 1
    assert env.backend.delete_dead_letters(q.name, [every[3]]) == 1
    left = [h for h in every if h not in (every[17], every[3])]
    assert ids(env.backend.list_dead_letters(q.name)) == left
    seen: list[int] = []
    assert env.backend.purge_dead_letters(q.name, progress=seen.append) == N - 2
    assert seen[-1] == N - 2
    assert env.backend.dead_letter_page(q.name).total == 0


def test_a_window_streams_what_the_page_holds_and_counts_at_its_end(env: ContractEnv) -> None:
    q, sent = dead_lettered(env)
    every = [str(e.job_id) for e in sent]
    window = env.backend.dead_letter_window(q.name, offset=10, limit=10)
    assert isinstance(window, DeadLetterWindow)
    assert (window.total, window.next_offset) == (None, None), "known once read"
    assert ids(window) == every[10:20]
    assert (window.total, window.next_offset) == (N, 20)

    rest = env.backend.dead_letter_window(q.name, offset=25)
    assert (ids(rest), rest.total, rest.next_offset) == (every[25:], N, None)
    past = env.backend.dead_letter_window(q.name, offset=N + 5, limit=10)
    assert (ids(past), past.total, past.next_offset) == ([], N, None)
    assert ids(env.backend.list_dead_letters(q.name)) == every, "windows moved nothing"


def test_a_filtered_window_keeps_and_counts_what_the_filter_keeps(env: ContractEnv) -> None:
    q, sent = dead_lettered(env)
    odd = [str(e.job_id) for i, e in enumerate(sent) if job_type(i) == "dl.odd"]
    window = env.backend.dead_letter_window(q.name, offset=2, limit=4, job_type="dl.odd")
    assert (ids(window), window.total, window.next_offset) == (odd[2:6], len(odd), 6)
    boom = [str(e.job_id) for i, e in enumerate(sent) if "boom" in reason(i).lower()]
    window = env.backend.dead_letter_window(q.name, reason="bOOm")
    assert (ids(window), window.total, window.next_offset) == (boom, len(boom), None)


def test_a_window_closed_early_gives_everything_back_in_order(env: ContractEnv) -> None:
    q, sent = dead_lettered(env)
    every = [str(e.job_id) for e in sent]
    window = env.backend.dead_letter_window(q.name)
    assert ids(itertools.islice(window, 4)) == every[:4]
    window.close()
    assert window.total is None, "not known: it did not reach the end"
    assert ids(env.backend.dead_letter_window(q.name)) == every, "the next reads them all"


@pytest.mark.parametrize(("offset", "limit"), [(-1, 10), (0, 0)])
def test_a_window_refuses_a_negative_offset_or_an_empty_limit(
    env: ContractEnv, offset: int, limit: int
) -> None:
    q = env.queue(prefetch=0)
    with pytest.raises(ValueError, match="must be"):
        env.backend.dead_letter_window(q.name, offset=offset, limit=limit)


def test_a_window_read_twice_keeps_its_count(env: ContractEnv) -> None:
    q, _ = dead_lettered(env)
    window = env.backend.dead_letter_window(q.name, limit=5)
    assert len(list(window)) == 5
    assert list(window) == [], "read once"
    assert (window.total, window.next_offset) == (N, 5)
