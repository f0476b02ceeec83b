"""An informer's health: failures counted, backoff chosen, unhealthy after a while, told when it changes.

:class:`HealthTracker` keeps the bookkeeping behind :class:`~airflow_jobwatch.kube.engine.informer_types.InformerHealth`
for one :class:`~airflow_jobwatch.kube.engine.informer.Informer`. The informer's loop, its
:class:`~airflow_jobwatch.kube.engine.relist.Relister` and its :class:`~airflow_jobwatch.kube.engine.watch.Watcher` report
what happened (a failure, a success, connected or not, a list completed); the tracker decides what the
observer and the ``on_health`` subscribers are told, and when.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from airflow_jobwatch.kube.engine.backoff import Backoff
from airflow_jobwatch.kube.engine.informer_types import InformerConfig, InformerHealth, Subscriber

if TYPE_CHECKING:
    from airflow_jobwatch.kube.engine.observer import InformerObserver

_Subscriber = Subscriber  # the name this module gave it first

# The engine's log lines keep the one logger name users configure for it, whichever module writes them.
log = logging.getLogger("airflow_jobwatch.kube.engine.informer")


class HealthTracker:
    """Health bookkeeping of one informer (times are time.monotonic()).

    :param name: the informer's name, for log lines.
    :param config: its tuning (``unhealthy_after_seconds``).
    :param backoff: the backoff that :meth:`failure` advances.
    :param observer: the informer's observer (metrics), told ``on_health``.
    :param subscribers: the informer's subscribers (token -> (on_event, on_health)), the same dict it keeps.
    """

    def __init__(
        self,
        *,
        name: str,
        config: InformerConfig,
        backoff: Backoff,
        observer: InformerObserver,
        subscribers: dict[int, Subscriber],
    ) -> None:
        self._name = name
        self._config = config
        self._backoff = backoff
        self._observer = observer
        self._subscribers = subscribers
        # Written by the informer and its Watcher as things happen (the counters and times through
        # listed(), watch_opened() and watch_closed()).
        self.connected = False
        self.synced = False
        self.consecutive_failures = 0
        self.failing_since: float | None = None
        self.last_error: str | None = None
        self.access_denied: str | None = None
        self.last_sync: float | None = None
        self.lists = 0
        self.watches = 0
        self._unhealthy_timer: asyncio.TimerHandle | None = None
        # Set by the unhealthy timer (or a failure past the threshold), cleared by a success. The health
        # property reads this flag rather than comparing clocks, so what `health` says and what on_health
        # subscribers were told can never disagree, even for the instant before the timer fires.
        self._unhealthy = False
        self._reported: tuple[bool, bool, bool] | None = None

    def snapshot(self) -> InformerHealth:
        now = time.monotonic()
        healthy = not self._unhealthy
        if self.last_sync is None:
            since: float | None = None
        elif self.connected:
            since = 0.0
        else:
            since = max(0.0, now - self.last_sync)
        return InformerHealth(
            connected=self.connected,
            healthy=healthy,
            synced=self.synced,
            consecutive_failures=self.consecutive_failures,
            seconds_since_sync=since,
            last_error=self.last_error,
            relists=max(0, self.lists - 1),
            watches=self.watches,
            access_denied=self.access_denied,
        )

    @property
    def failing(self) -> bool:
        """The last attempt failed, or the API refuses us."""
        return self.consecutive_failures > 0 or self.access_denied is not None

    def failure(self, description: str, *, retry_after: float | None = None, free: bool = False) -> float:
        """Count a failure for health, return the backoff delay."""
        now = time.monotonic()
        self.consecutive_failures += 1
        self.last_error = description
        if self.failing_since is None:
            self.failing_since = now
            if self._unhealthy_timer is not None:
                self._unhealthy_timer.cancel()
            # Health must change while we are disconnected and sleeping, not at the next attempt.
            self._unhealthy_timer = asyncio.get_running_loop().call_later(
                self._config.unhealthy_after_seconds, self.mark_unhealthy
            )
        elif now - self.failing_since >= self._config.unhealthy_after_seconds:
            self._unhealthy = True  # in case the loop was too busy to run the timer yet
        self.notify()
        return self._backoff.failure(now, retry_after=retry_after, free=free)

    def record_success(self) -> None:
        self.access_denied = None
        if self.failing_since is None and self.consecutive_failures == 0:
            return
        self.consecutive_failures = 0
        self.failing_since = None
        self._unhealthy = False
        if self._unhealthy_timer is not None:
            self._unhealthy_timer.cancel()
            self._unhealthy_timer = None
        self.notify()

    def mark_unhealthy(self) -> None:
        self._unhealthy_timer = None
        if self.failing_since is not None:
            self._unhealthy = True
            self.notify()

    def listed(self) -> None:
        """A LIST completed and was applied: the view is whole (synced) as of now."""
        self.lists += 1
        self.last_sync = time.monotonic()
        self.synced = True
        self.record_success()

    def watch_opened(self) -> None:
        """A watch request was answered and its stream is open."""
        self.watches += 1
        self.set_connected(True)

    def watch_closed(self) -> None:
        """The watch stream ended (however): the view was current until now."""
        self.last_sync = time.monotonic()
        self.set_connected(False)

    def set_connected(self, connected: bool) -> None:
        if self.connected != connected:
            self.connected = connected
            self.notify()

    def cancel_timer(self) -> None:
        """Stop the pending unhealthy timer (the informer is stopping)."""
        if self._unhealthy_timer is not None:
            self._unhealthy_timer.cancel()
            self._unhealthy_timer = None

    def notify(self) -> None:
        """Call on_health subscribers when connected, healthy or synced changed since the last call."""
        health = self.snapshot()
        key = (health.connected, health.healthy, health.synced)
        if key == self._reported:
            return
        if self._reported is not None and self._reported[1] != health.healthy:
            if health.healthy:
                log.info("informer %s: healthy again", self._name)
            elif self.access_denied:  # Refused, not failing: say so (the refusal is logged anyway)
                log.error("informer %s: unhealthy - refused by the API server", self._name)
            else:
                log.error(
                    "informer %s: unhealthy - failing for %.0f s (%d attempts), last error: %s",
                    self._name,
                    self._config.unhealthy_after_seconds,
                    health.consecutive_failures,
                    health.last_error,
                )
        self._reported = key
        self._observer.on_health(health.healthy)
        for _, on_health in list(self._subscribers.values()):
            if on_health is None:
                continue
            try:
                on_health(health)
            except Exception:
                log.exception("informer %s: health subscriber %r failed", self._name, on_health)
