"""GET and LIST: one object by name, and lists with selectors, paging and resourceVersion semantics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import tables
from .errors import ApiError, bad_request, expired, not_found
from .responses import _json_response
from .selectors import parse_field_selector, parse_label_selector
from .store import API_VERSIONS, LIST_KINDS, Entry, decode_continue, encode_continue

if TYPE_CHECKING:
    from .store import Store


class ReadsMixin:
    """The read half of :class:`~.server.ApiServer` (it provides ``store``)."""

    store: Store

    def _get(self, resource: str, ns: str, name: str) -> Entry:
        entry = self.store.get(resource, ns, name)
        if entry is None:
            raise not_found(resource, name)
        return entry

    # ---- list ------------------------------------------------------------------------------------
    def _list(self, resource: str, ns: str | None, query: Any, *, as_table: bool = False) -> web.Response:
        store = self.store
        label_match = parse_label_selector(query.get("labelSelector"))
        field_match, equals = parse_field_selector(query.get("fieldSelector"), resource)
        rv_param = query.get("resourceVersion")
        rv_match = query.get("resourceVersionMatch")
        if rv_param not in (None, "", "0"):
            try:
                requested = int(rv_param)
            except ValueError:
                raise bad_request(f'invalid resource version "{rv_param}"') from None
            if requested > store.rv:
                raise ApiError(
                    504,
                    f"Timeout: Too large resource version: {requested}, current: {store.rv}",
                    reason="Timeout",
                    details={
                        "causes": [
                            {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
                        ],
                        "retryAfterSeconds": 1,
                    },
                )
            if rv_match == "Exact" and requested < store.rv and requested < store.compacted_for(resource):
                raise expired("The resourceVersion for the provided list is too old.")
        list_rv = store.rv
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
        limit_raw = query.get("limit")
        limit = int(limit_raw) if limit_raw and limit_raw.isdigit() and int(limit_raw) > 0 else 0

        # A continued list shows the state at the first page's revision, like etcd (pages of one
        # list never mix states); the first page and unpaged lists show the current state.
        objects = store.objects[resource] if list_rv >= store.rv else store.snapshot(resource, list_rv)
        name_eq = equals.get("metadata.name")
        if name_eq is not None and ns is not None:
            one = objects.get((ns, name_eq))
            keys = [(ns, name_eq)] if one is not None else []
        elif ns is not None:
            keys = sorted(k for k in objects if k[0] == ns)
        else:
            keys = sorted(objects)

        def key_string(k: tuple[str, str]) -> str:
            return f"/{k[1]}" if ns is not None else (f"{k[0]}/{k[1]}" if k[0] else k[1])

        selective = bool(query.get("labelSelector") or query.get("fieldSelector"))
        items: list[bytes] = []
        matched: list[dict[str, Any]] = []
        next_token: str | None = None
        last_key: tuple[str, str] = ("", "")
        for k in keys:
            if start and key_string(k) <= start:
                continue
            entry = objects[k]
            if selective and not (
                label_match(entry.obj["metadata"].get("labels") or {}) and field_match(entry.obj)
            ):
                continue
            if limit and len(items) == limit:
                next_token = encode_continue(list_rv, key_string(last_key))
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
