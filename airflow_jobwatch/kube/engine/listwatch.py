"""The source the watch engine lists and watches: one collection on one API server (client-go's
``ListerWatcher``), and the engine's one HTTP request, a GET of a collection (a LIST page or a watch) or of one
object.

kubernetes_asyncio is used only for what it is good at (kubeconfig, auth and token refresh, TLS, the HTTP
session) through :meth:`ApiClient.call_api` with ``_preload_content=False``; the response is read by the
caller (:mod:`airflow_jobwatch.kube.engine.relist`, :mod:`airflow_jobwatch.kube.engine.watch`), and an error status becomes
the server's own error here.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from airflow_jobwatch.kube.cluster.errors import describe_access_denied
from airflow_jobwatch.kube.engine.apierrors import Expired, KubeApiError
from airflow_jobwatch.kube.engine.backoff import parse_retry_after
from airflow_jobwatch.kube.engine.informer_types import RESOURCES, Kind
from airflow_jobwatch.kube.engine.label_selector import selector_matcher


class ListWatch:
    """One collection to list and watch: a kind, a namespace (or all), label and field selectors, on the API
    server an ``ApiClient`` reaches. What the engine's LIST, watch and confirming GET requests are sent to.

    :param api_client: a ``kubernetes_asyncio.client.ApiClient``; never closed here.
    :param connect_timeout: seconds to connect (``InformerConfig.connect_timeout_seconds``).
    """

    __slots__ = (
        "_api",
        "_connect_timeout",
        "_group",
        "_plural",
        "_prefix",
        "_verb",
        "field_selector",
        "kind",
        "label_match",
        "label_selector",
        "namespace",
        "path",
    )

    def __init__(
        self,
        api_client: Any,
        *,
        kind: Kind,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        connect_timeout: float,
    ) -> None:
        self._api = api_client
        self._connect_timeout = connect_timeout
        self.kind = kind
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        #: Whether labels match the label selector (None: no selector); a confirming GET reads an object that
        #: the selector may no longer match, which a watch would have reported deleted.
        self.label_match = selector_matcher(label_selector)
        self._prefix, self._plural, _, api_version = RESOURCES[kind]
        self._group = api_version.rpartition("/")[0]
        self.path = (
            f"{self._prefix}/namespaces/{namespace}/{self._plural}"
            if namespace
            else f"{self._prefix}/{self._plural}"
        )
        self._verb = "list"  # of the last request, for the advice on a 401/403

    def selector_params(self) -> dict[str, str]:
        """The query parameters every request of this collection carries (a new dict)."""
        params: dict[str, str] = {}
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        return params

    def object_path(self, namespace: str | None, name: str) -> str:
        """The path of one object of this collection (for a GET by name)."""
        namespace = namespace or self.namespace
        if namespace:
            return f"{self._prefix}/namespaces/{namespace}/{self._plural}/{name}"
        return f"{self._prefix}/{self._plural}/{name}"

    async def request(
        self, params: dict[str, str], *, read_timeout: float, path: str | None = None
    ) -> aiohttp.ClientResponse:
        """GET the collection (or ``path``) with ``params`` (see :func:`get`)."""
        self._verb = "watch" if params.get("watch") == "true" else "list"
        return await get(
            self._api,
            path or self.path,
            params,
            connect_timeout=self._connect_timeout,
            read_timeout=read_timeout,
        )

    def access_denied(self, exc: KubeApiError) -> str | None:
        """A 401 (after the client's one credential reload) or 403 RBAC refusal of the last request,
        explained with the verb, resource and namespace it needs; None for any other error."""
        if exc.status not in (401, 403) or "exceeded quota" in exc.message:
            return None
        return describe_access_denied(
            exc.status,
            exc.message,
            verb=self._verb,
            resource=self._plural,
            group=self._group,
            namespace=self.namespace,
        ).message()


async def get(
    api_client: Any, path: str, params: dict[str, str], *, connect_timeout: float, read_timeout: float
) -> aiohttp.ClientResponse:
    """GET ``path`` with ``params``; the raw response on 2xx, :class:`KubeApiError` (or :class:`Expired`
    for 410) otherwise."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=read_timeout)
    resp: aiohttp.ClientResponse = await api_client.call_api(
        path,
        "GET",
        query_params=list(params.items()),
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=timeout,
    )
    if 200 <= resp.status < 300:
        return resp
    try:
        body = await resp.read()
    finally:
        resp.release()
    retry_after = parse_retry_after(resp.headers.get("Retry-After"))
    error: KubeApiError
    try:
        status = json.loads(body)
        if not isinstance(status, dict):
            raise ValueError("not a Status object")
        error = KubeApiError.from_status(status, http_status=resp.status)
        error.status = resp.status
    except ValueError:
        text = body[:200].decode("utf-8", "replace").strip()
        error = KubeApiError(resp.status, resp.reason or "Error", text)
    if retry_after is not None or error.retry_after is None:
        error.retry_after = retry_after  # the header wins over the Status' details.retryAfterSeconds
    if resp.status == 410:
        raise Expired(error.message or "Gone") from error
    raise error
