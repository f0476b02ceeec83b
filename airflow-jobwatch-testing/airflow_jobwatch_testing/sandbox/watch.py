"""WATCH: the initial snapshot or replay, 410 Expired, bookmarks, timeouts, stalls and dropped streams."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
from collections import Counter
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import tables
from .errors import bad_request, too_old_resource_version
from .responses import JSON, _bool_param
from .selectors import parse_field_selector, parse_label_selector
from .store import API_VERSIONS, WATCHER_MAX_BUFFER, Watcher

if TYPE_CHECKING:
    from .store import Store

# A watch without timeoutSeconds is ended by the real server after --min-request-timeout (1800 s)
# times a random factor in [1, 2), so clients must expect (and survive) server-side stream ends.
DEFAULT_WATCH_TIMEOUT_RANGE = (1800.0, 3600.0)


class WatchMixin:
    """The watch half of :class:`~.server.ApiServer` (it provides ``sb``, ``store``, ``counters``
    and the ``watch_expired`` fault)."""

    sb: Any
    store: Store
    counters: Counter[str]
    watch_expired: bool

    # ---- watch -----------------------------------------------------------------------------------
    async def _watch(self, request: web.BaseRequest, resource: str, ns: str | None) -> web.StreamResponse:
        query = request.query
        store = self.store
        label_text = query.get("labelSelector")
        field_text = query.get("fieldSelector")
        label_match = parse_label_selector(label_text)
        field_match, _eq = parse_field_selector(field_text, resource)
        rv_param = query.get("resourceVersion") or ""
        send_initial = _bool_param(query.get("sendInitialEvents"))
        bookmarks = _bool_param(query.get("allowWatchBookmarks"))
        timeout_raw = query.get("timeoutSeconds")
        timeout = 0.0
        if timeout_raw:
            try:
                timeout = float(timeout_raw)
            except ValueError:
                raise bad_request(f'invalid timeoutSeconds "{timeout_raw}"') from None
        if timeout <= 0:
            # Unset or 0 means "the server's default", not "end at once" (as on a real server).
            timeout = random.uniform(*DEFAULT_WATCH_TIMEOUT_RANGE)
        watcher = Watcher(resource, ns, label_match, field_match, bool(label_text or field_text))
        if tables.wants_table(request.headers.get("Accept", "")):
            watcher.render = functools.partial(self._table_event, resource)

        # Decide what the stream starts with, synchronously (no await) so no event can slip between
        # the snapshot/replay and registering the watcher.
        initial: list[bytes] = []
        expired_status: dict[str, Any] | None = None
        initial_end_bookmark = False
        if rv_param in ("", "0") or send_initial:
            for entry in store.iter(resource, ns):
                if watcher.matches(entry.obj):
                    if watcher.render is not None:
                        initial.append(watcher.render("ADDED", entry.obj))
                    else:
                        initial.append(b'{"type":"ADDED","object":' + entry.full + b"}\n")
            initial_end_bookmark = send_initial and bookmarks
        else:
            try:
                requested = int(rv_param)
            except ValueError:
                raise bad_request(f'invalid resource version "{rv_param}"') from None
            replay = None if self.watch_expired else store.replay_from(requested, resource)
            if replay is None:
                expired_status = too_old_resource_version(requested, store.rv)
            else:
                probe = Watcher(
                    resource,
                    ns,
                    label_match,
                    field_match,
                    watcher.selective,
                    render=watcher.render,
                    max_buffer=None,  # a replay is delivered whole, however long
                )
                for ev in replay:
                    probe.offer(ev)
                initial.extend(probe.buffer)

        if store.stall_new_watches:
            # A half-open connection: the request reached the server but nothing ever comes back,
            # not even the response headers.
            watcher.stalled = True
            store.add_watcher(watcher)
            try:
                while not watcher.closed:
                    watcher.wakeup.clear()
                    await watcher.wakeup.wait()
            finally:
                store.remove_watcher(watcher)
            return self._abort(request)

        resp = web.StreamResponse(
            status=200, headers={"Content-Type": JSON, "Cache-Control": "no-cache, private"}
        )
        if expired_status is not None:
            # Counted apart from the request itself ("watch pods"), so demos and benchmarks can say how
            # many watches were told 410 Expired.
            self.counters[f"expired watch {resource}"] += 1
            line = json.dumps({"type": "ERROR", "object": expired_status}, separators=(",", ":")).encode()
            with contextlib.suppress(ConnectionError):
                await resp.prepare(request)
                await resp.write(line + b"\n")
                await resp.write_eof()
            return resp

        # The initial backlog does not count against the "too slow" limit: only live events the client
        # fails to read do.
        watcher.max_buffer = WATCHER_MAX_BUFFER + len(initial)
        watcher.buffer.extend(initial)
        if initial_end_bookmark:
            watcher.buffer.append(self._bookmark_line(resource, initial_events_end=True))
        store.add_watcher(watcher)
        try:
            await resp.prepare(request)
            await self._pump(watcher, resp, resource, stream_seconds=timeout, bookmarks=bookmarks)
        except ConnectionError:
            return resp  # the client went away mid-stream: nothing left to do
        finally:
            store.remove_watcher(watcher)
        if watcher.closed and watcher.close_reason in ("dropped", "outage"):
            return self._abort(request, resp)
        with contextlib.suppress(ConnectionError):
            await resp.write_eof()
        return resp

    @staticmethod
    def _table_event(resource: str, type_: str, obj: dict[str, Any]) -> bytes:
        """A watch event whose object is a one-row Table (what kubectl get --watch asks for)."""
        rendered = tables.table(resource, [obj], obj["metadata"].get("resourceVersion", ""), None)
        return json.dumps({"type": type_, "object": rendered}, separators=(",", ":")).encode() + b"\n"

    def _bookmark_line(self, resource: str, *, initial_events_end: bool = False) -> bytes:
        api_version, kind = API_VERSIONS[resource]
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        if initial_events_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {"kind": kind, "apiVersion": api_version, "metadata": meta}
        return json.dumps({"type": "BOOKMARK", "object": obj}, separators=(",", ":")).encode() + b"\n"

    async def _pump(
        self,
        watcher: Watcher,
        resp: web.StreamResponse,
        resource: str,
        *,
        stream_seconds: float,
        bookmarks: bool,
    ) -> None:
        """Copy queued events to the response until the timeout, a close, or a stall.

        Events are written in batches: everything queued since the last write goes out in one chunk,
        which is what keeps fan-out to many watchers cheap under load.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + stream_seconds
        interval = self.sb.bookmark_interval
        next_bookmark = loop.time() + interval if (bookmarks and interval) else None
        while True:
            if watcher.stalled:
                while not watcher.closed:
                    watcher.wakeup.clear()
                    await watcher.wakeup.wait()
                return
            if watcher.closed:
                return
            now = loop.time()
            if now >= deadline:
                return  # timeoutSeconds ends the stream even while events keep coming
            if watcher.buffer:
                chunk = b"".join(watcher.buffer)
                watcher.buffer.clear()
                await resp.write(chunk)
                continue
            if next_bookmark is not None and now >= next_bookmark:
                await resp.write(self._bookmark_line(resource))
                next_bookmark = now + (self.sb.bookmark_interval or interval)
                continue
            wait_until = deadline if next_bookmark is None else min(deadline, next_bookmark)
            watcher.wakeup.clear()
            try:
                async with asyncio.timeout(max(0.0, wait_until - now)):
                    await watcher.wakeup.wait()
            except TimeoutError:
                pass

    @staticmethod
    def _abort(request: web.BaseRequest, resp: web.StreamResponse | None = None) -> web.StreamResponse:
        """Cut the TCP connection without ending the HTTP response (what a client sees on a network drop)."""
        transport = request.transport
        if transport is not None:
            transport.abort()
        return resp if resp is not None else web.Response(status=200)
