"""DirectApiClient: the executor's watcher child's API client, aiohttp only, credentials from a
helper process. The same credential changes as test_credentials.py: the informer on this client keeps
delivering events across a rotated exec-plugin token, an exec token's expiry and an in-cluster token
rotation, over TLS with an inline CA and a client certificate, and a configuration error names the
kubeconfig without its token."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import kubernetes_asyncio.client
import pytest
import yaml
from support.incluster import enter_pod, rotate_cluster_token, rotate_token
from test_credentials import FAST, _pod, _wait, exec_kubeconfig

from airflow_jobwatch.kube.cluster.client import (
    MIN_RELOAD_INTERVAL_SECONDS,
    ClusterConfig,
    ClusterConfigError,
    async_api_client,
)
from airflow_jobwatch.kube.cluster.direct import DirectApiClient
from airflow_jobwatch.kube.engine.informer import EventType, Informer
from airflow_jobwatch_testing.sandbox.tls import self_signed_cert

pytestmark = pytest.mark.timeout(120)


async def _watched(sandbox: Any, client: Any, admin_kubeconfig: Path, change: Any = None) -> Informer:
    """Start an informer on ``client``; create a pod (with an admin client) before and after ``change()``
    (followed by dropped watches, as at the next watch timeout) and wait for both to be delivered."""
    informer = Informer(client, kind="pods", namespace="default", config=FAST)
    seen: list[str] = []
    informer.subscribe(lambda e: seen.append(e.name) if e.type is EventType.ADDED else None)
    sandbox.write_kubeconfig(admin_kubeconfig)
    admin = await async_api_client(ClusterConfig(config_file=str(admin_kubeconfig)))
    await informer.start()
    try:
        core = kubernetes_asyncio.client.CoreV1Api(admin)
        assert await informer.wait_synced(30)
        await core.create_namespaced_pod("default", _pod("before"))
        await _wait(lambda: "before" in seen, "the pod created before the change")
        if change is not None:
            change()
            assert sandbox.drop_watches() >= 1
        await core.create_namespaced_pod("default", _pod("after"))
        await _wait(lambda: "after" in seen, "the pod created after the change")
        assert informer.health.access_denied is None and informer.health.healthy
        return informer
    finally:
        await informer.stop()
        await admin.close()


async def test_token_kubeconfig(sandbox: Any, tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    sandbox.write_kubeconfig(path)
    client = await DirectApiClient.create(ClusterConfig(config_file=str(path)))
    try:
        await _watched(sandbox, client, tmp_path / "admin")
        assert client.reloads == 0
    finally:
        await client.close()


async def test_exec_plugin_token_replaced_under_a_watch(sandbox: Any, tmp_path: Path) -> None:
    kubeconfig, source, calls = exec_kubeconfig(sandbox, tmp_path)
    client = await DirectApiClient.create(ClusterConfig(config_file=str(kubeconfig)))
    try:

        def rotate() -> None:
            source.write_text(rotate_cluster_token(sandbox, source.read_text(), "exec-user"))

        await _watched(sandbox, client, tmp_path / "admin", rotate)
        assert client.reloads >= 1  # the 401 ran the helper (and so the plugin) again
        assert int(calls.read_text()) <= 3
    finally:
        await client.close()


@pytest.mark.exec_credential(user="eks-user", token_ttl=4.0)
async def test_exec_token_fetched_again_before_it_expires(sandbox: Any, exec_kubeconfig: Path) -> None:
    """Tokens valid 4 s (EKS: 15 min): the client fetches a new one shortly before each expires, so the
    watch, reconnecting every second at its timeout, meets no 401 and counts no failure."""
    client = await DirectApiClient.create(ClusterConfig(config_file=str(exec_kubeconfig)))
    config = dataclasses.replace(FAST, watch_timeout_seconds=1)
    informer = Informer(client, kind="pods", namespace="default", config=config)
    try:
        await informer.start()
        assert await informer.wait_synced(30)
        deadline = time.monotonic() + 60
        while client.reloads < 2:
            assert time.monotonic() < deadline, f"{client.reloads} fetches in 60 s"
            await asyncio.sleep(0.2)
        await _wait(lambda: informer.health.watches >= 8, "the watch to reconnect at its timeouts")
        assert informer.health.consecutive_failures == 0 and informer.health.access_denied is None
        assert sandbox.tokens_seen("eks-user") >= 3
        assert sandbox.counters().get("unauthorized", 0) == 0  # fetched before expiry, not after a 401
    finally:
        await informer.stop()
        await client.close()


async def test_in_cluster_token_rotated_under_a_watch(
    tls_sandbox: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = enter_pod(tls_sandbox, tmp_path / "sa", monkeypatch)
    client = await DirectApiClient.create(ClusterConfig(in_cluster=True))
    try:

        def rotate() -> None:
            rotate_token(token_file, rotate_cluster_token(tls_sandbox, token_file.read_text()))

        informer = await _watched(tls_sandbox, client, tmp_path / "admin", rotate)
        # The token file was re-read when it changed: no 401, no helper run, no failure counted.
        assert informer.health.consecutive_failures == 0
        assert client.reloads == 0
    finally:
        await client.close()


async def test_tls_with_inline_ca_and_client_certificate(tls_sandbox: Any, tmp_path: Path) -> None:
    """The CA and the client certificate inline in the kubeconfig (``*-data``): the helper resolves them
    (kubernetes_asyncio writes them to temporary files it removes) and the client loads them."""
    import base64

    path = tmp_path / "kubeconfig"
    tls_sandbox.write_kubeconfig(path)
    config = yaml.safe_load(path.read_text())
    assert "certificate-authority-data" in config["clusters"][0]["cluster"]
    cert, key = (pem.decode() for pem in self_signed_cert())  # a throw-away client certificate and key
    config["users"][0]["user"]["client-certificate-data"] = base64.b64encode(cert.encode()).decode()
    config["users"][0]["user"]["client-key-data"] = base64.b64encode(key.encode()).decode()
    path.write_text(yaml.safe_dump(config))
    client = await DirectApiClient.create(ClusterConfig(config_file=str(path)))
    try:
        assert client._tls is not None and client._tls.cert == cert  # the certificate reached the TLS context
        await _watched(tls_sandbox, client, tmp_path / "admin")
    finally:
        await client.close()


async def test_a_configuration_error_names_the_kubeconfig_and_not_its_token(
    sandbox: Any, tmp_path: Path
) -> None:
    path = tmp_path / "kubeconfig"
    sandbox.write_kubeconfig(path, token="s3cr3t-token-value-0123456789")
    with pytest.raises(ClusterConfigError) as err:
        await DirectApiClient.create(ClusterConfig(config_file=str(path), cluster_context="no-such-context"))
    message = str(err.value)
    assert str(path) in message and "no-such-context" in message
    assert "s3cr3t-token-value" not in message


async def test_only_raw_responses(sandbox: Any, tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    sandbox.write_kubeconfig(path)
    client = await DirectApiClient.create(ClusterConfig(config_file=str(path)))
    try:
        with pytest.raises(ValueError, match="_preload_content=False"):
            await client.call_api("/api/v1/namespaces/default/pods", "GET")
        resp = await client.call_api(
            "/api/v1/namespaces/default/pods/absent",
            "GET",
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
        try:
            assert resp.status == 404 and (await resp.json())["reason"] == "NotFound"
        finally:
            resp.release()
    finally:
        await client.close()


async def test_new_tls_material_that_is_not_valid_changes_nothing(sandbox: Any, tmp_path: Path) -> None:
    """A credential fetch whose client certificate cannot be loaded is refused whole: the client goes on
    with what it had, and the error shows no PEM text."""
    path = tmp_path / "kubeconfig"
    sandbox.write_kubeconfig(path)
    client = await DirectApiClient.create(ClusterConfig(config_file=str(path)))
    try:
        before = (client._session, dict(client._auth.api_key))
        broken = {
            **client._bundle,
            "cert": "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n",
            "authorization": "Bearer x",
        }
        with pytest.raises(ClusterConfigError, match="TLS material is not valid") as err:
            client._apply(broken)
        assert "bm90IGEgY2VydA" not in str(err.value)
        assert (client._session, dict(client._auth.api_key)) == before
        resp = await client.call_api(
            "/api/v1/namespaces/default/pods", "GET", auth_settings=["BearerToken"], _preload_content=False
        )
        try:
            assert resp.status == 200
        finally:
            resp.release()
    finally:
        await client.close()


async def _get_pods(client: DirectApiClient) -> int:
    resp = await client.call_api(
        "/api/v1/namespaces/default/pods", "GET", auth_settings=["BearerToken"], _preload_content=False
    )
    try:
        return resp.status
    finally:
        resp.release()


def _may_fetch(client: DirectApiClient) -> bool:
    return time.monotonic() - client._last_fetch >= MIN_RELOAD_INTERVAL_SECONDS


async def _until(condition: Any, what: str, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("others_waiting", [False, True], ids=["alone", "with-another-waiter"])
async def test_a_cancelled_reload_leaves_the_client_able_to_fetch_again(
    sandbox: Any, tmp_path: Path, others_waiting: bool
) -> None:
    """The caller that started a credential fetch is cancelled: the fetch goes on for whoever else waits,
    and once it ends the next 401 runs the helper again and the request succeeds."""
    kubeconfig, source, calls = exec_kubeconfig(sandbox, tmp_path)
    client = await DirectApiClient.create(ClusterConfig(config_file=str(kubeconfig)))
    try:
        await _until(lambda: _may_fetch(client), "the one-fetch-a-second limit to pass")
        first = asyncio.ensure_future(client.reload_credentials())
        other = asyncio.ensure_future(client.reload_credentials()) if others_waiting else None
        await asyncio.sleep(0)  # both are waiting on the one fetch
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        if other is not None:
            assert await other is True
        await _until(lambda: client.reloads == 1, "the shared fetch to end")
        await _until(lambda: _may_fetch(client), "the one-fetch-a-second limit to pass")
        # The token is revoked: the next request meets a 401, fetches again and is sent once more.
        source.write_text(rotate_cluster_token(sandbox, source.read_text(), "exec-user"))
        assert await _get_pods(client) == 200
        assert client.reloads == 2
        assert int(calls.read_text()) == 3
    finally:
        await client.close()
