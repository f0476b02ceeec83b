"""The watch: one watch request from the last resourceVersion, its events applied to the cache.

:class:`Watcher` is handed the source it watches (:class:`~airflow_jobwatch.kube.engine.listwatch.ListWatch`), the
cache it applies events to and delivers through (:class:`~airflow_jobwatch.kube.engine.cache.ObjectCache`) and the
health tracker it reports to, as client-go's Reflector's ``watchHandler`` is handed its store; it never sees
the informer that owns them. It keeps the resourceVersion to resume from. Every way a watch ends is an exception or a return that the informer's loop
(``Informer._run``) answers: resume at once, back off, or relist.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from typing import Any

import aiohttp

from airflow_jobwatch.kube.engine.apierrors import (
    Expired,
    KubeApiError,
    ShortWatch,
    compare_resource_versions,
)
from airflow_jobwatch.kube.engine.health import HealthTracker
from airflow_jobwatch.kube.engine.informer_types import EventType
from airflow_jobwatch.kube.engine.reflector import ReflectorHalf, ReflectorParts
from airflow_jobwatch.kube.engine.watchstream import read_lines

# The engine's log lines keep the one logger name users configure for it, whichever module writes them.
log = logging.getLogger("airflow_jobwatch.kube.engine.informer")

# A watch the server closes this soon after opening, without sending a single event, is counted as a
# failure and backed off (client-go's reflector does the same: "very short watch" - an apiserver or a proxy
# that accepts and immediately drops watches would otherwise be hammered in a tight loop).
MIN_HEALTHY_WATCH_SECONDS = 1.0

# The server's own default for timeoutSeconds is random in [minRequestTimeout, 2*minRequestTimeout), i.e.
# up to 1800 s; we always send ours so that the stream ends well within the client-side timeouts and
# every informer does not reconnect at the same moment (the jitter spreads the reconnects).
WATCH_TIMEOUT_JITTER = (1.0, 2.0)


class Watcher(ReflectorHalf):
    """Watch requests for one collection (see the module docstring).

    :param parts: the collection to watch, the cache the events update (every change is delivered
        through it), how a watched object is prepared, the tuning (timeouts) and the counters.
    :param health: told when a watch opens, proves itself and closes.
    """

    def __init__(self, parts: ReflectorParts, *, health: HealthTracker) -> None:
        super().__init__(parts)
        self._health = health
        #: The resourceVersion the next watch resumes from: set from each LIST by the informer, moved forward
        #: by every event and bookmark.
        self.resource_version: str | None = None

    async def watch_once(self, *, deadline: float | None) -> None:
        """One watch request from the current resourceVersion, applying events until the stream ends.

        Returns when the server ends the stream normally or ``deadline`` (loop time, for the periodic
        resync) passes. Raises :class:`Expired` on 410, :class:`KubeApiError` on another ERROR event,
        :class:`Stalled` if the stream goes silent, :class:`ShortWatch` if the server closes it at once.
        """
        assert self.resource_version is not None  # a LIST always precedes the first watch
        loop = asyncio.get_running_loop()
        config = self._config
        health = self._health
        params = self._source.selector_params()
        params["watch"] = "true"
        params["allowWatchBookmarks"] = "true"
        params["resourceVersion"] = self.resource_version
        params["timeoutSeconds"] = str(
            max(1, int(config.watch_timeout_seconds * random.uniform(*WATCH_TIMEOUT_JITTER)))
        )
        # sock_read bounds the wait for the response headers (a server that accepted the connection but never
        # answers, as a half-open connection does); during the stream read_lines' stall detector applies.
        resp = await self._source.request(params, read_timeout=config.stall_timeout_seconds)
        opened = loop.time()
        events = 0
        proved: asyncio.TimerHandle | None = None
        try:
            health.watch_opened()
            # A watch that stays open for a second is a working watch, even if the namespace is quiet.
            proved = loop.call_later(MIN_HEALTHY_WATCH_SECONDS, health.record_success)
            lines = read_lines(resp.content, stall_timeout=config.stall_timeout_seconds, deadline=deadline)
            try:
                async with contextlib.aclosing(lines):
                    async for line in lines:
                        event = json.loads(line)
                        events += 1
                        if events == 1:
                            health.record_success()
                        self._apply_watch_event(event)
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionError) as exc:
                # The connection broke mid-stream (apiserver restart, load balancer idle cut, dropped
                # connection). After a watch that worked, that is the end of a stream like any other:
                # resume at once from the last resourceVersion (which makes any gap visible as a 410).
                # A watch broken before it delivered anything or proved itself is a failure (backoff).
                if events == 0 and loop.time() - opened < MIN_HEALTHY_WATCH_SECONDS:
                    raise
                log.debug(
                    "informer %s: watch connection broken (%s); resuming", self._name, type(exc).__name__
                )
                return
        finally:
            if proved is not None:
                proved.cancel()
            resp.close()
            health.watch_closed()
        if (
            events == 0
            and loop.time() - opened < MIN_HEALTHY_WATCH_SECONDS
            and (deadline is None or loop.time() < deadline)
        ):
            raise ShortWatch(f"server closed the watch after {loop.time() - opened:.2f} s without any event")

    def _apply_watch_event(self, event: dict[str, Any]) -> None:
        etype = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise ValueError(f"watch event without an object: type={etype!r}")
        if etype == "ERROR":
            error = KubeApiError.from_status(obj)
            if error.status == 410:
                raise Expired(error.message or "Expired")
            raise error
        metadata = obj.get("metadata") or {}
        rv = metadata.get("resourceVersion")
        if etype == "BOOKMARK":
            # A bookmark only moves our resourceVersion forward, so a reconnect after a quiet period resumes
            # from a recent revision instead of one that may have left the history (KEP-956).
            if rv:
                self.resource_version = str(rv)
            return
        uid = metadata.get("uid")
        if not uid or etype not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("informer %s: ignoring unexpected watch event type=%r uid=%r", self._name, etype, uid)
            return
        obj = self._prepare(obj)
        if rv:
            self.resource_version = str(rv)
        cache = self._cache
        if cache.was_deleted(uid):
            return  # a replay (after a stale list) of an object whose deletion was already delivered
        prev = cache.get(uid)
        if etype == "DELETED":
            if prev is None:
                # Never stored, or already reported gone: deletions are delivered exactly once.
                return
            cache.delete(uid, EventType.DELETED, obj)
            return
        if prev is not None:
            prev_rv = prev["metadata"].get("resourceVersion")
            if prev_rv == rv:
                return  # the same revision again: nothing changed
            order = compare_resource_versions(rv, prev_rv)
            if order is not None and order < 0:
                # A watch resumed from a stale list's resourceVersion replays changes we already have
                # (our copy came from a newer source: an earlier watch or a confirming GET). Skip them.
                self.stats["stale_copies_ignored"] += 1
                return
        cache.put(obj)
