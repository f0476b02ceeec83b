"""kube/cluster/client.py: real ``kubernetes`` / ``kubernetes_asyncio`` clients built from kubeconfigs, talking to the sandbox.

Error tests write kubeconfigs holding a recognisable token and check that no message ever quotes it.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import socket
import stat
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes_asyncio.client
import pytest
import yaml
from support.incluster import enter_pod, rotate_token

from airflow_jobwatch.kube.cluster.client import (
    ClusterConfig,
    ClusterConfigError,
    async_api_client,
    sync_api_client,
)

SECRET = "sk-THIS-TOKEN-MUST-NEVER-BE-PRINTED-0123456789"


def _kubeconfig(
    *,
    contexts: dict[str, tuple[str, str | None]],
    clusters: dict[str, str | None],
    users: dict[str, dict[str, Any]],
    current: str | None,
) -> dict[str, Any]:
    """contexts: name -> (cluster, user); clusters: name -> server URL (None: no server key)."""
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {} if server is None else {"server": server}}
            for name, server in clusters.items()
        ],
        "users": [{"name": name, "user": fields} for name, fields in users.items()],
        "contexts": [
            {"name": name, "context": {"cluster": cluster, **({"user": user} if user else {})}}
            for name, (cluster, user) in contexts.items()
        ],
    }
    if current is not None:
        config["current-context"] = current
    return config


def _write(path: Path, config: dict[str, Any] | str) -> str:
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    return str(path)


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def two_contexts(sandbox: Any, tmp_path: Path) -> str:
    """A kubeconfig whose current-context points at a dead server and whose 'good' context at the sandbox."""
    return _write(
        tmp_path / "two-contexts.yaml",
        _kubeconfig(
            contexts={"dead": ("nowhere", "dead-user"), "good": ("sandbox", "sandbox-user")},
            clusters={"nowhere": _closed_port_url(), "sandbox": sandbox.url},
            users={"dead-user": {"token": SECRET}, "sandbox-user": {"token": sandbox.token}},
            current="dead",
        ),
    )


@pytest.fixture
async def closing() -> AsyncIterator[list[Any]]:
    clients: list[Any] = []
    yield clients
    for client in clients:
        result = client.close()
        if hasattr(result, "__await__"):
            await result


# --------------------------------------------------------------------------------------------------
# Working clients


async def test_async_client_lists_pods_from_the_sandbox(kubeconfig: Path, closing: list[Any]) -> None:
    default_host = kubernetes_asyncio.client.Configuration.get_default_copy().host
    client = await async_api_client(ClusterConfig(config_file=str(kubeconfig)))
    closing.append(client)
    pods = await kubernetes_asyncio.client.CoreV1Api(client).list_namespaced_pod("default")
    assert pods.items == []
    # the library's process-wide default configuration was not touched
    assert kubernetes_asyncio.client.Configuration.get_default_copy().host == default_host


def test_sync_client_lists_pods_from_the_sandbox(kubeconfig: Path) -> None:
    default_host = kubernetes.client.Configuration.get_default_copy().host
    client = sync_api_client(ClusterConfig(config_file=str(kubeconfig)))
    try:
        assert kubernetes.client.CoreV1Api(client).list_namespaced_pod("default").items == []
    finally:
        client.close()
    assert kubernetes.client.Configuration.get_default_copy().host == default_host


async def test_cluster_context_selects_another_context(
    sandbox: Any, two_contexts: str, closing: list[Any]
) -> None:
    client = await async_api_client(ClusterConfig(config_file=two_contexts, cluster_context="good"))
    closing.append(client)
    assert client.configuration.host == sandbox.url
    assert (await kubernetes_asyncio.client.CoreV1Api(client).list_namespaced_pod("default")).items == []
    sync_client = sync_api_client(ClusterConfig(config_file=two_contexts, cluster_context="good"))
    try:
        assert kubernetes.client.CoreV1Api(sync_client).list_namespaced_pod("default").items == []
    finally:
        sync_client.close()
    # without cluster_context the current-context (dead) is used
    dead = await async_api_client(ClusterConfig(config_file=two_contexts))
    closing.append(dead)
    assert dead.configuration.host != sandbox.url


async def test_kubeconfig_env_is_read_when_the_client_is_built(
    sandbox: Any, kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, closing: list[Any]
) -> None:
    # KUBECONFIG lists a missing file, then an override file, then the sandbox's: kubectl's merge rules
    # (missing files skipped, first definition of a name wins, first current-context wins).
    override = _write(
        tmp_path / "override.yaml",
        _kubeconfig(contexts={"sandbox": ("sandbox", "sandbox")}, clusters={}, users={}, current=None),
    )
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(tmp_path / "missing"), override, str(kubeconfig)]))
    cfg = ClusterConfig()
    client = await async_api_client(cfg)
    closing.append(client)
    assert (await kubernetes_asyncio.client.CoreV1Api(client).list_namespaced_pod("default")).items == []
    assert cfg.identity() == f"server={sandbox.url} context=sandbox user=sandbox"


# --------------------------------------------------------------------------------------------------
# identity()


def test_identity_is_stable_names_no_secret_and_tells_contexts_apart(sandbox: Any, two_contexts: str) -> None:
    good = ClusterConfig(config_file=two_contexts, cluster_context="good")
    assert good.identity() == good.identity() == ClusterConfig(two_contexts, "good").identity()
    assert good.identity() == f"server={sandbox.url} context=good user=sandbox-user"
    dead = ClusterConfig(config_file=two_contexts)
    assert dead.identity() != good.identity()
    for identity in (good.identity(), dead.identity()):
        assert SECRET not in identity and sandbox.token not in identity
    assert ClusterConfig(config_file=two_contexts, in_cluster=True).identity() == "in-cluster"


def test_identity_without_user(sandbox: Any, tmp_path: Path) -> None:
    path = _write(
        tmp_path / "anon.yaml",
        _kubeconfig(
            contexts={"anon": ("c", None)}, clusters={"c": sandbox.url + "/"}, users={}, current="anon"
        ),
    )
    assert ClusterConfig(config_file=path).identity() == f"server={sandbox.url} context=anon user=-"


# --------------------------------------------------------------------------------------------------
# Errors: name the file and context, say what was expected, never quote the file


def _error(cfg: ClusterConfig) -> str:
    with pytest.raises(ClusterConfigError) as sync_info:
        sync_api_client(cfg)
    with pytest.raises(ClusterConfigError) as identity_info:
        cfg.identity()
    assert str(identity_info.value) == str(sync_info.value)
    message = str(sync_info.value)
    assert SECRET not in message
    assert isinstance(sync_info.value, ValueError)
    # no chained library/yaml exception (whose message may quote the file) rides along in tracebacks
    error = sync_info.value
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)
    return message


async def _async_error(cfg: ClusterConfig) -> str:
    with pytest.raises(ClusterConfigError) as info:
        await async_api_client(cfg)
    assert SECRET not in str(info.value)
    return str(info.value)


GOOD_USER = {"u": {"token": SECRET}}


@pytest.mark.parametrize(
    ("name", "content", "context", "expected"),
    [
        (
            "malformed.yaml",
            f"apiVersion: v1\nusers:\n- name: u\n  user:\n    token: {SECRET}\n  - bad: [\n",
            None,
            ["is not valid YAML at line 6", "expected a kubeconfig"],
        ),
        ("list.yaml", f"- {SECRET}\n", None, ["holds a YAML list, expected a mapping"]),
        (
            "unknown-context.yaml",
            _kubeconfig(
                contexts={"a": ("c", "u"), "b": ("c", "u")},
                clusters={"c": "https://k:6443"},
                users=GOOD_USER,
                current="a",
            ),
            "prod",
            ["has no context 'prod'", "expected one of: a, b"],
        ),
        (
            "no-current.yaml",
            _kubeconfig(
                contexts={"a": ("c", "u")}, clusters={"c": "https://k:6443"}, users=GOOD_USER, current=None
            ),
            None,
            [
                "sets no current-context and no cluster_context was given",
                "expected one of the contexts it defines: a",
            ],
        ),
        (
            "no-cluster.yaml",
            _kubeconfig(
                contexts={"a": ("gone", "u")}, clusters={"c": "https://k:6443"}, users=GOOD_USER, current="a"
            ),
            None,
            ["context 'a'", "cluster 'gone' is not defined", "expected one of: c"],
        ),
        (
            "no-server.yaml",
            _kubeconfig(contexts={"a": ("c", "u")}, clusters={"c": None}, users=GOOD_USER, current="a"),
            None,
            ["cluster 'c' has no 'server'", "expected the API server URL"],
        ),
        (
            "no-user.yaml",
            _kubeconfig(
                contexts={"a": ("c", "nobody")},
                clusters={"c": "https://k:6443"},
                users=GOOD_USER,
                current="a",
            ),
            None,
            ["user 'nobody' is not defined", "expected one of: u"],
        ),
        (
            "bad-cert.yaml",
            _kubeconfig(
                contexts={"a": ("c", "u")},
                clusters={"c": "https://k:6443"},
                users={
                    "u": {
                        "token": SECRET,
                        "client-certificate": "/nonexistent/cert.pem",
                        "client-key": "/nonexistent/key.pem",
                    }
                },
                current="a",
            ),
            None,
            [
                "context 'a'",
                "client-certificate '/nonexistent/cert.pem' does not exist",
                "expected a readable file",
            ],
        ),
    ],
    ids=lambda value: value if isinstance(value, str) and value.endswith(".yaml") else "",
)
async def test_bad_kubeconfig_errors(
    tmp_path: Path, name: str, content: Any, context: str | None, expected: list[str]
) -> None:
    path = _write(tmp_path / name, content)
    cfg = ClusterConfig(config_file=path, cluster_context=context)
    messages = [_error(cfg), await _async_error(cfg)]
    for message in messages:
        assert path in message
        for text in expected:
            assert text in message


async def test_missing_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = str(tmp_path / "nope" / "config")
    message = _error(ClusterConfig(config_file=missing))
    assert missing in message and "does not exist" in message
    assert missing in await _async_error(ClusterConfig(config_file=missing))
    monkeypatch.setenv("KUBECONFIG", missing)
    message = _error(ClusterConfig())
    assert "no kubeconfig found" in message and "$KUBECONFIG" in message and "in_cluster=True" in message


async def test_unreadable_kubeconfig(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    path = _write(tmp_path / "locked.yaml", f"users: [{{name: u, user: {{token: {SECRET}}}}}]\n")
    os.chmod(path, 0)
    assert "cannot be read" in _error(ClusterConfig(config_file=path))


async def test_in_cluster_outside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    cfg = ClusterConfig(in_cluster=True)
    with pytest.raises(ClusterConfigError, match="in_cluster=True.*KUBERNETES_SERVICE_HOST.*set config_file"):
        sync_api_client(cfg)
    with pytest.raises(ClusterConfigError, match="in_cluster=True"):
        await async_api_client(cfg)


async def test_in_cluster_with_a_service_account(
    tls_sandbox: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, closing: list[Any]
) -> None:
    """A pod's view (env + mounted token and CA, no kubeconfig anywhere): both clients list pods over
    TLS verified against the mounted CA."""
    enter_pod(tls_sandbox, tmp_path / "sa", monkeypatch)
    cfg = ClusterConfig(in_cluster=True)
    assert cfg.identity() == f"in-cluster sa={tmp_path / 'sa'}"  # read nothing but the environment
    client = await async_api_client(cfg)
    closing.append(client)
    assert (await kubernetes_asyncio.client.CoreV1Api(client).list_namespaced_pod("default")).items == []
    sync_client = sync_api_client(cfg)
    try:
        assert kubernetes.client.CoreV1Api(sync_client).list_namespaced_pod("default").items == []
    finally:
        sync_client.close()


async def test_in_cluster_token_rotated_in_place_is_picked_up(
    tls_sandbox: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, closing: list[Any]
) -> None:
    """The kubelet rewrites the projected token file; the next request sends the new token."""
    token_file = enter_pod(tls_sandbox, tmp_path / "sa", monkeypatch, token="not-the-token-yet-0000")
    cfg = ClusterConfig(in_cluster=True)
    client = await async_api_client(cfg)
    closing.append(client)
    sync_client = sync_api_client(cfg)
    closing_sync = sync_client
    try:
        with pytest.raises(kubernetes_asyncio.client.ApiException) as refused:
            await kubernetes_asyncio.client.CoreV1Api(client).list_namespaced_pod("default")
        assert refused.value.status == 401
        rotate_token(token_file, tls_sandbox.token)
        assert (await kubernetes_asyncio.client.CoreV1Api(client).list_namespaced_pod("default")).items == []
        assert kubernetes.client.CoreV1Api(sync_client).list_namespaced_pod("default").items == []
    finally:
        closing_sync.close()


# --------------------------------------------------------------------------------------------------
# exec credential plugins: short-lived tokens are refreshed


def _exec_kubeconfig(tmp_path: Path, sandbox: Any, *, expires_in: datetime.timedelta) -> tuple[str, Path]:
    """A kubeconfig whose user gets its token from a plugin: a wrong token first, the right one after."""
    calls = tmp_path / "calls"
    plugin = tmp_path / "plugin.py"
    expiry = (datetime.datetime.now(datetime.UTC) + expires_in).strftime("%Y-%m-%dT%H:%M:%SZ")
    plugin.write_text(
        textwrap.dedent(
            f"""
            import json, pathlib
            calls = pathlib.Path({str(calls)!r})
            n = int(calls.read_text()) + 1 if calls.exists() else 1
            calls.write_text(str(n))
            token = "first-token-is-stale" if n == 1 else {sandbox.token!r}
            print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                               "status": {{"token": token, "expirationTimestamp": {expiry!r}}}}}))
            """
        )
    )
    exec_user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin)],
            "interactiveMode": "Never",
        }
    }
    path = _write(
        tmp_path / "exec.yaml",
        _kubeconfig(
            contexts={"x": ("s", "e")}, clusters={"s": sandbox.url}, users={"e": exec_user}, current="x"
        ),
    )
    return path, calls


async def test_expiring_exec_token_is_refreshed_before_requests(
    sandbox: Any, tmp_path: Path, closing: list[Any]
) -> None:
    # Expiring within the libraries' 5-minute skew window: the token counts as expired at once.
    path, calls = _exec_kubeconfig(tmp_path, sandbox, expires_in=datetime.timedelta(minutes=1))
    client = await async_api_client(ClusterConfig(config_file=path))
    closing.append(client)
    assert calls.read_text() == "1"
    # the first token is rejected by the server; the request works only because the hook refreshed it
    assert (await kubernetes_asyncio.client.CoreV1Api(client).list_namespaced_pod("default")).items == []
    assert int(calls.read_text()) >= 2


async def test_long_lived_exec_token_is_refetched_only_after_a_401(
    sandbox: Any, tmp_path: Path, closing: list[Any]
) -> None:
    """A token still valid by its expirationTimestamp is not refetched before each request; the server's
    401 (token revoked, clock skew) re-runs the plugin once and the request is retried with the new token."""
    path, calls = _exec_kubeconfig(tmp_path, sandbox, expires_in=datetime.timedelta(hours=1))
    client = await async_api_client(ClusterConfig(config_file=path))
    closing.append(client)
    api = kubernetes_asyncio.client.CoreV1Api(client)
    assert calls.read_text() == "1"
    assert (await api.list_namespaced_pod("default")).items == []  # 401, reload, retry
    assert calls.read_text() == "2"
    assert (await api.list_namespaced_pod("default")).items == []
    assert calls.read_text() == "2"  # valid token: no plugin run per request
    # The synchronous client too.
    calls.write_text("0")  # the next run hands out the stale token again, then the good one
    sync_client = sync_api_client(ClusterConfig(config_file=path))
    try:
        assert kubernetes.client.CoreV1Api(sync_client).list_namespaced_pod("default").items == []
        assert calls.read_text() == "2"
    finally:
        sync_client.close()


async def test_failing_exec_plugin_error_is_scrubbed_of_credentials(tmp_path: Path) -> None:
    # A plugin that fails and echoes its secret environment to stderr: the libraries put stderr in
    # their error; ours names the file and context and shows "<redacted>" instead of the secret.
    plugin = tmp_path / "failing.py"
    plugin.write_text(
        "import os, sys\nsys.stderr.write('login failed for key ' + os.environ['API_KEY'])\nsys.exit(1)\n"
    )
    exec_user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin)],
            "env": [{"name": "API_KEY", "value": SECRET}],
            "interactiveMode": "Never",
        }
    }
    path = _write(
        tmp_path / "failing-exec.yaml",
        _kubeconfig(
            contexts={"x": ("s", "e")}, clusters={"s": "https://k:6443"}, users={"e": exec_user}, current="x"
        ),
    )
    message = await _async_error(ClusterConfig(config_file=path))
    assert path in message and "context 'x'" in message
    assert "login failed for key <redacted>" in message


# --------------------------------------------------------------------------------------------------
# The whole path: client built here -> model objects from the sandbox's kubelet and Job controller
# -> objects.to_dict -> states.classify_job. Each Job ends the way the classification must say.


def _job(name: str, command: str, *, image: str = "busybox:1.36", **spec: Any) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": image,
        "command": ["sh", "-c", command],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            **spec,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 2,
                    "containers": [container],
                }
            },
        },
    }


async def test_sandbox_jobs_read_through_built_clients_classify_as_what_happened(
    sandbox: Any, kubeconfig: Path, closing: list[Any]
) -> None:
    from airflow_jobwatch.kube.meaning.states import ObjectState, classify_job

    sandbox.set_image_pull_failure(r"^registry\.invalid/")
    client = await async_api_client(ClusterConfig(config_file=str(kubeconfig)))
    closing.append(client)
    batch = kubernetes_asyncio.client.BatchV1Api(client)
    core = kubernetes_asyncio.client.CoreV1Api(client)
    await batch.create_namespaced_job("default", _job("ok", "echo done"))
    await batch.create_namespaced_job(
        "default", _job("bad", "echo warehouse is down; exit 3", backoffLimit=0)
    )
    await batch.create_namespaced_job("default", _job("pull", "true", image="registry.invalid/etl:1"))

    async def state_of(name: str) -> ObjectState:
        job = await batch.read_namespaced_job(name, "default")  # a V1Job model, not a dict
        pods = await core.list_namespaced_pod("default", label_selector=f"job-name={name}")
        return classify_job(job, pods.items)

    states: dict[str, ObjectState] = {}
    deadline = asyncio.get_running_loop().time() + 30
    while len(states) < 3 and asyncio.get_running_loop().time() < deadline:
        for name in ("ok", "bad", "pull"):
            if name not in states and (state := await state_of(name)).terminal:
                states[name] = state
        await asyncio.sleep(0.1)
    assert set(states) == {"ok", "bad", "pull"}, (
        f"not terminal in 30 s: {set(states) ^ {'ok', 'bad', 'pull'}}"
    )

    assert (states["ok"].phase, states["ok"].reason) == ("succeeded", "CompletionsReached")
    assert (states["bad"].phase, states["bad"].reason, states["bad"].exit_code) == (
        "failed",
        "BackoffLimitExceeded",
        3,
    )
    assert "container 'main' exited with code 3: warehouse is down" in states["bad"].message
    # the Job controller never fails a Job whose pod cannot pull its image; fail-fast does
    assert (states["pull"].phase, states["pull"].reason) == ("failed", "ErrImagePull")
    assert "registry.invalid/etl:1" in states["pull"].message


# --------------------------------------------------------------------------------------------------
# Client options ([kubernetes_executor] / connection extras) reach both clients


def _kubeconfig_without_ca(sb: Any, path: Path) -> str:
    sb.write_kubeconfig(path)
    config = yaml.safe_load(path.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"].pop("certificate-authority-data", None)
    path.write_text(yaml.safe_dump(config))
    return str(path)


async def test_verify_ssl_and_ssl_ca_cert_options(
    tls_sandbox: Any, tmp_path: Path, closing: list[Any]
) -> None:
    path = _kubeconfig_without_ca(tls_sandbox, tmp_path / "no-ca")
    # Without the option the self-signed certificate is refused.
    refused = await async_api_client(ClusterConfig(config_file=path))
    closing.append(refused)
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        await kubernetes_asyncio.client.CoreV1Api(refused).list_namespaced_pod("default")
    ca = tmp_path / "ca.pem"
    ca.write_bytes(tls_sandbox.sandbox.ca_pem)
    for cfg in (
        ClusterConfig(config_file=path, verify_ssl=False),
        ClusterConfig(config_file=path, ssl_ca_cert=str(ca)),
    ):
        client = await async_api_client(cfg)
        closing.append(client)
        assert (await kubernetes_asyncio.client.CoreV1Api(client).list_namespaced_pod("default")).items == []
        sync_client = sync_api_client(cfg)
        try:
            assert kubernetes.client.CoreV1Api(sync_client).list_namespaced_pod("default").items == []
        finally:
            sync_client.close()


@pytest.mark.skipif(not hasattr(socket, "TCP_KEEPIDLE"), reason="platform without TCP_KEEPIDLE")
async def test_tcp_keepalive_on_the_async_clients_sockets(
    sandbox: Any, kubeconfig: Path, closing: list[Any]
) -> None:
    from airflow_jobwatch.kube.cluster.client import TcpKeepalive

    client = await async_api_client(
        ClusterConfig(config_file=str(kubeconfig), tcp_keepalive=TcpKeepalive(37, 11, 4))
    )
    closing.append(client)
    resp = await client.call_api(  # a watch: the connection stays open while we look at its socket
        "/api/v1/namespaces/default/pods",
        "GET",
        query_params=[("watch", "true")],
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=30,
    )
    try:
        sock = resp.connection.transport.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 37
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 11
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 4
    finally:
        resp.release()
    sync_client = sync_api_client(
        ClusterConfig(config_file=str(kubeconfig), tcp_keepalive=TcpKeepalive(37, 11, 4))
    )
    try:
        assert (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 37) in sync_client.configuration.socket_options
        # what urllib3 builds each connection with (kubernetes 35 does not pass the Configuration's on)
        pool_kw = sync_client.rest_client.pool_manager.connection_pool_kw
        assert (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 37) in pool_kw["socket_options"]
    finally:
        sync_client.close()


async def test_default_request_timeout_applies_to_one_off_calls(
    sandbox: Any, kubeconfig: Path, closing: list[Any]
) -> None:
    """A call whose answer never completes ends after request_timeout instead of hanging for ever (a
    half-open connection; here a watch read as a one-off call while the sandbox stalls watches)."""
    client = await async_api_client(ClusterConfig(config_file=str(kubeconfig), request_timeout=1.0))
    closing.append(client)
    sandbox.stall_watches(True)
    try:
        call = asyncio.ensure_future(
            kubernetes_asyncio.client.CoreV1Api(client).list_namespaced_pod("default", watch=True)
        )
        done, _ = await asyncio.wait({call}, timeout=30)
        assert call in done, "the call hung: no default request timeout"
        assert isinstance(call.exception(), TimeoutError)
    finally:
        sandbox.stall_watches(False)
