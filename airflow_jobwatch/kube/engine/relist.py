"""Relist and reconcile: a paged LIST applied to an informer's store, page by page, and the checks that keep
a possibly stale list from inventing deletions or rolling objects back (client-go's ``Reflector.list``).

:class:`Relister` is handed what it works with, as client-go's Reflector is: the source it lists
(:class:`~airflow_jobwatch.kube.engine.listwatch.ListWatch`) and the cache it fills and delivers through
(:class:`~airflow_jobwatch.kube.engine.cache.ObjectCache`); it never sees the informer that owns them. The informer
decides when to list (every list reads resourceVersion=0; see ``listing.py``), and records the sync
(resourceVersion, health) from what :meth:`Relister.relist` returns.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from airflow_jobwatch.kube.engine import listing as list_pages
from airflow_jobwatch.kube.engine.apierrors import KubeApiError, compare_resource_versions
from airflow_jobwatch.kube.engine.informer_types import EventType
from airflow_jobwatch.kube.engine.listing import Listing
from airflow_jobwatch.kube.engine.reflector import ReflectorHalf, ReflectorParts
from airflow_jobwatch.kube.engine.store import gc_paused

# The engine's log lines keep the one logger name users configure for it, whichever module writes them.
log = logging.getLogger("airflow_jobwatch.kube.engine.informer")


class Relister(ReflectorHalf):
    """LIST + reconcile for one collection (see the module docstring).

    :param parts: the collection to list, the cache it is reconciled against (every change is delivered
        through it), how a listed or fetched object is prepared, the tuning and the counters.
    """

    def __init__(self, parts: ReflectorParts) -> None:
        super().__init__(parts)
        #: Whether the server was seen to ignore ``limit`` (a watch cache answering resourceVersion=0 returns
        #: everything in one response): pages are not asked for any more.
        self.limit_ignored = False

    async def relist(self) -> Listing:
        """LIST and reconcile the store with what the server has now.

        Emits ADDED for objects new to the store, MODIFIED for objects whose resourceVersion changed, and
        DELETED_UNKNOWN (with the last state we saw) for objects no longer listed; unchanged objects emit
        nothing. On the first list every object is new, so subscribers get ADDED for all of them.

        A list read with resourceVersion=0 may come from a watch cache that lags behind what this informer
        has already seen (another apiserver of an HA control plane, a cache still catching up after a
        restart). Believing it would report running pods as deleted and roll finished ones back to running,
        so what such a list says is checked first, and a relist never invents a deletion:

        * a listed copy older than the stored one (resourceVersions compared as integers, KEP-5504) does not
          replace it; the watch that follows, from the list's older resourceVersion, replays the changes in
          order and the ones we already have are skipped the same way;
        * an object missing from the list is a deletion only if the list is at least as new as our copy of
          it (a snapshot at resourceVersion L that lacks an object we saw at V <= L really lost it);
          otherwise (our copy is newer than the list, or the versions cannot be compared) a GET by name, which
          the server answers from etcd, decides (:meth:`_confirm`);
        * an object whose deletion was already delivered never comes back (uids are never reused).

        Pages are applied as they arrive (:meth:`_apply_page`), replacing stored objects one by one, so the
        peak memory is one store plus one page rather than two full copies of the collection.
        Disappearances are decided only once the list is complete; if it fails half-way, the next list
        finishes the job.
        """
        listing = Listing()
        continue_token: str | None = None
        while True:
            body = await self._list_page(continue_token)
            # No await from here to the end of the page: see gc_paused for why the collector waits.
            with gc_paused():
                continue_token = self._apply_page(body, listing)
                del body
            if not continue_token:
                break
        list_rv = listing.rv
        seen = listing.seen
        doubtful = listing.doubtful
        vanished: list[str] = []
        for uid, prev in self._cache.items():
            if uid in seen or uid in doubtful:
                continue
            order = compare_resource_versions(prev["metadata"].get("resourceVersion"), list_rv)
            if order is not None and order <= 0:
                vanished.append(uid)
            else:
                doubtful[uid] = prev
        for uid in vanished:
            last = self._cache.get(uid)
            assert last is not None  # read from the cache above, with no await since
            self._cache.delete(uid, EventType.DELETED_UNKNOWN, last)
        listing.vanished = len(vanished)
        listing.confirmed_gone = await self._confirm(doubtful) if doubtful else 0
        return listing

    async def _list_page(self, continue_token: str | None) -> bytes:
        """One page of a LIST: the raw body. The first page (no ``continue_token``) reads
        resourceVersion=0; later pages belong to the snapshot of the first (the continue token pins it)."""
        params = self._source.selector_params()
        # A watch cache answering resourceVersion=0 ignores `limit` and sends the whole collection at once
        # (kube-apiserver before ConsistentListFromCache/paginated cache lists; still so for RV=0 on many
        # versions). Asking is harmless, but once we know it is ignored we stop pretending to page.
        if not self.limit_ignored:
            params["limit"] = str(self._config.page_size)
        if continue_token:
            # resourceVersion must not be sent with continue: the token pins the snapshot. A token older than
            # the server's history answers 410 Expired, and _run restarts the whole list.
            params["continue"] = continue_token
        else:
            params["resourceVersion"] = "0"
        resp = await self._source.request(params, read_timeout=self._config.stall_timeout_seconds)
        try:
            return await resp.read()
        finally:
            resp.release()

    def _apply_page(self, body: bytes, listing: Listing) -> str | None:
        """Parse one LIST page and apply its items to the store (see :meth:`relist` for the rules); returns
        the continue token of the next page, or None after the last.

        Items are decoded whole (with msgspec; see ``listing.decode_page``) and prepared (stripped, projected) only
        when stored: an unchanged object, the bulk of a relist, costs reading its uid and resourceVersion, a
        dict lookup and a string comparison. Everything parsed here that is not stored is freed when this
        returns (the caller holds the collector off until then, :func:`gc_paused`).
        """
        list_rv, continue_token, items, head, load = list_pages.decode_page(body)
        if not list_rv and not listing.rv:
            raise ValueError(f"LIST {self._source.path} returned no metadata.resourceVersion")
        listing.rv = listing.rv or list_rv
        if len(items) > self._config.page_size and not self.limit_ignored:
            self.limit_ignored = True
            log.debug(
                "informer %s: the server ignored limit=%d on a resourceVersion=0 list (%d items in one "
                "response); not paging such lists any more",
                self._name,
                self._config.page_size,
                len(items),
            )
        seen = listing.seen
        cache = self._cache
        for item in items:
            uid, new_rv = head(item)
            seen.add(uid)
            if cache.was_deleted(uid):
                self.stats["stale_copies_ignored"] += 1
                continue
            prev = cache.get(uid)
            if prev is not None:
                prev_rv = prev["metadata"].get("resourceVersion")
                if prev_rv == new_rv:
                    continue
                order = compare_resource_versions(new_rv, prev_rv)
                if order is not None and order < 0:
                    self.stats["stale_copies_ignored"] += 1
                    continue
                if order is None:
                    listing.doubtful[uid] = prev
                    continue
            if cache.put(self._prepare(load(item))):
                listing.added += 1
            else:
                listing.modified += 1
        return continue_token

    async def _confirm(self, doubtful: dict[str, dict[str, Any]]) -> int:
        """Settle objects a possibly stale list could not: one GET by name each (a consistent read, answered
        from etcd), at most ``confirm_concurrency`` at a time and ``max_confirmations_per_relist`` in all.

        404, or an object of that name with another uid: the one we knew is gone - DELETED_UNKNOWN. The same
        uid: it is alive; a newer copy replaces ours (MODIFIED), and one that no longer matches our label
        selector has left this informer (a watch reports that as DELETED too). A GET that fails, or one over
        the cap, leaves the object as it is: never tombstoned on a guess; the next relist asks again and
        the watch that follows this list settles it meanwhile. Returns how many were confirmed gone.
        """
        batch = list(doubtful.items())
        cap = self._config.max_confirmations_per_relist
        if len(batch) > cap:
            self.stats["confirm_deferred"] += len(batch) - cap
            log.warning(
                "informer %s: %d objects need a confirming GET after a possibly stale list; checking %d now, "
                "the rest at the next relist",
                self._name,
                len(batch),
                cap,
            )
            batch = batch[:cap]
        semaphore = asyncio.Semaphore(self._config.confirm_concurrency)

        async def fetch(prev: dict[str, Any]) -> dict[str, Any] | None:
            async with semaphore:
                self.stats["confirm_gets"] += 1
                return await self._get_current(prev)

        results = await asyncio.gather(*(fetch(prev) for _, prev in batch), return_exceptions=True)
        gone = 0
        for (uid, prev), result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                if isinstance(result, asyncio.CancelledError):
                    raise result
                self.stats["confirm_failed"] += 1
                log.info(
                    "informer %s: could not confirm %s/%s (%s); keeping it until the next relist",
                    self._name,
                    prev["metadata"].get("namespace"),
                    prev["metadata"].get("name"),
                    result,
                )
                continue
            stored = self._cache.get(uid)
            if stored is None or stored["metadata"].get("resourceVersion") != prev["metadata"].get(
                "resourceVersion"
            ):
                continue  # changed meanwhile (cannot happen while the watch is not running; be safe)
            current = result
            labels = ((current or {}).get("metadata") or {}).get("labels") or {}
            if (
                current is None
                or current["metadata"].get("uid") != uid
                or (self._source.label_match is not None and not self._source.label_match(labels))
            ):
                gone += 1
                self.stats["confirmed_gone"] += 1
                self._cache.delete(uid, EventType.DELETED_UNKNOWN, prev)
                continue
            self.stats["confirmed_present"] += 1
            order = compare_resource_versions(
                current["metadata"].get("resourceVersion"), prev["metadata"].get("resourceVersion")
            )
            if order == 0 or (
                order is None
                and current["metadata"].get("resourceVersion") == prev["metadata"].get("resourceVersion")
            ):
                continue
            if order is not None and order < 0:
                continue
            self._cache.put(current)  # stored before, so delivered as MODIFIED
        return gone

    async def _get_current(self, prev: dict[str, Any]) -> dict[str, Any] | None:
        """The object named like ``prev`` as the server has it now (None on 404)."""
        metadata = prev["metadata"]
        path = self._source.object_path(metadata.get("namespace"), metadata["name"])
        try:
            # No resourceVersion: "most recent", served from etcd (a quorum read), never from a cache.
            resp = await self._source.request({}, read_timeout=self._config.stall_timeout_seconds, path=path)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise
        try:
            body = await resp.read()
        finally:
            resp.release()
        obj = json.loads(body)
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            raise ValueError(f"GET {path} returned no object")
        return self._prepare(obj)
