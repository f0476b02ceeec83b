"""In-cluster mode, expiring and rotating tokens, and exec-plugin credentials, through both real clients."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes_asyncio
import pytest

from airflow_jobwatch_testing.sandbox import SandboxProcess, SandboxThread
from airflow_jobwatch_testing.sandbox.incluster import InCluster

from .helpers import pod_body, wait_for

pytestmark = pytest.mark.sandbox(kubelet=False, job_controller=False)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "real-apiserver"


def _recorded(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / name).read_text())["body"])


def _sync_core_in_cluster() -> tuple[kubernetes.client.ApiClient, kubernetes.client.CoreV1Api]:
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_incluster_config(client_configuration=configuration)
    api_client = kubernetes.client.ApiClient(configuration)
    return api_client, kubernetes.client.CoreV1Api(api_client)


# ---- in-cluster ----------------------------------------------------------------------------------
def test_in_cluster_volume_looks_like_a_pods(in_cluster: InCluster, sandbox: SandboxThread) -> None:
    assert in_cluster.user == "system:serviceaccount:default:default"
    assert in_cluster.namespace_path.read_text() == "default"
    assert in_cluster.ca_path.read_bytes() == sandbox.ca_pem
    assert in_cluster.token.count(".") == 2  # JWT-shaped, like a real service-account token
    # The kubelet's atomic-writer layout: visible names are symlinks through ..data.
    assert os.readlink(in_cluster.token_path) == "..data/token"
    assert (in_cluster.dir / "..data").is_symlink()
    assert stat.S_IMODE((in_cluster.dir / "..data" / "token").stat().st_mode) == 0o600
    assert in_cluster.env == {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(sandbox.port),
    }
    assert os.environ["KUBERNETES_SERVICE_PORT"] == str(sandbox.port)


def test_sync_client_load_incluster_config_lists_pods(in_cluster: InCluster, sandbox: SandboxThread) -> None:
    api_client, core = _sync_core_in_cluster()
    try:
        assert api_client.configuration.host == f"https://127.0.0.1:{sandbox.port}"
        core.create_namespaced_pod("default", pod_body("ic1"))
        assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["ic1"]
    finally:
        api_client.close()
    assert sandbox.tokens_seen(in_cluster.user) == 1


async def test_async_client_load_incluster_config_lists_pods(
    in_cluster: InCluster, sandbox: SandboxThread
) -> None:
    configuration = kubernetes_asyncio.client.Configuration()
    kubernetes_asyncio.config.load_incluster_config(client_configuration=configuration)
    async with kubernetes_asyncio.client.ApiClient(configuration) as api_client:
        core = kubernetes_asyncio.client.CoreV1Api(api_client)
        await core.create_namespaced_pod("default", pod_body("ic2"))
        listed = await core.list_namespaced_pod("default")
    assert [p.metadata.name for p in listed.items] == ["ic2"]
    assert sandbox.tokens_seen(in_cluster.user) == 1


def test_cncf_hook_in_cluster_lists_pods(in_cluster: InCluster, sandbox: SandboxThread) -> None:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    hook = KubernetesHook(conn_id=None, in_cluster=True)
    hook.core_v1_client.create_namespaced_pod("default", pod_body("ic3"))
    assert [p.metadata.name for p in hook.core_v1_client.list_namespaced_pod("default").items] == ["ic3"]
    assert sandbox.tokens_seen(in_cluster.user) >= 1


@pytest.mark.in_cluster(service_account="airflow:airflow-worker")
def test_in_cluster_service_account_and_namespace(in_cluster: InCluster, sandbox: SandboxThread) -> None:
    assert in_cluster.user == "system:serviceaccount:airflow:airflow-worker"
    assert in_cluster.namespace_path.read_text() == "airflow"
    assert sandbox.get_object("namespaces", None, "airflow") is not None  # created for it


# ---- expiry and rotation -------------------------------------------------------------------------
def _status_of(exc: kubernetes.client.ApiException) -> dict[str, Any]:
    return dict(json.loads(exc.body))


@pytest.mark.in_cluster(token_ttl=1.5, rotate=False)
def test_expired_in_cluster_token_gets_the_real_401(in_cluster: InCluster, sandbox: SandboxThread) -> None:
    api_client, core = _sync_core_in_cluster()
    try:
        core.list_namespaced_pod("default")  # valid for now

        def refused() -> kubernetes.client.ApiException | None:
            try:
                core.list_namespaced_pod("default")
            except kubernetes.client.ApiException as exc:
                return exc
            return None

        exc = wait_for(refused, timeout=30, interval=0.2, what="the token to expire")
    finally:
        api_client.close()
    assert exc.status == 401
    assert _status_of(exc) == _recorded("status-401-unauthorized.json")


@pytest.mark.in_cluster(token_ttl=1.0, rotate=True)
def test_in_cluster_token_is_rotated_before_it_expires(in_cluster: InCluster) -> None:
    first = in_cluster.token
    # The kubelet's schedule: a new token at 80% of the lifetime, written atomically.
    second = wait_for(lambda: in_cluster.token != first and in_cluster.token, timeout=30, what="a rotation")
    assert second.count(".") == 2
    # A reader that re-reads the file (the clients' in-cluster loaders do) keeps working.
    api_client, core = _sync_core_in_cluster()
    try:
        core.list_namespaced_pod("default")
    finally:
        api_client.close()


def test_rotate_on_demand_and_expire_old(in_cluster: InCluster, sandbox: SandboxThread) -> None:
    old = in_cluster.token
    new = in_cluster.rotate(expire_old=True)
    assert new != old and in_cluster.token == new
    url = f"{sandbox.url}/api/v1/namespaces/default/pods"
    assert _get_status(url, old, sandbox.ca_pem) == 401
    assert _get_status(url, new, sandbox.ca_pem) == 200


def _get_status(url: str, token: str, ca_pem: bytes | None) -> int:
    import ssl
    import urllib.error
    import urllib.request

    context = ssl.create_default_context(cadata=ca_pem.decode()) if ca_pem else None
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_issued_token_expires_and_expire_token_refuses_at_once(sandbox: SandboxThread) -> None:
    url = f"{sandbox.url}/api/v1/namespaces/default/pods"
    short = sandbox.issue_token("alice", ttl=1.0)
    forever = sandbox.issue_token("bob")
    assert _get_status(url, short, None) == 200
    assert _get_status(url, forever, None) == 200
    wait_for(lambda: _get_status(url, short, None) == 401, timeout=30, interval=0.2, what="expiry")
    sandbox.expire_token(forever)
    assert _get_status(url, forever, None) == 401
    assert _get_status(url, forever[:-2] + "xx", None) == 401  # a forged signature
    assert _get_status(url, sandbox.token, None) == 200  # the admin token is static
    with pytest.raises(ValueError, match="the admin token cannot be expired"):
        sandbox.expire_token(sandbox.token)


# ---- exec plugin ---------------------------------------------------------------------------------
def test_credential_command_prints_an_exec_credential(sandbox: SandboxThread, tmp_path: Path) -> None:
    path = sandbox.write_exec_kubeconfig(tmp_path / "kc", user="carol", token_ttl=30)
    user = json.loads(Path(path).read_text())["users"][0]["user"]["exec"]
    assert user["apiVersion"] == "client.authentication.k8s.io/v1"
    out = subprocess.run([user["command"], *user["args"]], capture_output=True, check=True, timeout=60)
    cred = json.loads(out.stdout)
    assert cred["apiVersion"] == "client.authentication.k8s.io/v1"
    assert cred["kind"] == "ExecCredential"
    expires = time.mktime(time.strptime(cred["status"]["expirationTimestamp"], "%Y-%m-%dT%H:%M:%SZ"))
    assert 0 < expires - time.mktime(time.gmtime()) <= 31
    url = f"{sandbox.url}/api/v1/namespaces/default/pods"
    assert _get_status(url, cred["status"]["token"], None) == 200
    assert sandbox.tokens_seen("carol") == 1


def test_credential_command_names_an_unreadable_key_file(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_jobwatch_testing.sandbox.credential",
            "--key-file",
            str(tmp_path / "no"),
            "--user",
            "u",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 1
    assert b"cannot read the signing key file" in out.stderr and str(tmp_path / "no").encode() in out.stderr


@pytest.mark.exec_credential(user="eks-user", token_ttl=1.5)
def test_sync_client_refreshes_exec_plugin_tokens(exec_kubeconfig: Path, sandbox: SandboxThread) -> None:
    api_client = kubernetes.config.new_client_from_config(config_file=str(exec_kubeconfig))
    try:
        core = kubernetes.client.CoreV1Api(api_client)
        core.list_namespaced_pod("default")
        first_seen = sandbox.tokens_seen("eks-user")
        assert first_seen >= 1
        # Keep using the same client past the first token's expiry: every request still succeeds,
        # because the client runs the plugin again for a credential near its expiry.
        wait_for(
            lambda: (
                core.list_namespaced_pod("default") is not None
                and sandbox.tokens_seen("eks-user") > first_seen
            ),
            timeout=30,
            interval=0.3,
            what="a refreshed exec-plugin token",
        )
        core.list_namespaced_pod("default")
    finally:
        api_client.close()


@pytest.mark.exec_credential(user="gke-user", token_ttl=1.5)
async def test_async_client_refreshes_exec_plugin_tokens(
    exec_kubeconfig: Path, sandbox: SandboxThread
) -> None:
    """kubernetes_asyncio refreshes exec credentials only when asked: its ``refresh_token(loader,
    configuration, interval)`` task runs ``loader.load_from_exec_plugin()`` every ``interval`` and
    puts the token into the configuration. The same loop runs here, with a stop flag instead of
    cancellation, so no plugin subprocess is left behind when the test ends."""
    configuration = kubernetes_asyncio.client.Configuration()
    loader = await kubernetes_asyncio.config.load_kube_config(
        config_file=str(exec_kubeconfig), client_configuration=configuration
    )
    stop = asyncio.Event()

    async def refresh() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.2)
            await loader.load_from_exec_plugin()
            configuration.api_key["BearerToken"] = loader.token

    refresher = asyncio.create_task(refresh())
    try:
        async with kubernetes_asyncio.client.ApiClient(configuration) as api_client:
            core = kubernetes_asyncio.client.CoreV1Api(api_client)
            await core.list_namespaced_pod("default")
            deadline = time.monotonic() + 30
            # Past two token lifetimes with requests all along: none may get 401.
            while sandbox.tokens_seen("gke-user") < 3:
                assert time.monotonic() < deadline, "no refreshed token within 30 s"
                await core.list_namespaced_pod("default")
                await asyncio.sleep(0.2)
    finally:
        stop.set()
        await refresher


# ---- the CLI -------------------------------------------------------------------------------------
def test_cli_in_cluster_and_exec_modes(tmp_path: Path) -> None:
    sa_dir = tmp_path / "sa"
    args = [
        "--no-kubelet",
        "--in-cluster-dir",
        str(sa_dir),
        "--service-account",
        "airflow:scheduler",
        "--in-cluster-env",
        str(tmp_path / "env.sh"),
        "--exec-kubeconfig",
        str(tmp_path / "exec-kubeconfig"),
        "--exec-token-ttl",
        "30",
    ]
    with SandboxProcess(tmp_path / "kubeconfig", args=args) as sb:
        assert sb.url.startswith("https://")  # in-cluster implies TLS
        env = sb.in_cluster_env()
        assert (tmp_path / "env.sh").read_text() == "".join(f"export {k}={v}\n" for k, v in env.items())
        assert (sa_dir / "namespace").read_text() == "airflow"
        configuration = kubernetes.client.Configuration()
        kubernetes.config.incluster_config.InClusterConfigLoader(
            token_filename=str(sa_dir / "token"), cert_filename=str(sa_dir / "ca.crt"), environ=env
        ).load_and_set(configuration)
        with kubernetes.client.ApiClient(configuration) as api_client:
            kubernetes.client.CoreV1Api(api_client).list_namespaced_pod("airflow")
        with kubernetes.config.new_client_from_config(
            config_file=str(tmp_path / "exec-kubeconfig")
        ) as api_client:
            kubernetes.client.CoreV1Api(api_client).list_namespaced_pod("default")
        assert sb.admin.counters()["list pods"] == 2


def test_cli_rejects_a_malformed_service_account(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_jobwatch_testing.sandbox",
            "--kubeconfig",
            str(tmp_path / "kc"),
            "--in-cluster-dir",
            str(tmp_path / "sa"),
            "--service-account",
            "nocolon",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert b"'nocolon' is not of the form 'namespace:name'" in out.stderr
