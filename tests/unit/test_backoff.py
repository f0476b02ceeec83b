"""The retry policy of the watch engine (airflow_jobwatch.kube.engine.backoff), with the clock passed in."""

from __future__ import annotations

import email.utils
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_jobwatch.kube.engine.backoff import RETRY_AFTER_CAP_SECONDS, Backoff, parse_retry_after


def lowest(lo: float, hi: float) -> float:
    return lo


def highest(lo: float, hi: float) -> float:
    return hi


@pytest.mark.parametrize(
    ("rand", "expected"),
    [
        # jitter at its lowest: half of 0.8, 1.6, 3.2, ... capped at 30
        (lowest, [0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 15.0, 15.0]),
        (highest, [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]),
    ],
)
def test_delays_double_up_to_the_cap(rand, expected):
    backoff = Backoff(initial_seconds=0.8, max_seconds=30, reset_after_seconds=120, rand=rand)
    delays = [backoff.failure(now=float(i)) for i in range(len(expected))]
    assert delays == pytest.approx(expected)


def test_reset_after_a_quiet_period():
    backoff = Backoff(initial_seconds=1, max_seconds=30, reset_after_seconds=120, rand=highest)
    assert [backoff.failure(now=t) for t in (0, 1, 2)] == [1, 2, 4]
    # 119 s after the last failure: still backing off
    assert backoff.failure(now=121) == 8
    # 120 s without a failure: start small again
    assert backoff.failure(now=241) == 1


def test_first_free_failure_is_immediate_then_backs_off():
    backoff = Backoff(initial_seconds=1, max_seconds=30, reset_after_seconds=120, rand=highest)
    assert backoff.failure(now=0, free=True) == 0
    assert backoff.failure(now=0, free=True) == 1
    assert backoff.failure(now=1, free=True) == 2
    assert backoff.failure(now=3) == 4
    # after a reset the free retry is available again
    assert backoff.failure(now=1000, free=True) == 0


def test_free_retry_after_a_different_failure_then_backs_off_again():
    # An outage (connection errors, backing off), then the server answers 410: relist at once.
    backoff = Backoff(initial_seconds=1, max_seconds=30, reset_after_seconds=120, rand=highest)
    assert backoff.failure(now=0) == 1
    assert backoff.failure(now=1) == 2
    assert backoff.failure(now=3, free=True) == 0
    # a second 410 in a row backs off, from where the streak's exponent is
    assert backoff.failure(now=3, free=True) == 4
    assert backoff.failure(now=7, free=True) == 8


def test_retry_after_is_honoured_and_capped():
    backoff = Backoff(initial_seconds=1, max_seconds=30, reset_after_seconds=120, rand=lowest)
    assert backoff.failure(now=0, retry_after=7) == 7
    # backoff larger than Retry-After wins
    backoff2 = Backoff(initial_seconds=10, max_seconds=30, reset_after_seconds=120, rand=lowest)
    assert backoff2.failure(now=0, retry_after=1) == 5
    # a Retry-After of hours is capped
    assert backoff.failure(now=1, retry_after=10_000) == RETRY_AFTER_CAP_SECONDS
    # a Retry-After is never skipped by the free retry
    backoff3 = Backoff(initial_seconds=1, max_seconds=30, reset_after_seconds=120, rand=lowest)
    assert backoff3.failure(now=0, retry_after=2, free=True) == 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial_seconds": 0},
        {"initial_seconds": -1},
        {"initial_seconds": 2, "max_seconds": 1},
        {"reset_after_seconds": -5},
    ],
)
def test_bad_settings_are_rejected_with_the_name(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        Backoff(**kwargs)


@settings(max_examples=50, deadline=None)
@given(
    initial=st.floats(0.05, 5),
    factor=st.floats(1, 100),
    horizon=st.floats(0.1, 3600),
    seed=st.integers(0, 2**32 - 1),
)
def test_permanent_failure_never_exceeds_the_analytic_bound(initial, factor, horizon, seed):
    """Simulate a loop that fails at once every time (410 on every watch) with real random jitter: the
    number of attempts in `horizon` seconds never exceeds max_attempts_within()."""
    rng = random.Random(seed)
    backoff = Backoff(
        initial_seconds=initial, max_seconds=initial * factor, reset_after_seconds=1e9, rand=rng.uniform
    )
    bound = backoff.max_attempts_within(horizon, free_first=True)
    now = 0.0
    attempts = 0
    while now <= horizon:
        attempts += 1
        now += backoff.failure(now, free=True)
    assert attempts <= bound


def test_bound_for_a_minute_of_410s_with_defaults_is_small():
    backoff = Backoff(initial_seconds=0.8, max_seconds=30, reset_after_seconds=120)
    # 0.4+0.8+1.6+3.2+6.4+12.8 = 25.2 s, then 15 s each: 1 + 1 free + 6 + 2 = 10
    assert backoff.max_attempts_within(60) == 10


# ---- Retry-After: the one parser (informer and executor) -------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("  ", None),
        ("3", 3.0),
        (" 7 ", 7.0),
        ("0.5", 0.5),
        ("-2", 0.0),
        ("soon", None),
        ("nan", None),
        ("inf", None),
    ],
)
def test_parse_retry_after_seconds(value, expected):
    assert parse_retry_after(value) == expected


def test_parse_retry_after_http_date():
    now = 1_800_000_000.0
    assert parse_retry_after(email.utils.formatdate(now + 10, usegmt=True), now=now) == 10.0
    assert parse_retry_after(email.utils.formatdate(now - 100, usegmt=True), now=now) == 0.0
    # The RFC 850 and asctime forms RFC 9110 still asks recipients to accept.
    assert parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now=784111777.0 - 5) == 5.0
    assert parse_retry_after("Sun Nov  6 08:49:37 1994", now=784111777.0 - 3) == 3.0  # asctime: GMT
    # Against the real clock, as the informer and the executor call it.
    assert 8 <= parse_retry_after(email.utils.formatdate(time.time() + 10, usegmt=True)) <= 10.5


def test_a_long_retry_after_is_capped_by_the_backoff():
    b = Backoff(initial_seconds=1, max_seconds=2, rand=lowest)
    assert b.failure(0.0, retry_after=parse_retry_after("86400")) == RETRY_AFTER_CAP_SECONDS
