"""The watch engine's vocabulary: the kinds it follows, what a subscriber receives (:class:`InformerEvent`,
:class:`InformerHealth`) and how it is tuned (:class:`InformerConfig`)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["pods", "jobs", "events"]

# kind -> (API group/version prefix, plural, kind, apiVersion). Items of a LIST carry no kind/apiVersion
# (only the List does), watch event objects do; we fill them in on listed items so every object a
# subscriber sees looks the same whichever way it arrived.
RESOURCES: dict[str, tuple[str, str, str, str]] = {
    "pods": ("/api/v1", "pods", "Pod", "v1"),
    "jobs": ("/apis/batch/v1", "jobs", "Job", "batch/v1"),
    # core/v1 Events: what the Job controller records when the API refuses a Job's pods (FailedCreate).
    "events": ("/api/v1", "events", "Event", "v1"),
}


class EventType(enum.Enum):
    """What happened to an object, as far as this informer can tell."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    #: The object disappeared while the engine was not watching (found missing by a relist): its final
    #: state is unknown, the event carries the last state we saw (client-go's DeletedFinalStateUnknown).
    DELETED_UNKNOWN = "DELETED_UNKNOWN"


@dataclass(frozen=True, slots=True)
class InformerEvent:
    """One change delivered to subscribers. ``obj`` is API JSON (camelCase) and must be treated as
    read-only: it is the same dict the store holds."""

    type: EventType
    obj: dict[str, Any]

    @property
    def uid(self) -> str:
        return str(self.obj["metadata"]["uid"])

    @property
    def namespace(self) -> str | None:
        ns = self.obj["metadata"].get("namespace")
        return None if ns is None else str(ns)

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])


@dataclass(frozen=True)
class InformerConfig:
    """Tuning of one informer. Defaults suit a production cluster; tests shrink them."""

    # Server-side timeoutSeconds of each watch, multiplied by a random factor in [1, 2) so informers do
    # not all reconnect together. 5 min is client-go's minWatchTimeout: long enough that reconnects are
    # rare, short enough that a connection silently broken by a proxy is replaced regularly.
    watch_timeout_seconds: float = 300
    # No byte (event or bookmark) for this long -> the stream is considered dead and is reopened from the
    # last resourceVersion. Servers send bookmarks about once a minute when they send them at all, so 90 s
    # does not fire on a healthy but quiet stream in the common case; when it does, reopening is cheap.
    stall_timeout_seconds: float = 90
    # TCP connect timeout. A reachable apiserver accepts within milliseconds; 10 s covers a slow network
    # without letting a black-holed address hang a reconnect.
    connect_timeout_seconds: float = 10
    # Backoff between failed attempts: 0.8 s doubling to 30 s (client-go's reflector values, which its
    # authors measured to cut API traffic from clients of an unhealthy server by ~98%), reset after 2 min
    # without failure. See airflow_jobwatch.kube.engine.backoff for the jitter.
    backoff_initial_seconds: float = 0.8
    backoff_max_seconds: float = 30
    backoff_reset_after_seconds: float = 120
    # Continuous failure for this long -> subscribers are told the informer is unhealthy (they decide what
    # to do: fail tasks, poll, alert). 60 s rides out an apiserver restart or a short network blip.
    unhealthy_after_seconds: float = 60
    # Every N seconds, hand every stored object to the subscribers again as MODIFIED (None = off), as
    # client-go's resync does: no request to the server, the watch resumes from the last resourceVersion.
    # Never a LIST: a list is made with the watch closed, and what ended and was deleted meanwhile would be
    # found only missing.
    resync_interval_seconds: float | None = None
    # Items per LIST page. 500 is client-go's pager default: pages small enough not to time out or bloat a
    # response, few enough requests for 10,000 objects (20 pages).
    page_size: int = 500
    # Drop metadata.managedFields from stored objects. Server-side-apply bookkeeping is often a third to a
    # half of an object's JSON and nothing that consumes this engine reads it (client-go offers the same
    # as TransformStripManagedFields); with 10,000 pods it is tens of MB of resident memory.
    strip_managed_fields: bool = True
    # Store only the fields consumers read (airflow_jobwatch/kube/engine/projection.py): a few hundred bytes per
    # pod instead of several KiB, which is what makes a namespace full of other people's pods affordable.
    # Off only for benchmarks (to measure the difference) and tests that look at whole objects.
    projection: bool = True
    # Keep each stored object as its compact JSON text, deflated (one bytes object; see CompactStore), and
    # decode it on every read, instead of as a tree of dicts. A projected worker pod is ~150 bytes that way
    # (~1 KiB of JSON) against ~4.8 KiB of Python objects, none of which the garbage collector tracks, and
    # the allocator can give back the memory of parsed list pages because no small stored object sits
    # between their freed ones. Reads cost a decode each (~10 us), so this suits a store that is mostly
    # written and rarely read by object: the executor's watcher child, which reads an object only to
    # compare a resourceVersion or to report a deletion, and the trigger registry, whose triggers each read
    # only their own Job and its pods. Off by default (a read returns the stored dict itself).
    compact_store: bool = False
    # Confirmations of a possibly stale relist (see Relister._confirm in relist.py): at most this many GETs
    # in flight at once, so a list missing thousands of objects does not fire thousands of requests together
    # (client-go's default QPS is 5 with a burst of 10; 8 concurrent GETs stays in that range), ...
    confirm_concurrency: int = 8
    # ... and at most this many per relist. Objects beyond the cap are kept (never tombstoned unconfirmed)
    # and are checked again by the next relist; the watch that follows the list settles them meanwhile.
    max_confirmations_per_relist: int = 2000
    # How many deleted uids are remembered so that a stale list (or a watch replay from its older
    # resourceVersion) cannot bring an object back after its deletion was delivered. uids are never reused,
    # so remembering one is always right; the bound caps memory (~100 bytes each).
    remembered_deletions: int = 20_000

    def __post_init__(self) -> None:
        positive = {
            "watch_timeout_seconds": self.watch_timeout_seconds,
            "stall_timeout_seconds": self.stall_timeout_seconds,
            "connect_timeout_seconds": self.connect_timeout_seconds,
            "backoff_initial_seconds": self.backoff_initial_seconds,
            "backoff_max_seconds": self.backoff_max_seconds,
            "unhealthy_after_seconds": self.unhealthy_after_seconds,
        }
        for key, value in positive.items():
            if not value > 0:
                raise ValueError(f"InformerConfig.{key} must be a number > 0 (seconds), got {value!r}")
        if self.backoff_max_seconds < self.backoff_initial_seconds:
            raise ValueError(
                f"InformerConfig.backoff_max_seconds ({self.backoff_max_seconds!r}) must be >= "
                f"backoff_initial_seconds ({self.backoff_initial_seconds!r})"
            )
        if self.backoff_reset_after_seconds < 0:
            raise ValueError(
                f"InformerConfig.backoff_reset_after_seconds must be >= 0, got {self.backoff_reset_after_seconds!r}"
            )
        if self.resync_interval_seconds is not None and not self.resync_interval_seconds > 0:
            raise ValueError(
                "InformerConfig.resync_interval_seconds must be None (off) or a number of seconds > 0, "
                f"got {self.resync_interval_seconds!r}"
            )
        if not isinstance(self.page_size, int) or self.page_size < 1:
            raise ValueError(f"InformerConfig.page_size must be an integer >= 1, got {self.page_size!r}")
        for key in ("confirm_concurrency", "max_confirmations_per_relist", "remembered_deletions"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"InformerConfig.{key} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class InformerHealth:
    """A snapshot of the informer's state, given to ``on_health`` subscribers and by :attr:`Informer.health`.

    :param connected: a watch stream is open right now.
    :param healthy: False once every attempt has failed for ``unhealthy_after_seconds`` in a row; True again
        after the next success (a completed LIST, or a watch that delivers an event or stays open).
    :param synced: the initial LIST has completed (the store holds a full view).
    :param consecutive_failures: failed attempts since the last success.
    :param seconds_since_sync: None before the first LIST; 0.0 while connected; otherwise how long ago the
        store was last known current (end of the last watch or LIST).
    :param last_error: a one-line description of the last failure (server message, no credentials).
    :param relists: LISTs completed after the initial one (410 recoveries; nothing lists on a timer).
    :param watches: watch requests the server accepted.
    """

    connected: bool
    healthy: bool
    synced: bool
    consecutive_failures: int
    seconds_since_sync: float | None
    last_error: str | None
    relists: int
    watches: int
    # Permission errors: the explained 401/403 of the last failure, None once a request works.
    access_denied: str | None = None


#: What ``Informer.subscribe`` registers: its event callback and its optional health callback.
Subscriber = tuple[Callable[[InformerEvent], None], Callable[[InformerHealth], None] | None]
