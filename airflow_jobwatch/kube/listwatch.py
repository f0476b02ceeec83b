"""The engine's one HTTP request: a GET of a collection (a LIST page or a watch) or of one object.

kubernetes_asyncio is used only for what it is good at (kubeconfig, auth and token refresh, TLS, the HTTP
session) through :meth:`ApiClient.call_api` with ``_preload_content=False``; the response is read by the
caller (:mod:`airflow_jobwatch.kube.relist`, :mod:`airflow_jobwatch.kube.watch`), and an error status becomes
the server's own error here.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from airflow_jobwatch.kube.apierrors import KubeApiError, _Expired
from airflow_jobwatch.kube.backoff import parse_retry_after


async def get(
    api_client: Any, path: str, params: dict[str, str], *, connect_timeout: float, read_timeout: float
) -> aiohttp.ClientResponse:
    """GET ``path`` with ``params``; the raw response on 2xx, :class:`KubeApiError` (or :class:`_Expired`
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
        raise _Expired(error.message or "Gone") from error
    raise error
