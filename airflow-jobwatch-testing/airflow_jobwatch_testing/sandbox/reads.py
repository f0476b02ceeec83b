"""GET and LIST: one object by name, and lists with selectors, paging and resourceVersion semantics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import tables
from .errors import bad_request, expired, not_found, too_large_resource_version
from .responses import _json_response
from .selectors import parse_field_selector, parse_label_selector
from .store import API_VERSIONS, LIST_KINDS, Entry, KeyIndex, decode_continue, encode_continue, key_string

if TYPE_CHECKING:
    from .store import Store


class ReadsMixin:
    """The read half of :class:`~.server.ApiServer` (it provides ``store``, ``counters`` and the
    watch-cache settings)."""

    store: Store
    counters: Counter[str]
    watch_cache: bool
    cache_lag: int
    cache_frozen_at: int | None

    def _get(self, resource: str, ns: str, name: str) -> Entry:
        entry = self.store.get(resource, ns, name)
        if entry is None:
            raise not_found(resource, name)
        return entry

    # ---- the watch cache ---------------------------------------------------------------------------
    # A real API server answers most reads from its watch cache, which follows etcd through a watch
    # and may lag behind it (by milliseconds normally; by much more under load, or on an HA control
    # plane where each server has its own cache). ``resourceVersion=0`` ("any") lists and
    # ``resourceVersionMatch=NotOlderThan`` lists are answered from it; unset resourceVersion (a
    # consistent read) and ``Exact`` are answered from etcd. The sandbox's cache is the store as it
    # was ``cache_lag`` revisions ago, or frozen at ``cache_frozen_at``.
    def cache_rv(self, resource: str) -> int:
        """The revision the watch cache of ``resource`` shows now (never older than the history kept)."""
        store = self.store
        if self.cache_frozen_at is not None:
            rv = min(self.cache_frozen_at, store.rv)
        else:
            rv = store.rv - self.cache_lag
        return max(rv, store.compacted_for(resource), 0)

    def _cached_listing(self, resource: str) -> tuple[int, tuple[dict[tuple[str, str], Entry], KeyIndex]]:
        rv = self.cache_rv(resource)
        if rv >= self.store.rv:
            return self.store.rv, self.store.listing(resource)
        self.counters[f"stale list {resource}"] += 1
        return rv, self.store.listing(resource, rv)

    # ---- list ------------------------------------------------------------------------------------
    def _list(self, resource: str, ns: str | None, query: Any, *, as_table: bool = False) -> web.Response:
        """LIST with the real server's resourceVersion semantics
        (https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list):

        * unset: the current state (a consistent read); ``limit`` pages;
        * ``"0"``: any state, from the watch cache (possibly stale); with the watch cache on,
          ``limit`` is ignored and the whole list comes back in one page;
        * ``N`` with ``resourceVersionMatch=NotOlderThan`` (or no match, the legacy meaning): the watch
          cache's state if it is at least ``N``, else 504 "Too large resource version";
        * ``N`` with ``Exact``: the state at ``N`` (410 Expired once ``N`` was compacted).
        """
        store = self.store
        label_match = parse_label_selector(query.get("labelSelector"))
        field_match, equals = parse_field_selector(query.get("fieldSelector"), resource)
        rv_param = query.get("resourceVersion")
        rv_match = query.get("resourceVersionMatch")
        if rv_match not in (None, "", "Exact", "NotOlderThan"):
            raise bad_request(
                f'invalid resourceVersionMatch "{rv_match}": expected "Exact" or "NotOlderThan"'
            )
        if rv_match and rv_param in (None, ""):
            raise bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
        if rv_match == "Exact" and rv_param == "0":
            raise bad_request('resourceVersionMatch "Exact" is forbidden for resourceVersion "0"')
        list_rv = store.rv
        listing = store.listing(resource)
        from_cache = False
        if rv_param == "0":
            if self.watch_cache:
                list_rv, listing = self._cached_listing(resource)
                from_cache = True
        elif rv_param not in (None, ""):
            try:
                requested = int(rv_param)
            except ValueError:
                raise bad_request(f'invalid resource version "{rv_param}"') from None
            if rv_match == "Exact":
                if requested > store.rv:
                    raise too_large_resource_version(requested, store.rv)
                if requested < store.rv and requested < store.compacted_for(resource):
                    raise expired("The resourceVersion for the provided list is too old.")
                list_rv = requested
                listing = store.listing(resource, requested)
            elif self.watch_cache:
                # A real server waits up to 3 s for its cache to reach N, then gives up with 504; the
                # sandbox's cache never catches up while lagging or frozen, so it answers at once.
                cached = self.cache_rv(resource)
                if requested > cached:
                    raise too_large_resource_version(requested, cached)
                list_rv, listing = self._cached_listing(resource)
            elif requested > store.rv:
                raise too_large_resource_version(requested, store.rv)
        start = ""
        token = query.get("continue")
        if token:
            try:
                list_rv, start = decode_continue(token)
            except ValueError as exc:
                raise bad_request(f"invalid continue token: {exc}") from None
            if list_rv < store.compacted_for(resource):
                raise expired(
                    "The provided continue parameter is too old to display a consistent list result. You can "
                    "start a new list without the continue parameter, or use the continue token in this "
                    "response to retrieve the remainder of the results. Continuing with the provided token "
                    "results in an inconsistent list - objects that were created, modified, or deleted "
                    "between the time the first chunk was returned and now may show up in the list."
                )
            # A continued list shows the state at the first page's revision, like etcd (pages of one
            # list never mix states); that state is built once for all the list's pages (Store.listing).
            listing = store.listing(resource, list_rv)
        limit_raw = query.get("limit")
        limit = int(limit_raw) if limit_raw and limit_raw.isdigit() and int(limit_raw) > 0 else 0
        if from_cache:
            limit = 0  # the watch cache does not page: the whole list, no continue token
        objects, index = listing
        # Keys in etcd order after the continue token's start: a binary search in the index, so a page
        # costs what it returns (plus what a selector skips), not the size of the whole collection.
        name_eq = equals.get("metadata.name")
        keys: Iterable[tuple[str, str]]
        if name_eq is not None and ns is not None:
            one = objects.get((ns, name_eq))
            keys = [(ns, name_eq)] if one is not None and (not start or f"/{name_eq}" > start) else []
        else:
            keys = index.after(ns, start)

        def token_start(k: tuple[str, str]) -> str:
            # A namespaced list's continue token holds "/<name>" (the key after "<namespace>"), like the
            # real server's (/work/shared/reference/real-apiserver/list-paging.json).
            return f"/{k[1]}" if ns is not None else key_string(k)

        selective = bool(query.get("labelSelector") or query.get("fieldSelector"))
        items: list[bytes] = []
        matched: list[dict[str, Any]] = []
        next_token: str | None = None
        last_key: tuple[str, str] = ("", "")
        for k in keys:
            entry = objects[k]
            if selective and not (
                label_match(entry.obj["metadata"].get("labels") or {}) and field_match(entry.obj)
            ):
                continue
            if limit and len(items) == limit:
                next_token = encode_continue(list_rv, token_start(last_key))
                break
            items.append(entry.item)
            matched.append(entry.obj)
            last_key = k
        if as_table:
            return _json_response(tables.table(resource, matched, str(list_rv), next_token))
        api_version, _kind = API_VERSIONS[resource]
        meta = b'{"resourceVersion":"' + str(list_rv).encode() + b'"'
        if next_token:
            meta += b',"continue":"' + next_token.encode() + b'"'
        meta += b"}"
        body = (
            b'{"kind":"'
            + LIST_KINDS[resource].encode()
            + b'","apiVersion":"'
            + api_version.encode()
            + b'","metadata":'
            + meta
            + b',"items":['
            + b",".join(items)
            + b"]}"
        )
        return _json_response(body)
