"""The watch: one watch request from the informer's resourceVersion, its events applied to the informer's store.

:class:`Watcher` works on the store of the :class:`~airflow_jobwatch.kube.informer.Informer` it belongs to and
delivers through that informer's fan-out (``_put``, ``_remove``, ``_emit``), as client-go's Reflector's
``watchHandler`` does. Every way a watch ends is an exception or a return that the informer's loop
(``Informer._run``) answers: resume at once, back off, or relist.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from typing import TYPE_CHECKING, Any

import aiohttp

from airflow_jobwatch.kube.apierrors import KubeApiError, _Expired, _ShortWatch, compare_resource_versions
from airflow_jobwatch.kube.informer_types import EventType
from airflow_jobwatch.kube.watchstream import _read_lines

if TYPE_CHECKING:
    from airflow_jobwatch.kube.informer import Informer

# The engine's log lines keep the one logger name users configure for it, whichever module writes them.
log = logging.getLogger("airflow_jobwatch.kube.informer")

# A watch the server closes this soon after opening, without sending a single event, is counted as a
# failure and backed off (client-go's reflector does the same: "very short watch" - an apiserver or a proxy
# that accepts and immediately drops watches would otherwise be hammered in a tight loop).
MIN_HEALTHY_WATCH_SECONDS = 1.0

# The server's own default for timeoutSeconds is random in [minRequestTimeout, 2*minRequestTimeout), i.e.
# up to 1800 s; we always send ours so that the stream ends well within the client-side timeouts and
# every informer does not reconnect at the same moment (the jitter spreads the reconnects).
_WATCH_TIMEOUT_JITTER = (1.0, 2.0)


class Watcher:
    """Watch requests for one informer (see the module docstring).

    :param informer: the informer whose store the events update; its ``config``, selectors, resourceVersion
        and HTTP requests are used.
    """

    def __init__(self, informer: Informer) -> None:
        self._informer = informer

    async def watch_once(self, *, deadline: float | None) -> None:
        """One watch request from the current resourceVersion, applying events until the stream ends.

        Returns when the server ends the stream normally or ``deadline`` (loop time, for the periodic
        resync) passes. Raises :class:`_Expired` on 410, :class:`KubeApiError` on another ERROR event,
        :class:`_Stalled` if the stream goes silent, :class:`_ShortWatch` if the server closes it at once.
        """
        inf = self._informer
        assert inf._rv is not None  # a LIST always precedes the first watch
        loop = asyncio.get_running_loop()
        params = inf._selector_params()
        params["watch"] = "true"
        params["allowWatchBookmarks"] = "true"
        params["resourceVersion"] = inf._rv
        params["timeoutSeconds"] = str(
            max(1, int(inf.config.watch_timeout_seconds * random.uniform(*_WATCH_TIMEOUT_JITTER)))
        )
        # sock_read bounds the wait for the response headers (a server that accepted the connection but never
        # answers, as a half-open connection does); during the stream _read_lines' stall detector applies.
        resp = await inf._request(params, read_timeout=inf.config.stall_timeout_seconds)
        opened = loop.time()
        events = 0
        proved: asyncio.TimerHandle | None = None
        try:
            inf._health.watches += 1
            inf._health.set_connected(True)
            # A watch that stays open for a second is a working watch, even if the namespace is quiet.
            proved = loop.call_later(MIN_HEALTHY_WATCH_SECONDS, inf._health.record_success)
            lines = _read_lines(
                resp.content, stall_timeout=inf.config.stall_timeout_seconds, deadline=deadline
            )
            try:
                async with contextlib.aclosing(lines):
                    async for line in lines:
                        event = json.loads(line)
                        events += 1
                        if events == 1:
                            inf._health.record_success()
                        self._apply_watch_event(event)
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionError) as exc:
                # The connection broke mid-stream (apiserver restart, load balancer idle cut, dropped
                # connection). After a watch that worked, that is the end of a stream like any other:
                # resume at once from the last resourceVersion (which makes any gap visible as a 410).
                # A watch broken before it delivered anything or proved itself is a failure (backoff).
                if events == 0 and loop.time() - opened < MIN_HEALTHY_WATCH_SECONDS:
                    raise
                log.debug("informer %s: watch connection broken (%s); resuming", inf.name, type(exc).__name__)
                return
        finally:
            if proved is not None:
                proved.cancel()
            resp.close()
            inf._health.last_sync = time.monotonic()
            inf._health.set_connected(False)
        if (
            events == 0
            and loop.time() - opened < MIN_HEALTHY_WATCH_SECONDS
            and (deadline is None or loop.time() < deadline)
        ):
            raise _ShortWatch(f"server closed the watch after {loop.time() - opened:.2f} s without any event")

    def _apply_watch_event(self, event: dict[str, Any]) -> None:
        inf = self._informer
        etype = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise ValueError(f"watch event without an object: type={etype!r}")
        if etype == "ERROR":
            error = KubeApiError.from_status(obj)
            if error.status == 410:
                raise _Expired(error.message or "Expired")
            raise error
        metadata = obj.get("metadata") or {}
        rv = metadata.get("resourceVersion")
        if etype == "BOOKMARK":
            # A bookmark only moves our resourceVersion forward, so a reconnect after a quiet period resumes
            # from a recent revision instead of one that may have left the history (KEP-956).
            if rv:
                inf._rv = str(rv)
            return
        uid = metadata.get("uid")
        if not uid or etype not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("informer %s: ignoring unexpected watch event type=%r uid=%r", inf.name, etype, uid)
            return
        obj = inf._prepare(obj)
        if rv:
            inf._rv = str(rv)
        if uid in inf._gone:
            return  # a replay (after a stale list) of an object whose deletion was already delivered
        prev = inf._store.get(uid)
        if etype == "DELETED":
            if prev is None:
                # Never stored, or already reported gone: deletions are delivered exactly once.
                return
            inf._remove(uid, EventType.DELETED, obj)
            return
        if prev is not None:
            prev_rv = prev["metadata"].get("resourceVersion")
            if prev_rv == rv:
                return  # the same revision again: nothing changed
            order = compare_resource_versions(rv, prev_rv)
            if order is not None and order < 0:
                # A watch resumed from a stale list's resourceVersion replays changes we already have
                # (our copy came from a newer source: an earlier watch or a confirming GET). Skip them.
                inf.stats["stale_copies_ignored"] += 1
                return
        inf._put(obj)
        inf._emit(EventType.MODIFIED if prev is not None else EventType.ADDED, obj)
