"""Property tests: the backoff maths and the envelope's wire format."""

from __future__ import annotations

import contextlib
import uuid

from hypothesis import given
from hypothesis import strategies as st

from queuey_core import Backoff
from queuey_core import BackoffKind
from queuey_core import DecodeError
from queuey_core import Envelope
from queuey_core import GiveUp
from queuey_core import Retry
from queuey_core import RetryPolicy

delays = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)
multipliers = st.floats(min_value=1.0, max_value=10.0, allow_nan=False)
retries = st.integers(min_value=1, max_value=10_000)


@st.composite
def backoffs(draw: st.DrawFn, jitter: bool | None = None) -> Backoff:
    initial = draw(delays)
    cap = draw(st.floats(min_value=initial, max_value=2e6, allow_nan=False))
    return Backoff(
        kind=draw(st.sampled_from(BackoffKind)),
        initial=initial,
        max=cap,
        multiplier=draw(multipliers),
        jitter=draw(st.booleans()) if jitter is None else jitter,
    )


@given(backoffs(), retries, st.floats(min_value=0.0, max_value=0.999999))
def test_backoff_never_exceeds_its_cap(backoff: Backoff, retry: int, rand: float) -> None:
    assert 0 <= backoff.delay(retry, rand) <= backoff.max


@given(backoffs(jitter=False), retries)
def test_backoff_never_shrinks_from_one_retry_to_the_next(backoff: Backoff, retry: int) -> None:
    assert backoff.nominal(retry + 1) >= backoff.nominal(retry)


@given(backoffs(jitter=True), retries, st.floats(min_value=0.0, max_value=0.999999))
def test_jitter_stays_between_half_and_all_of_the_nominal_delay(
    backoff: Backoff, retry: int, rand: float
) -> None:
    nominal = backoff.nominal(retry)
    assert nominal / 2 <= backoff.delay(retry, rand) <= nominal


@given(st.integers(min_value=1, max_value=50), st.integers(min_value=1, max_value=60))
def test_exponential_backoff_grows_until_the_cap(max_attempts: int, retry: int) -> None:
    backoff = Backoff(initial=1.0, max=1e12, multiplier=2.0)
    expected = min(2.0 ** (retry - 1), 1e12)
    assert backoff.nominal(retry) == expected
    policy = RetryPolicy(max_attempts, backoff)
    decision = policy.decide(retry)
    if retry >= max_attempts:
        assert isinstance(decision, GiveUp)
    else:
        assert decision == Retry(expected)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


#: What an envelope's job type and queue may be: AMQP short strings without controls.
short_strings = st.text(
    st.characters(exclude_categories=("Cc", "Cs")).filter(lambda c: not 0x7F <= ord(c) < 0xA0),
    min_size=1,
    max_size=30,
)


@st.composite
def envelopes(draw: st.DrawFn) -> Envelope:
    return Envelope(
        job_id=uuid.UUID(int=draw(st.integers(0, 2**128 - 1))),
        job_type=draw(short_strings),
        queue=draw(short_strings),
        attempt=draw(st.integers(1, 1000)),
        deferrals=draw(st.integers(0, 1000)),
        priority=draw(st.integers(0, 255)),
        enqueued_at=draw(st.integers(0, 2**50)),
        payload=draw(st.dictionaries(st.text(max_size=10), json_values, max_size=5)),
    )


@given(envelopes())
def test_an_envelope_survives_the_wire(envelope: Envelope) -> None:
    assert Envelope.decode(envelope.encode()) == envelope


@given(envelopes())
def test_next_attempt_and_deferral_move_only_their_counters(envelope: Envelope) -> None:
    retry = envelope.next_attempt()
    assert (retry.attempt, retry.deferrals, retry.priority) == (
        envelope.attempt + 1,
        envelope.deferrals,
        0,
    )
    deferred = envelope.deferred(7)
    assert (deferred.attempt, deferred.deferrals, deferred.priority) == (
        envelope.attempt,
        envelope.deferrals + 1,
        7,
    )
    assert retry.job_id == deferred.job_id == envelope.job_id


@given(st.binary(max_size=300))
def test_garbage_bytes_give_a_decode_error_never_a_crash(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        Envelope.decode(data)


@given(envelopes(), st.integers(0, 400), st.binary(max_size=8))
def test_corrupted_envelopes_give_a_decode_error_never_a_crash(
    envelope: Envelope, cut: int, junk: bytes
) -> None:
    data = envelope.encode()
    with contextlib.suppress(DecodeError):
        Envelope.decode(data[:cut] + junk + data[cut:])
