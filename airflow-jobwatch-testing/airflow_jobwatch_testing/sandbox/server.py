"""The sandbox API server: an aiohttp app speaking the Kubernetes REST API for namespaces, pods, jobs.

The HTTP layer translates requests into :class:`~.store.Store` operations and answers with the
same bytes, headers and Status errors a real kube-apiserver sends; the semantics a client's
correctness depends on (resourceVersion, watch replay and 410, bookmarks, selectors, paging,
optimistic concurrency, graceful deletion, finalizers, garbage collection) are implemented, the
rest of the API (admission, other kinds) is not.

This module routes (authentication, discovery, path matching, verbs, injected faults) and
dispatches to one module per concern:

* :mod:`.reads`: GET and LIST;
* :mod:`.watch`: WATCH streams;
* :mod:`.writes`: CREATE, UPDATE, PATCH, DELETE, DELETECOLLECTION;
* :mod:`.gc`: owner-reference garbage collection;
* :mod:`.kubeconfig`: kubeconfig files pointing at the sandbox;
* :mod:`.responses`: JSON and Status answers.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections import Counter
from typing import Any

from aiohttp import web

from . import discovery, tables
from .auth import Identity
from .decoding import unknown_field_warnings
from .errors import ApiError, bad_request, status_object
from .gc import GarbageCollector
from .kubeconfig import kubeconfig_text, write_kubeconfig_file
from .rbac import Request as AuthzRequest
from .reads import ReadsMixin
from .responses import JSON, _bool_param, _error_response, _json_response
from .store import Store
from .validation import warning_header
from .watch import DEFAULT_WATCH_TIMEOUT_RANGE, WatchMixin
from .writes import WritesMixin

log = logging.getLogger(__name__)

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
    r"(?:/(?P<sub>status|log|eviction))?/?$"
)


def _verb(method: str, name: str | None, sub: str | None, query: Any) -> str:
    """The Kubernetes verb of a request (what RBAC and the request counters call it)."""
    if method == "GET":
        if name is None:
            return "watch" if _bool_param(query.get("watch")) else "list"
        return "get"
    if name is None:
        verb = {"POST": "create", "DELETE": "deletecollection"}.get(method)
    elif sub == "eviction":
        verb = "create" if method == "POST" else None  # pods/eviction is create-only
    elif sub == "log":
        verb = None  # logs are read-only
    else:
        verb = {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
        if verb == "delete" and sub is not None:
            verb = None
    if verb is None:
        raise ApiError(405, "the server does not allow this method on the requested resource")
    return verb


def _authz_request(
    verb: str, resource: str, sub: str | None, ns: str | None, name: str | None, query: Any
) -> AuthzRequest:
    """The RBAC attributes of a request, as ``requestinfo.go`` derives them: a namespace object's
    namespace is its name, and a list/watch selecting ``metadata.name=X`` is about the object X."""
    namespace = ns or ""
    if resource == "namespaces" and name:
        namespace = name
    if name is None and verb in ("list", "watch"):
        for part in (query.get("fieldSelector") or "").split(","):
            key, sep, value = part.partition("=")
            if sep and key.strip() == "metadata.name" and not key.endswith("!"):
                name = value.lstrip("=").strip()
    return AuthzRequest(verb, resource, sub or "", namespace, name or "")


class ApiServer(ReadsMixin, WatchMixin, WritesMixin):
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
        # The watch cache (see ReadsMixin.cache_rv): off unless asked for; lagging or frozen on demand.
        self.watch_cache = False
        self.cache_lag = 0
        self.cache_frozen_at: int | None = None
        self._rng = random.Random()

    # ---- entry point -----------------------------------------------------------------------------
    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        identity = self.sb.auth.authenticate(request.headers.get("Authorization", ""))
        if identity is None:
            self.counters["unauthorized"] += 1  # how many requests met a 401 (tests of credential refresh)
            # The real server's body for a missing, unknown or expired token (no details).
            return _json_response(status_object(401, "Unauthorized"), 401)
        path = request.path
        if path.startswith("/_sandbox/"):
            if not identity.is_admin:
                return _json_response(
                    status_object(403, f'forbidden: User "{identity.user}" cannot use the sandbox admin API'),
                    403,
                )
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
            return await self._resource_request(request, match, identity)
        except ApiError as err:
            return _error_response(err)

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
    async def _resource_request(
        self, request: web.BaseRequest, match: re.Match[str], identity: Identity
    ) -> web.StreamResponse:
        resource = match["resource"]
        ns = match["ns"]
        name = match["name"]
        sub = match["sub"]
        is_batch = request.path.startswith("/apis/batch/")
        if (resource == "jobs") != is_batch:
            raise ApiError(404, "the server could not find the requested resource", details={})
        if resource != "namespaces" and name is not None and ns is None:
            raise ApiError(404, "the server could not find the requested resource", details={})
        if (sub in ("log", "eviction") and resource != "pods") or (sub == "status" and resource == "events"):
            raise ApiError(404, "the server could not find the requested resource", details={})
        query = request.query
        verb = _verb(request.method, name, sub, query)
        counted = f"{resource}/{sub}" if sub else resource
        self.counters[f"{verb} {counted}"] += 1
        self.sb.rbac.authorize(identity, _authz_request(verb, resource, sub, ns, name, query))
        self._maybe_inject_fault(verb)

        if sub == "log":
            assert ns is not None and name is not None
            logs: web.StreamResponse = await self.sb.kubelet_logs(request, ns, name)
            return logs
        if sub == "eviction":
            assert ns is not None and name is not None
            from .disruption import evict_through_api

            raw = await request.read()
            eviction = await self._body(request) if raw.strip() else None
            return _json_response(evict_through_api(self.sb, ns, name, eviction), 201)
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
            validation = query.get("fieldValidation", "Warn")
            entry = self.create(resource, ns, body, field_validation=validation)
            dropped = unknown_field_warnings(resource, body) if validation == "Warn" else []
            return _json_response(
                entry.full, 201, headers=warning_header(resource, entry.obj, dropped) or None
            )
        if verb == "update":
            return _json_response(self.update(resource, ns or "", name or "", body, subresource=sub).full)
        if verb == "patch":
            return _json_response(
                self.patch(resource, ns or "", name or "", body, request.content_type, subresource=sub).full
            )
        if verb == "delete":
            return await self._delete_request(request, resource, ns, name)
        if verb == "deletecollection":
            return self._delete_collection(resource, ns, query)
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


__all__ = [
    "DEFAULT_WATCH_TIMEOUT_RANGE",
    "ApiServer",
    "GarbageCollector",
    "kubeconfig_text",
    "write_kubeconfig_file",
]
