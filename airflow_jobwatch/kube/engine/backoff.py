"""Exponential backoff with jitter, a floor, and a reset after a quiet period.

Pure logic (no I/O, no sleeping): the caller passes the clock in, so the rules can be tested without
waiting. Used by :mod:`airflow_jobwatch.kube.engine.informer` for every retry path (list, watch, 429, 410), and by the
executor for pod creation and watcher restarts. :func:`parse_retry_after` reads the ``Retry-After`` header.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# A ``Retry-After`` header is honoured, but a server (or a proxy in front of it) asking for more than this
# is more likely misconfigured than right; waiting longer than 5 minutes would also outlive the apiserver's
# watch history (~5 min of etcd revisions), so we would have to relist anyway.
RETRY_AFTER_CAP_SECONDS = 300.0


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait according to a ``Retry-After`` header value, or None when there is none or it
    cannot be read.

    The header is either delta-seconds (``"3"``; Kubernetes sends whole seconds with 429 and with the
    apiserver's ``retryAfterSeconds``) or an HTTP date (``"Wed, 21 Oct 2026 07:28:00 GMT"``, RFC 9110
    section 10.2.3; what proxies and load balancers in front of an API server may send). A date in the
    past means "now" (0). The one parser of the header in this package: the informer and the executor
    both use it. Capping a long value is :meth:`Backoff.failure`'s job.

    :param now: the current wall-clock time (``time.time()``), for tests.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # every HTTP date is GMT (RFC 9110); the asctime form names no zone
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass
class Backoff:
    """Exponential backoff with "equal jitter": the n-th consecutive failure waits ``uniform(d/2, d)``
    where ``d = min(max_seconds, initial_seconds * 2**n)``.

    Why not pure "full jitter" (``uniform(0, d)``)? Full jitter spreads clients best, but its lower bound
    stays 0 however many times we have failed: a permanent error (say a server answering 410 to every
    watch) could then be retried a few milliseconds apart, and the only guarantee on the request rate is
    the floor. Equal jitter keeps half the spread and makes the *worst case* grow exponentially too, so
    the number of requests in any period has a hard bound (see :meth:`max_attempts_within`), which is what
    "never loop faster than the backoff" asks for. With the defaults (0.8 s doubling to 30 s) a server that
    stays down for an hour sees at most ~250 requests from one informer instead of thousands.

    The exponent resets once no failure has been recorded for ``reset_after_seconds`` (client-go's
    exponential backoff manager resets after 2 minutes of health the same way): a watch that flaps every
    10 seconds keeps backing off, while a failure after a long healthy stretch starts small again.
    """

    initial_seconds: float = 0.8
    max_seconds: float = 30.0
    reset_after_seconds: float = 120.0
    rand: Callable[[float, float], float] = field(default=random.uniform, repr=False)
    attempts: int = 0  # backed-off (non-free) failures in the current streak
    free_used: bool = False  # whether the current streak already had its free immediate retry
    last_failure: float | None = None

    def __post_init__(self) -> None:
        if self.initial_seconds <= 0:
            raise ValueError(f"Backoff initial_seconds must be > 0, got {self.initial_seconds!r}")
        if self.max_seconds < self.initial_seconds:
            raise ValueError(
                f"Backoff max_seconds ({self.max_seconds!r}) must be >= initial_seconds ({self.initial_seconds!r})"
            )
        if self.reset_after_seconds < 0:
            raise ValueError(f"Backoff reset_after_seconds must be >= 0, got {self.reset_after_seconds!r}")

    def ceiling(self, attempt: int) -> float:
        """Upper bound of the delay for the ``attempt``-th consecutive failure (0-based)."""
        # Cap the exponent so 2**attempt never overflows a float for absurd attempt counts.
        return min(self.max_seconds, self.initial_seconds * 2.0 ** min(attempt, 62))

    def failure(self, now: float, *, retry_after: float | None = None, free: bool = False) -> float:
        """Record a failure at monotonic time ``now`` and return how long to wait before retrying.

        :param retry_after: the server's ``Retry-After`` in seconds (429 / 503); the delay is at least
            that (capped at :data:`RETRY_AFTER_CAP_SECONDS`).
        :param free: retry at once unless the previous failure was free too. Used for 410 Expired, whose
            answer (a relist) is the normal recovery path and should not be delayed - in particular the
            410 that almost always greets a client whose server was unreachable for a while: the server
            has just answered, so the growing delay of the outage no longer applies. A *second* 410 in a
            row still backs off like any other error, so a server answering 410 to every watch is not
            hammered; the streak's exponent keeps growing across free retries.
        """
        if self.last_failure is not None and now - self.last_failure >= self.reset_after_seconds:
            self.reset()
        self.last_failure = now
        if free and not self.free_used and retry_after is None:
            # Remember it, so the next failure in a row is not free.
            self.free_used = True
            return 0.0
        if not free:
            # A different kind of failure ends a run of 410s: the next 410 is again retried at once.
            # Alternating errors and 410s therefore make at most twice the attempts of the bound below,
            # each immediate retry following a full, growing backoff.
            self.free_used = False
        ceiling = self.ceiling(self.attempts)
        self.attempts += 1
        delay = self.rand(ceiling / 2.0, ceiling)
        if retry_after is not None and retry_after > 0:
            delay = max(delay, min(retry_after, RETRY_AFTER_CAP_SECONDS))
        return delay

    def reset(self) -> None:
        """Forget every failure (e.g. when the engine is restarted)."""
        self.attempts = 0
        self.free_used = False
        self.last_failure = None

    def min_total_delay(self, failures: int) -> float:
        """The shortest total time ``failures`` consecutive backed-off retries can take (jitter at its
        lowest every time), ignoring a leading free retry. Basis for :meth:`max_attempts_within`."""
        return sum(self.ceiling(i) / 2.0 for i in range(failures))

    def max_attempts_within(self, seconds: float, *, free_first: bool = True) -> int:
        """Hard upper bound on the number of attempts a permanently failing loop makes in ``seconds``,
        assuming no reset happens (``reset_after_seconds`` longer than the gaps) and the work itself
        takes no time. ``free_first`` accounts for the one immediate retry of :meth:`failure`."""
        attempts = 1 + (1 if free_first else 0)  # the first attempt, plus the free immediate retry
        waited = 0.0
        i = 0
        while True:
            waited += self.ceiling(i) / 2.0
            if waited > seconds:
                return attempts
            attempts += 1
            i += 1
