"""The watch engine: list + watch + relist + reconcile + backoff + health for one kind of object.

One :class:`Informer` follows one (kind, namespace or all namespaces, label selector, field selector) and keeps
a local store of the matching objects keyed by uid. Subscribers get typed events: ``ADDED``, ``MODIFIED``,
``DELETED`` and ``DELETED_UNKNOWN`` (a tombstone: the object vanished while we were not watching, its final
state is unknown and the event carries the last state we saw).

Why not :class:`kubernetes_asyncio.watch.Watch`? It retries a 410 once on its own (from the same stale
resourceVersion, and only without ``timeout_seconds``), raises on any ``ERROR`` event, yields BOOKMARK objects
as raw dicts next to models, closes the whole ``ApiClient`` on any exception, and deserialises every object
into models we would immediately turn back into dicts. So kubernetes_asyncio is used only for what it is good
at (kubeconfig, auth and token refresh, TLS, the HTTP session) through :meth:`ApiClient.call_api` with
``_preload_content=False``, and the JSON lines are parsed here.

Layers, from the outside in (the same split as client-go's Reflector and kopf's watching module), one module
each:

* :meth:`Informer._run` (here) - forever: list when needed, watch, classify what went wrong, back off, repeat;
  the store, its subscribers and the fan-out of events and health.
* :class:`~airflow_jobwatch.kube.engine.relist.Relister` (``relist.py``) - a paged LIST and the reconcile against the
  store, page by page, with the confirming GETs a possibly stale list needs; pages are decoded by
  ``listing.py`` (msgspec or the stdlib), under the GC pause of ``store.py``.
* :class:`~airflow_jobwatch.kube.engine.watch.Watcher` (``watch.py``) - one watch request, applying its events to
  the store.
* :func:`~airflow_jobwatch.kube.engine.watchstream.read_lines` (``watchstream.py``) - bytes from the socket split
  into lines, with the stall detector around every read.
* ``listwatch.py`` - the one HTTP GET under all of them; ``apierrors.py`` - what the server said went wrong,
  and how two resourceVersions compare; ``health.py`` - failures, backoff and the unhealthy verdict;
  ``informer_types.py`` - the events, config and health snapshot subscribers see; ``store.py`` - the compact
  store; ``observer.py`` - the metrics observer; ``label_selector.py`` - the client-side label match.

Every name importable from this module before the split still is (re-exported below).

What "does resetting mean we miss events?" gets as an answer: no. Whenever the watch cannot be resumed (410
Expired), the engine lists again and diffs the fresh list against its store: every object whose
resourceVersion changed is delivered as MODIFIED, every new one as ADDED, and every one that disappeared as a
DELETED_UNKNOWN tombstone. After each relist subscribers have seen every object's latest state and every
disappearance, exactly once per uid.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from airflow_jobwatch.kube.engine.apierrors import Expired as Expired
from airflow_jobwatch.kube.engine.apierrors import KubeApiError as KubeApiError
from airflow_jobwatch.kube.engine.apierrors import ShortWatch as ShortWatch
from airflow_jobwatch.kube.engine.apierrors import Stalled as Stalled
from airflow_jobwatch.kube.engine.apierrors import compare_resource_versions as compare_resource_versions
from airflow_jobwatch.kube.engine.backoff import Backoff
from airflow_jobwatch.kube.engine.cache import Fanout, ObjectCache, Preparer
from airflow_jobwatch.kube.engine.health import HealthTracker
from airflow_jobwatch.kube.engine.informer_types import RESOURCES as RESOURCES
from airflow_jobwatch.kube.engine.informer_types import EventType as EventType
from airflow_jobwatch.kube.engine.informer_types import InformerConfig as InformerConfig
from airflow_jobwatch.kube.engine.informer_types import InformerEvent as InformerEvent
from airflow_jobwatch.kube.engine.informer_types import InformerHealth as InformerHealth
from airflow_jobwatch.kube.engine.informer_types import Kind as Kind
from airflow_jobwatch.kube.engine.informer_types import Subscriber
from airflow_jobwatch.kube.engine.label_selector import selector_matcher as selector_matcher
from airflow_jobwatch.kube.engine.listing import Listing as Listing
from airflow_jobwatch.kube.engine.listwatch import ListWatch
from airflow_jobwatch.kube.engine.observer import InformerObserver as InformerObserver
from airflow_jobwatch.kube.engine.observer import NoObserver as NoObserver
from airflow_jobwatch.kube.engine.reflector import ReflectorParts
from airflow_jobwatch.kube.engine.relist import Relister
from airflow_jobwatch.kube.engine.store import CompactStore as CompactStore
from airflow_jobwatch.kube.engine.store import gc_paused as gc_paused
from airflow_jobwatch.kube.engine.watch import MIN_HEALTHY_WATCH_SECONDS as MIN_HEALTHY_WATCH_SECONDS
from airflow_jobwatch.kube.engine.watch import WATCH_TIMEOUT_JITTER as WATCH_TIMEOUT_JITTER
from airflow_jobwatch.kube.engine.watch import Watcher
from airflow_jobwatch.kube.engine.watchstream import read_lines as read_lines
from airflow_jobwatch.kube.engine.watchstream import split_lines as split_lines

log = logging.getLogger(__name__)

__all__ = [
    "EventType",
    "Informer",
    "InformerConfig",
    "InformerEvent",
    "InformerHealth",
    "KubeApiError",
]


class Informer:
    """List + watch one kind of object, keep a local store, tell subscribers what changed.

    :param api_client: a ``kubernetes_asyncio.client.ApiClient`` (config, auth, TLS, HTTP session). The
        informer never closes it; several informers may share one.
    :param kind: ``"pods"`` (core/v1), ``"jobs"`` (batch/v1) or ``"events"`` (core/v1).
    :param namespace: a namespace, or None for all namespaces.
    :param label_selector: e.g. ``"airflow-worker=3,app in (a,b)"``; None for no filter.
    :param field_selector: e.g. ``"status.phase!=Succeeded"``; None for no filter.
    :param config: tuning, see :class:`InformerConfig`.
    :param name: a name for log lines; derived from the other arguments if not given.
    :param observer: told about lists, 410s, watch restarts, stalls, events and health (metrics).
    """

    def __init__(
        self,
        api_client: Any,
        *,
        kind: Kind,
        namespace: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        config: InformerConfig = InformerConfig(),  # noqa: B008 - a frozen dataclass: safe as a shared default
        name: str | None = None,
        observer: InformerObserver | None = None,
    ) -> None:
        if kind not in RESOURCES:
            raise ValueError(f"Informer kind must be one of {sorted(RESOURCES)}, got {kind!r}")
        if namespace is not None and (not isinstance(namespace, str) or not namespace):
            raise ValueError(
                f"Informer namespace must be a non-empty string or None (all), got {namespace!r}"
            )
        if not isinstance(config, InformerConfig):
            raise TypeError(f"Informer config must be an InformerConfig, got {type(config).__name__}")
        self._api = api_client
        self._observer: InformerObserver = observer or NoObserver()
        self.kind: Kind = kind
        self.namespace = namespace
        self.label_selector = label_selector or None
        self.field_selector = field_selector or None
        self.config = config
        self.name = name or "{}/{}{}{}".format(
            kind,
            namespace or "*",
            f" l={self.label_selector}" if self.label_selector else "",
            f" f={self.field_selector}" if self.field_selector else "",
        )
        # The collection to list and watch, the cache it fills and the fan-out the cache delivers through:
        # the parts the Relister and the Watcher are handed (see cache.py), none of which holds the informer.
        self._source = ListWatch(
            api_client,
            kind=kind,
            namespace=namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            connect_timeout=config.connect_timeout_seconds,
        )
        self._subscribers: dict[int, Subscriber] = {}
        self._next_token = 0
        self._fanout = Fanout(self.name, self._observer, self._subscribers)
        self._prepare = Preparer(
            kind, strip_managed_fields=config.strip_managed_fields, projection=config.projection
        )
        self._cache = ObjectCache(
            self._fanout, compact=config.compact_store, remembered_deletions=config.remembered_deletions
        )
        # Counters for tests and benchmarks: confirmations by GET, their verdicts, stale copies skipped.
        self.stats: dict[str, int] = {
            "confirm_gets": 0,
            "confirmed_gone": 0,
            "confirmed_present": 0,
            "confirm_failed": 0,
            "confirm_deferred": 0,
            "stale_copies_ignored": 0,
            "too_large_rv": 0,
        }

        self._backoff = Backoff(
            initial_seconds=config.backoff_initial_seconds,
            max_seconds=config.backoff_max_seconds,
            reset_after_seconds=config.backoff_reset_after_seconds,
        )
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._synced_event = asyncio.Event()

        # Failures, backoff, unhealthy after a while; the observer and on_health subscribers are told when
        # it changes. It holds the subscribers, never the informer, so an informer dropped without stop()
        # is still freed by reference counting.
        self._health = HealthTracker(
            name=self.name,
            config=config,
            backoff=self._backoff,
            observer=self._observer,
            subscribers=self._subscribers,
        )
        parts = ReflectorParts(
            name=self.name,
            source=self._source,
            cache=self._cache,
            prepare=self._prepare,
            config=config,
            stats=self.stats,
        )
        self._relister = Relister(parts)
        self._watcher = Watcher(parts, health=self._health)

    def __repr__(self) -> str:
        return f"<Informer {self.name} objects={len(self._cache)} connected={self._health.connected}>"

    # ----------------------------------------------------------------------------------------- public API

    def subscribe(
        self,
        on_event: Callable[[InformerEvent], None],
        on_health: Callable[[InformerHealth], None] | None = None,
    ) -> Callable[[], None]:
        """Register callbacks, run in the informer's event loop (they must not block). Returns a function
        that unsubscribes. A subscriber that joins after the initial sync receives nothing retroactively:
        it reads :meth:`items` for the current state. A callback that raises is logged and ignored."""
        token = self._next_token
        self._next_token += 1
        self._subscribers[token] = (on_event, on_health)

        def unsubscribe() -> None:
            self._subscribers.pop(token, None)

        return unsubscribe

    async def start(self) -> None:
        """Start the engine in a background task of the running loop; returns at once."""
        if self._stopped:
            raise RuntimeError(f"informer {self.name} was stopped; create a new Informer to start again")
        if self._task is not None:
            return
        self._task = asyncio.create_task(self._run(), name=f"informer {self.name}")

    async def wait_synced(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 - contract
        """Wait until the initial LIST has been applied (subscribers got ADDED for every object).
        Returns False if ``timeout`` seconds passed first."""
        if self._synced_event.is_set():
            return True
        try:
            async with asyncio.timeout(timeout):
                await self._synced_event.wait()
        except TimeoutError:
            return False
        return True

    async def stop(self) -> None:
        """Stop promptly: cancel the engine task (which closes any open response) and wait for it."""
        self._stopped = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._health.cancel_timer()
        self._health.set_connected(False)
        self._observer.on_stop()

    def get(self, uid: str) -> dict[str, Any] | None:
        """The stored object with this uid (read-only), or None."""
        return self._cache.get(uid)

    def items(self) -> list[dict[str, Any]]:
        """All stored objects (read-only dicts, a new list)."""
        return list(self._cache.values())

    def names(self) -> list[tuple[str | None, str]]:
        """``(namespace, name)`` of every stored object (a new list; no object is read, so this costs no
        decode with ``compact_store``)."""
        return self._cache.names()

    def uid_of(self, namespace: str | None, name: str) -> str | None:
        """The uid of the stored object with this namespace and name, or None (no object is read, so
        this costs no decode with ``compact_store``)."""
        return self._cache.uid_of(namespace, name)

    def by_name(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The stored object with this namespace and name (read-only), or None."""
        uid = self.uid_of(namespace, name)
        return None if uid is None else self._cache.get(uid)

    @property
    def cache(self) -> ObjectCache:
        """The store (for tests and benchmarks, which feed it events or weigh it): only the engine writes it
        in use, and every write is delivered to the subscribers."""
        return self._cache

    @property
    def keep_whole(self) -> Callable[[dict[str, Any]], bool] | None:
        """Objects for which this returns True are stored whole, projection or not (the trigger registry keeps
        the Jobs its triggers wait for whole: their event carries the whole Job)."""
        return self._prepare.keep_whole

    @keep_whole.setter
    def keep_whole(self, keep: Callable[[dict[str, Any]], bool] | None) -> None:
        self._prepare.keep_whole = keep

    @property
    def limit_ignored(self) -> bool:
        """Whether the server was seen to ignore ``limit`` on a resourceVersion=0 list (pages are then not
        asked for); for diagnostics."""
        return self._relister.limit_ignored

    @property
    def resource_version(self) -> str | None:
        """The resourceVersion the next watch would resume from (opaque; for diagnostics)."""
        return self._watcher.resource_version

    @property
    def synced(self) -> bool:
        """Whether the first list has completed (``health.synced``, without building the snapshot)."""
        return self._health.synced

    @property
    def failing(self) -> bool:
        """Whether the last list or watch attempt failed (``health.consecutive_failures > 0``) or the API
        refuses us; cheap enough to ask on every trigger's turn, unlike the ``health`` snapshot."""
        return self._health.failing

    @property
    def health(self) -> InformerHealth:
        return self._health.snapshot()

    # ------------------------------------------------------------------------------------- the main loop

    async def _run(self) -> None:
        """List, then watch; on every failure decide what to do next and back off.

        * 410 Expired (ERROR event, HTTP 410, or an expired continue token): the resourceVersion is gone
          from the server's history, so resuming is impossible - relist and reconcile. A 410 relists at
          once unless the previous failure was a 410 too (the 410 that greets us after an outage is the
          normal way back, not a reason to wait out the outage's backoff); 410s in a row back off like
          any error, so a server that answers 410 to every watch is not hammered (apache/airflow #21087).
        * A stalled stream: reopen the watch from the last resourceVersion at once (indistinguishable from
          a quiet stream without bookmarks, so not a failure).
        * A watch the server ended normally (timeoutSeconds, apiserver restart): resume at once.
        * The periodic resync (``resync_interval_seconds``): hand the stored objects to the subscribers again
          and resume the watch. Nothing is listed.
        * Anything else (connection refused/reset, timeouts, 5xx, 429, unexpected ERROR events, bad
          JSON): count a failure, back off (honouring Retry-After), then resume the watch from the last
          resourceVersion (or retry the LIST if we have no complete view yet).
        """
        loop = asyncio.get_running_loop()
        need_list = True
        # The first list and every list after a 410 read resourceVersion=0 (see listing.py): cheap for the
        # server, possibly stale, and checked by _relist before anything it says is delivered. No other
        # list is ever made (the periodic resync lists nothing).
        resync_every = self.config.resync_interval_seconds
        next_resync: float | None = None
        listed_before = False
        log.debug("informer %s: starting", self.name)
        while True:
            delay = 0.0
            if (
                resync_every is not None
                and next_resync is not None
                and loop.time() >= next_resync
                and not need_list
            ):
                # The periodic resync hands every stored object to the subscribers again, as client-go's
                # resync does, and asks the server nothing. It never lists: a list is made with the watch
                # closed, and an object that ended and was deleted in between would be found only missing,
                # its end unseen (a DELETED_UNKNOWN). Resuming the watch from self._rv loses no event; only
                # a 410 makes a list necessary.
                next_resync = loop.time() + resync_every
                log.debug("informer %s: periodic resync (no list)", self.name)
                for count, (namespace, name) in enumerate(self.names(), 1):
                    obj = self.by_name(namespace, name)
                    if obj is not None:
                        self._fanout(EventType.MODIFIED, obj, replay=True)
                    if count % 1000 == 0:
                        await asyncio.sleep(0)  # thousands of objects: let the loop's other tasks run
            try:
                listed = need_list
                if need_list:
                    await self._relist()
                    self._observer.on_list(relist=listed_before)
                    listed_before = True
                    need_list = False
                    if resync_every is not None:
                        next_resync = loop.time() + resync_every
                self._observer.on_watch_start(restart=not listed)
                await self._watcher.watch_once(deadline=next_resync)
            except asyncio.CancelledError:
                raise
            except Expired as exc:
                self._observer.on_expired()
                need_list = True
                delay = self._health.failure(f"410 Expired: {exc}", free=True)
                log.info("informer %s: %s; relisting in %.1f s", self.name, exc, delay)
            except Stalled as exc:
                self._observer.on_stall()
                # DEBUG, not WARNING: a quiet collection on a server that sends no bookmarks looks the same.
                log.debug("informer %s: watch silent (%s); reconnecting", self.name, exc)
            except KubeApiError as exc:
                if exc.too_large_resource_version:
                    # The apiserver we reached has not caught up with a resourceVersion another one gave us
                    # (HA control plane), to a watch resumed from it. Waiting is the answer.
                    self.stats["too_large_rv"] += 1
                    delay = self._health.failure(str(exc), retry_after=exc.retry_after)
                    log.info(
                        "informer %s: server behind our resourceVersion %s (%s); retrying in %.1f s",
                        self.name,
                        self._watcher.resource_version,
                        exc.message,
                        delay,
                    )
                elif denied := self._source.access_denied(exc):
                    # Permanent until someone grants it; unhealthy at once, an ERROR per backoff.
                    self._health.access_denied = denied
                    delay = self._health.failure(denied, retry_after=exc.retry_after)
                    self._health.mark_unhealthy()
                    log.error("informer %s: %s Retrying in %.1f s.", self.name, denied, delay)
                else:
                    delay = self._health.failure(str(exc), retry_after=exc.retry_after)
                    log.warning("informer %s: API error %s; retrying in %.1f s", self.name, exc, delay)
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError, ShortWatch) as exc:
                # ValueError covers a malformed JSON line (json.JSONDecodeError) and bad response shapes.
                desc = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                delay = self._health.failure(desc)
                log.warning("informer %s: %s; retrying in %.1f s", self.name, desc, delay)
            except Exception as exc:
                # Not expected (a bug, or an auth plugin failing to refresh a token): keep the engine
                # alive - subscribers rely on it - but log the traceback so it gets fixed.
                delay = self._health.failure(f"{type(exc).__name__}: {exc}")
                log.exception("informer %s: unexpected error; retrying in %.1f s", self.name, delay)
            if delay > 0:
                await asyncio.sleep(delay)

    # ------------------------------------------------------------------------------------------ lists

    async def _relist(self) -> None:
        """LIST and reconcile the store (:meth:`Relister.relist <airflow_jobwatch.kube.engine.relist.Relister.relist>`
        has the rules), then record the sync: the resourceVersion to watch from, health, the first sync."""
        started = time.monotonic()
        first = not self._health.synced
        listing = await self._relister.relist()
        self._watcher.resource_version = listing.rv
        self._health.listed()
        log.debug(
            "informer %s: %s %d objects at resourceVersion %s in %.2f s (%d added, %d modified, "
            "%d vanished, %d confirmed gone of %d checked)",
            self.name,
            "listed" if first else "relisted",
            len(listing.seen),
            listing.rv,
            time.monotonic() - started,
            listing.added,
            listing.modified,
            listing.vanished,
            listing.confirmed_gone,
            len(listing.doubtful),
        )
        if first:
            self._synced_event.set()
        self._health.notify()
