"""The sandbox API server: an aiohttp app speaking the Kubernetes REST API for namespaces, pods, jobs.

The HTTP layer here translates requests into :class:`~.store.Store` operations and answers with the
same bytes, headers and Status errors a real kube-apiserver sends; the semantics a client's
correctness depends on (resourceVersion, watch replay and 410, bookmarks, selectors, paging,
optimistic concurrency, graceful deletion, finalizers, garbage collection) are implemented, the
rest of the API (RBAC, admission, other kinds) is not.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import logging
import os
import random
import re
import secrets
import time
from collections import Counter
from typing import Any

from aiohttp import web

from . import discovery, tables
from .errors import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    expired,
    invalid,
    not_found,
    status_object,
    too_old_resource_version,
)
from .patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from .resources import PREPARE, init_metadata
from .selectors import parse_field_selector, parse_label_selector
from .store import (
    API_VERSIONS,
    LIST_KINDS,
    WATCHER_MAX_BUFFER,
    Entry,
    Store,
    Watcher,
    clone,
    decode_continue,
    encode_continue,
    now_rfc3339,
)

log = logging.getLogger(__name__)

JSON = "application/json"
# A watch without timeoutSeconds is ended by the real server after --min-request-timeout (1800 s)
# times a random factor in [1, 2), so clients must expect (and survive) server-side stream ends.
DEFAULT_WATCH_TIMEOUT_RANGE = (1800.0, 3600.0)
_STATUS_REASONS_FOR_FAULTS = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}
_FAULT_MESSAGES = {
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: injected by the sandbox",
    503: "The server is currently unable to handle the request (injected by the sandbox)",
}
_PATH = re.compile(
    r"^/(?:api/v1|apis/batch/v1)"
    r"(?:/namespaces/(?P<ns>[^/]+)(?=/(?:pods|jobs|events)(?:/|$)))?"
    r"/(?P<resource>pods|jobs|namespaces|events)"
    r"(?:/(?P<name>[^/]+))?"
    r"(?:/(?P<sub>status|log))?/?$"
)


def _json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
    return web.Response(body=data, status=status, content_type=JSON, headers=headers)


def _error_response(err: ApiError) -> web.Response:
    return _json_response(err.status(), err.code, headers=err.headers or None)


def _bool_param(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1", "yes")


def _verb(method: str, name: str | None, sub: str | None, query: Any) -> str:
    """The Kubernetes verb of a request (what RBAC and the request counters call it)."""
    if method == "GET":
        if name is None:
            return "watch" if _bool_param(query.get("watch")) else "list"
        return "get"
    if name is None:
        verb = {"POST": "create", "DELETE": "deletecollection"}.get(method)
    elif sub == "log":
        verb = None  # logs are read-only
    else:
        verb = {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
        if verb == "delete" and sub is not None:
            verb = None
    if verb is None:
        raise ApiError(405, "the server does not allow this method on the requested resource")
    return verb


class ApiServer:
    """HTTP handlers. Owns no state of its own beyond faults and counters: objects live in the store."""

    def __init__(self, sandbox: Any) -> None:
        self.sb = sandbox
        self.store: Store = sandbox.store
        self.counters: Counter[str] = Counter()
        # Faults (see Sandbox's fault methods for their meaning).
        self.error_rate = 0.0
        self.error_status = 503
        self.error_retry_after: float | None = None
        self.error_verbs: set[str] | None = None
        self.watch_expired = False
        self._rng = random.Random()

    # ---- entry point -----------------------------------------------------------------------------
    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if not self._authorized(request):
            return _json_response(status_object(401, "Unauthorized"), 401)
        path = request.path
        if path.startswith("/_sandbox/"):
            answer: web.StreamResponse = await self.sb.admin.handle(request)
            return answer
        try:
            doc = self._discovery(path, request)
            if doc is not None:
                if request.method != "GET":
                    raise ApiError(405, "the server does not allow this method on the requested resource")
                return _json_response(doc)
            match = _PATH.match(path)
            if match is None:
                raise ApiError(404, "the server could not find the requested resource", details={})
            return await self._resource_request(request, match)
        except ApiError as err:
            return _error_response(err)

    def _authorized(self, request: web.BaseRequest) -> bool:
        header = request.headers.get("Authorization", "")
        return secrets.compare_digest(header.encode(), f"Bearer {self.sb.token}".encode())

    def _discovery(self, path: str, request: web.BaseRequest) -> dict[str, Any] | None:
        path = path.rstrip("/") or "/"
        if path == "/version":
            return discovery.VERSION
        if path == "/api":
            return discovery.api_versions(request.host)
        if path == "/api/v1":
            return discovery.CORE_V1
        if path == "/apis":
            return discovery.APIS
        if path == "/apis/batch":
            return discovery.BATCH
        if path == "/apis/batch/v1":
            return discovery.BATCH_V1
        if path == "/openapi/v3":
            return discovery.OPENAPI_V3_INDEX
        if path in discovery.OPENAPI_V3:
            return discovery.OPENAPI_V3[path]
        if path in ("/healthz", "/livez", "/readyz"):
            return {"status": "ok"}
        return None

    # ---- resource requests -----------------------------------------------------------------------
    async def _resource_request(self, request: web.BaseRequest, match: re.Match[str]) -> web.StreamResponse:
        resource = match["resource"]
        ns = match["ns"]
        name = match["name"]
        sub = match["sub"]
        is_batch = request.path.startswith("/apis/batch/")
        if (resource == "jobs") != is_batch:
            raise ApiError(404, "the server could not find the requested resource", details={})
        if resource != "namespaces" and name is not None and ns is None:
            raise ApiError(404, "the server could not find the requested resource", details={})
        if (sub == "log" and resource != "pods") or (sub == "status" and resource == "events"):
            raise ApiError(404, "the server could not find the requested resource", details={})
        query = request.query
        verb = _verb(request.method, name, sub, query)
        counted = f"{resource}/{sub}" if sub else resource
        self.counters[f"{verb} {counted}"] += 1
        self._maybe_inject_fault(verb)

        if sub == "log":
            assert ns is not None and name is not None
            logs: web.StreamResponse = await self.sb.kubelet_logs(request, ns, name)
            return logs
        if verb == "list":
            return self._list(
                resource, ns, query, as_table=tables.wants_table(request.headers.get("Accept", ""))
            )
        if verb == "watch":
            return await self._watch(request, resource, ns)
        if verb == "get":
            entry = self._get(resource, ns or "", name or "")
            if tables.wants_table(request.headers.get("Accept", "")):
                rv = entry.obj["metadata"]["resourceVersion"]
                return _json_response(tables.table(resource, [entry.obj], rv, None))
            return _json_response(entry.full)
        body = await self._body(request) if verb in ("create", "update", "patch") else None
        if verb == "create":
            entry = self.create(resource, ns, body)
            return _json_response(entry.full, 201)
        if verb == "update":
            return _json_response(self.update(resource, ns or "", name or "", body, subresource=sub).full)
        if verb == "patch":
            return _json_response(
                self.patch(resource, ns or "", name or "", body, request.content_type, subresource=sub).full
            )
        if verb == "delete":
            options: dict[str, Any] = {}
            raw = await request.read()
            if raw.strip():
                try:
                    options = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise bad_request(f"couldn't decode DeleteOptions: {exc}") from None
            grace = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
            policy = query.get("propagationPolicy", options.get("propagationPolicy"))
            if options.get("orphanDependents") is True and policy is None:
                policy = "Orphan"
            preconditions = options.get("preconditions") or {}
            result = self.delete(
                resource,
                ns or "",
                name or "",
                grace=int(grace) if grace is not None else None,
                propagation=policy,
                preconditions=preconditions,
            )
            return _json_response(result)
        if verb == "deletecollection":
            label_match = parse_label_selector(query.get("labelSelector"))
            field_match, _eq = parse_field_selector(query.get("fieldSelector"), resource)
            deleted: list[bytes] = []
            for entry in list(self.store.iter(resource, ns)):
                if label_match(entry.obj["metadata"].get("labels") or {}) and field_match(entry.obj):
                    meta = entry.obj["metadata"]
                    with contextlib.suppress(ApiError):
                        self.delete(resource, meta.get("namespace", ""), meta["name"])
                        deleted.append(entry.item)
            # Like the real server: the list of what was deleted, as it was.
            api_version, _kind = API_VERSIONS[resource]
            return _json_response(
                b'{"kind":"'
                + LIST_KINDS[resource].encode()
                + b'","apiVersion":"'
                + api_version.encode()
                + b'","metadata":{"resourceVersion":"'
                + str(self.store.rv).encode()
                + b'"},"items":['
                + b",".join(deleted)
                + b"]}"
            )
        raise ApiError(405, "the server does not allow this method on the requested resource")

    def _maybe_inject_fault(self, verb: str) -> None:
        if self.error_rate <= 0:
            return
        if self.error_verbs is not None and verb not in self.error_verbs:
            return
        if self._rng.random() >= self.error_rate:
            return
        code = self.error_status
        details: dict[str, Any] | None = None
        headers: dict[str, str] = {}
        if self.error_retry_after is not None:
            headers["Retry-After"] = str(max(1, round(self.error_retry_after)))
            details = {"retryAfterSeconds": max(1, round(self.error_retry_after))}
        raise ApiError(
            code,
            _FAULT_MESSAGES.get(code, f"injected error {code}"),
            reason=_STATUS_REASONS_FOR_FAULTS.get(code),
            details=details,
            headers=headers,
        )

    @staticmethod
    async def _body(request: web.BaseRequest) -> Any:
        raw = await request.read()
        ctype = request.content_type
        if "yaml" in ctype or "protobuf" in ctype or "cbor" in ctype:
            # The sandbox speaks JSON only. A 415 is what a real server answers to a media type it does
            # not accept; clients that offer protobuf or CBOR (kubectl's typed "create job") retry in JSON.
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types include: {JSON}",
            )
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise bad_request(f"the object provided is unrecognized or invalid JSON: {exc}") from None

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

    # ---- create / update / patch -----------------------------------------------------------------
    def create(self, resource: str, ns: str | None, body: Any) -> Entry:
        if not isinstance(body, dict):
            raise bad_request("the object provided is unrecognized or invalid JSON: expected an object")
        api_version, kind = API_VERSIONS[resource]
        if body.get("kind") not in (None, kind) or body.get("apiVersion") not in (None, api_version):
            raise bad_request(
                f"the object provided is a {body.get('apiVersion')}/{body.get('kind')}: "
                f"expected {api_version}/{kind} on this path"
            )
        obj = clone(body)
        obj.pop("kind", None)
        obj.pop("apiVersion", None)
        body_ns = (obj.get("metadata") or {}).get("namespace")
        if ns is not None and body_ns not in (None, "", ns):
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        if ns is not None and self.store.get("namespaces", "", ns) is None:
            raise not_found("namespaces", ns)
        init_metadata(resource, obj, ns)
        PREPARE[resource](obj)
        meta = obj["metadata"]
        if self.store.get(resource, meta.get("namespace", ""), meta["name"]) is not None:
            raise already_exists(resource, meta["name"])
        return self.store.commit(resource, "ADDED", obj)

    def update(
        self, resource: str, ns: str, name: str, body: Any, *, subresource: str | None = None
    ) -> Entry:
        if not isinstance(body, dict):
            raise bad_request("the object provided is unrecognized or invalid JSON: expected an object")
        entry = self._get(resource, ns, name)
        meta_in = body.get("metadata") or {}
        if meta_in.get("name") not in (None, name):
            raise bad_request(
                f"the name of the object ({meta_in.get('name')}) does not match the name on the URL ({name})"
            )
        rv = meta_in.get("resourceVersion")
        if rv not in (None, "") and rv != entry.obj["metadata"]["resourceVersion"]:
            raise conflict(resource, name)
        new = clone(body)
        new.pop("kind", None)
        new.pop("apiVersion", None)
        return self._replace(resource, entry, new, subresource=subresource)

    def patch(
        self,
        resource: str,
        ns: str,
        name: str,
        body: Any,
        content_type: str,
        *,
        subresource: str | None = None,
    ) -> Entry:
        entry = self._get(resource, ns, name)
        api_version, kind = API_VERSIONS[resource]
        current = clone(entry.obj)
        current["kind"] = kind
        current["apiVersion"] = api_version
        try:
            if content_type == "application/merge-patch+json":
                new = merge_patch(current, body)
            elif content_type == "application/strategic-merge-patch+json":
                new = strategic_merge_patch(current, body)
            elif content_type == "application/json-patch+json":
                new = json_patch(current, body)
            else:
                raise ApiError(
                    415,
                    "the body of the request was in an unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json, "
                    "application/strategic-merge-patch+json",
                    reason="UnsupportedMediaType",
                )
        except PatchError as exc:
            raise ApiError(422, str(exc), reason="Invalid") from None
        if not isinstance(new, dict):
            raise ApiError(422, "the patch did not produce an object", reason="Invalid")
        rv = (new.get("metadata") or {}).get("resourceVersion")
        if rv not in (None, "") and rv != entry.obj["metadata"]["resourceVersion"]:
            raise conflict(resource, name)
        new.pop("kind", None)
        new.pop("apiVersion", None)
        return self._replace(resource, entry, new, subresource=subresource)

    def _replace(self, resource: str, entry: Entry, new: dict[str, Any], *, subresource: str | None) -> Entry:
        """Apply a full new object over ``entry`` with the real server's rules: status only through
        the ``status`` subresource, spec/metadata never through it, immutable identity fields."""
        old = entry.obj
        if subresource == "status":
            merged = clone(old)
            merged["status"] = new.get("status", {})
        else:
            merged = new
            if "status" in old:  # events have no status
                merged["status"] = clone(old["status"])
            else:
                merged.pop("status", None)
            meta = merged.setdefault("metadata", {})
            if not isinstance(meta, dict):
                raise bad_request("metadata must be an object")
            old_meta = old["metadata"]
            for key in (
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generateName",
            ):
                if key in old_meta:
                    meta[key] = old_meta[key]
                else:
                    meta.pop(key, None)
            if not isinstance(merged.get("spec"), dict) and "spec" in old:
                merged["spec"] = clone(old["spec"])
            if merged.get("spec") != old.get("spec"):
                self._validate_spec_update(resource, old, merged)
                meta["generation"] = old_meta.get("generation", 1) + 1
            if meta.get("labels") == {}:
                meta.pop("labels")
        return self.commit_update(resource, merged, old)

    def _validate_spec_update(self, resource: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        name = old["metadata"]["name"]
        if resource == "pods":
            # Only a few pod spec fields are mutable (image, activeDeadlineSeconds, tolerations additions).
            o, n = clone(old["spec"]), clone(new["spec"])
            for spec in (o, n):
                spec.pop("activeDeadlineSeconds", None)
                spec.pop("tolerations", None)
                for c in spec.get("containers") or []:
                    if isinstance(c, dict):
                        c.pop("image", None)
            if o != n:
                raise invalid(
                    "pods",
                    name,
                    [
                        (
                            "FieldValueForbidden",
                            "spec",
                            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
                        )
                    ],
                )
        elif resource == "jobs":
            if new["spec"].get("template") != old["spec"].get("template") and not old["spec"].get("suspend"):
                raise invalid(
                    "jobs",
                    name,
                    [("FieldValueInvalid", "spec.template", "Invalid value: field is immutable")],
                )

    def commit_deleted(self, resource: str, obj: dict[str, Any], old: dict[str, Any]) -> Entry:
        """Remove an object (one DELETED revision) and let the garbage collector react."""
        entry = self.store.commit(resource, "DELETED", obj, old)
        self.sb.gc.owner_removed(resource, obj)
        return entry

    def commit_update(self, resource: str, new: dict[str, Any], old: dict[str, Any]) -> Entry:
        """Store an updated object; an object being deleted whose last finalizer went away is removed."""
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            if (
                resource != "pods"
                or meta.get("deletionGracePeriodSeconds", 0) == 0
                or not new.get("spec", {}).get("nodeName")
            ):
                return self.commit_deleted(resource, new, old)
        return self.store.commit(resource, "MODIFIED", new, old)

    # ---- delete ----------------------------------------------------------------------------------
    def delete(
        self,
        resource: str,
        ns: str,
        name: str,
        *,
        grace: int | None = None,
        propagation: str | None = None,
        preconditions: dict[str, Any] | None = None,
    ) -> Any:
        """DELETE with the real server's semantics; returns the answer body (bytes or a dict).

        * Pods bound to a node and not yet terminal are deleted gracefully: ``deletionTimestamp`` is set
          and the kubelet stops the containers, then deletes the pod with grace 0. Unbound or finished
          pods, and ``gracePeriodSeconds=0``, go at once.
        * ``propagationPolicy``: ``Foreground`` keeps the owner (with the ``foregroundDeletion``
          finalizer) until its dependents are gone; ``Background`` removes the owner now and its
          dependents afterwards; ``Orphan`` removes only the owner-references. Jobs default to
          ``Orphan`` when no policy is given (batch/v1's historical default, which is why
          kubectl always sends ``Background``).
        * Finalizers keep an object (with ``deletionTimestamp``) until they are all removed.
        """
        entry = self._get(resource, ns, name)
        old = entry.obj
        if preconditions:
            if preconditions.get("uid") not in (None, old["metadata"]["uid"]):
                raise conflict(resource, name)
            if preconditions.get("resourceVersion") not in (None, old["metadata"]["resourceVersion"]):
                raise conflict(resource, name)
        if propagation not in (None, "Foreground", "Background", "Orphan"):
            raise bad_request(
                f'unsupported propagationPolicy "{propagation}": expected Foreground, Background or Orphan'
            )
        obj = clone(old)
        meta = obj["metadata"]
        if propagation is None:
            propagation = "Orphan" if resource == "jobs" else "Background"
        if resource == "pods":
            default_grace = obj.get("spec", {}).get("terminationGracePeriodSeconds", 30)
            effective = default_grace if grace is None else grace
            if not obj.get("spec", {}).get("nodeName") or obj.get("status", {}).get("phase") in (
                "Succeeded",
                "Failed",
            ):
                effective = 0
        else:
            effective = 0
        finalizers = list(meta.get("finalizers") or [])
        if (
            propagation == "Foreground"
            and "foregroundDeletion" not in finalizers
            and self.sb.gc.has_dependents(obj)
        ):
            finalizers.append("foregroundDeletion")
        if propagation == "Orphan":
            self.sb.gc.orphan_dependents(obj)

        if meta.get("deletionTimestamp"):
            # Already being deleted: a shorter grace period (e.g. a force delete) takes effect.
            current = meta.get("deletionGracePeriodSeconds", 0)
            if resource == "pods" and effective < current:
                meta["deletionGracePeriodSeconds"] = effective
                meta["deletionTimestamp"] = now_rfc3339(time.time() + effective)
                if effective == 0 and not finalizers:
                    return self.commit_deleted(resource, obj, old).full
                return self.store.commit(resource, "MODIFIED", obj, old).full
            return entry.full

        if effective > 0 or finalizers:
            meta["deletionTimestamp"] = now_rfc3339(time.time() + effective)
            meta["deletionGracePeriodSeconds"] = effective
            if finalizers:
                meta["finalizers"] = finalizers
            meta["generation"] = meta.get("generation", 1) + 1
            updated = self.store.commit(resource, "MODIFIED", obj, old)
            if "foregroundDeletion" in finalizers:
                self.sb.gc.delete_dependents(obj, foreground=True)
            return updated.full
        deleted = self.commit_deleted(resource, obj, old)
        if resource == "pods":
            return deleted.full
        group = "batch" if resource == "jobs" else ""
        details: dict[str, Any] = {"name": name}
        if group:
            details["group"] = group
        details["kind"] = resource
        details["uid"] = meta["uid"]
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def remove_now(self, resource: str, ns: str, name: str) -> bool:
        """Remove an object at once, ignoring grace and finalizers (node loss / force deletion)."""
        entry = self.store.get(resource, ns, name)
        if entry is None:
            return False
        obj = clone(entry.obj)
        self.commit_deleted(resource, obj, entry.obj)
        return True


class GarbageCollector:
    """Owner-reference garbage collection (kube-controller-manager's garbage collector), in-process."""

    def __init__(self, sandbox: Any) -> None:
        self.sb = sandbox

    def _dependents(self, owner: dict[str, Any]) -> list[Entry]:
        uid = owner["metadata"]["uid"]
        ns = owner["metadata"].get("namespace")
        out = []
        for entry in self.sb.store.iter("pods", ns):
            for ref in entry.obj["metadata"].get("ownerReferences") or []:
                if ref.get("uid") == uid:
                    out.append(entry)
                    break
        return out

    def has_dependents(self, owner: dict[str, Any]) -> bool:
        return bool(self._dependents(owner))

    def orphan_dependents(self, owner: dict[str, Any]) -> None:
        uid = owner["metadata"]["uid"]
        for entry in self._dependents(owner):
            new = clone(entry.obj)
            refs = [r for r in new["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                new["metadata"].pop("ownerReferences", None)
            self.sb.api.commit_update("pods", new, entry.obj)

    def delete_dependents(self, owner: dict[str, Any], *, foreground: bool) -> None:
        for entry in self._dependents(owner):
            meta = entry.obj["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            with contextlib.suppress(ApiError):
                self.sb.api.delete("pods", meta.get("namespace", ""), meta["name"], propagation="Background")

    def owner_removed(self, resource: str, obj: dict[str, Any]) -> None:
        """React to an object leaving the store: delete a removed owner's dependents (Background), and
        finish a Foreground deletion once its last dependent is gone."""
        loop = asyncio.get_running_loop()
        if resource == "jobs":
            loop.call_soon(functools.partial(self.delete_dependents, obj, foreground=False))
        elif resource == "pods":
            for ref in obj["metadata"].get("ownerReferences") or []:
                loop.call_soon(self._maybe_finish_foreground, obj["metadata"].get("namespace", ""), ref)
        elif resource == "namespaces":
            name = obj["metadata"]["name"]
            for kind in ("jobs", "pods", "events"):
                for entry in list(self.sb.store.iter(kind, name)):
                    loop.call_soon(self.sb.api.remove_now, kind, name, entry.obj["metadata"]["name"])

    def _maybe_finish_foreground(self, ns: str, ref: dict[str, Any]) -> None:
        if ref.get("kind") != "Job":
            return
        entry = self.sb.store.get("jobs", ns, ref.get("name", ""))
        if entry is None or entry.obj["metadata"].get("uid") != ref.get("uid"):
            return
        meta = entry.obj["metadata"]
        if "foregroundDeletion" not in (meta.get("finalizers") or []) or self.has_dependents(entry.obj):
            return
        new = clone(entry.obj)
        new["metadata"]["finalizers"] = [f for f in meta["finalizers"] if f != "foregroundDeletion"]
        if not new["metadata"]["finalizers"]:
            new["metadata"].pop("finalizers")
        self.sb.api.commit_update("jobs", new, entry.obj)


def kubeconfig_text(url: str, token: str, *, name: str = "sandbox", ca_pem: bytes | None = None) -> str:
    """A kubeconfig for the sandbox (YAML is a superset of JSON, so JSON keeps this stdlib-only)."""
    cluster: dict[str, Any] = {"server": url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
        "current-context": name,
        "preferences": {},
    }
    return json.dumps(config, indent=2) + "\n"


def write_kubeconfig_file(
    path: str | os.PathLike[str], url: str, token: str, *, ca_pem: bytes | None = None
) -> str:
    """Write the kubeconfig with mode 0600 from the start (it holds a bearer token)."""
    path_str = os.fspath(path)
    fd = os.open(path_str, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(kubeconfig_text(url, token, ca_pem=ca_pem))
    os.chmod(path_str, 0o600)
    return path_str


__all__ = ["ApiServer", "GarbageCollector", "kubeconfig_text", "write_kubeconfig_file"]
