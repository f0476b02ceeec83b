"""No credential leaks through an error path.

Every kubeconfig here carries unique marker strings in its token, client key, password and exec-plugin
environment. Each test drives failures that print something (a configuration error, a TLS failure, TLS
material that cannot be loaded, 401, 403, the credential helper failing, timing out or being killed, an
exec plugin that fails and echoes its environment on stderr, a 422 from a pod create, the trigger's error
event) and asserts that no marker (nor the sandbox-issued token in use) appears in any log record
(captured at DEBUG), exception text, event payload or file left in the test's own temporary folder.
The executor's status file and task log under an authentication failure are covered in
tests/integration/executor/test_executor_secrets_leak.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import signal
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import kubernetes_asyncio.client
import pytest
import yaml
from test_credentials import FAST

from airflow_jobwatch.kube.cluster.client import ClusterConfig, ClusterConfigError, async_api_client
from airflow_jobwatch.kube.cluster.direct import DirectApiClient, fetch_credentials
from airflow_jobwatch.kube.cluster.errors import access_denied_from_exception
from airflow_jobwatch.kube.engine.informer import Informer
from airflow_jobwatch.triggers.job import JobTrigger
from airflow_jobwatch.triggers.registry import get_registry
from airflow_jobwatch_testing.sandbox.tls import self_signed_cert

# slow: the same on every Airflow minor, so CI runs it once (in the main suite), not in each compat run
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


class Leaks:
    """The secrets of one test, and everything it saw that a user could see."""

    def __init__(self, tmp: Path) -> None:
        tag = uuid.uuid4().hex[:12]
        self.token = f"tokenMARK{tag}tokenvalue0123456789"
        self.password = f"passwordMARK{tag}"
        self.env = f"envMARK{tag}"
        self.key = f"keyMARK{tag}"
        self.cloud = f"cloudMARK{tag}"  # in the process environment only, not in a kubeconfig
        self.markers = [self.token, self.password, self.env, self.key, self.cloud, f"MARK{tag}"]
        self.seen: list[str] = []
        self.tmp = tmp

    def secret(self, value: str) -> None:
        """Also look for ``value`` (a sandbox-issued token in use)."""
        self.markers.append(value)

    def saw(self, *items: Any) -> None:
        for item in items:
            self.seen.append(item if isinstance(item, str) else json.dumps(item, default=repr))

    def user(self, **extra: Any) -> dict[str, Any]:
        """A kubeconfig user entry with every marker: token, password and an unloadable client key."""
        bad_key = f"-----BEGIN PRIVATE KEY-----\n{self.key}\n-----END PRIVATE KEY-----\n"
        cert, _ = self_signed_cert()
        return {
            "client-certificate-data": base64.b64encode(cert).decode(),
            "token": self.token,
            "username": "someone",
            "password": self.password,
            "client-key-data": base64.b64encode(bad_key.encode()).decode(),
            **extra,
        }

    def check(self, caplog: pytest.LogCaptureFixture) -> None:
        texts = {f"log record {r.name}": r.getMessage() + (r.exc_text or "") for r in caplog.records}
        texts["log text"] = caplog.text
        texts.update({f"seen #{i}": s for i, s in enumerate(self.seen)})
        for path in self.tmp.rglob("*"):
            if path.is_file():
                texts[f"file {path}"] = path.read_text(errors="replace")
        for where, text in texts.items():
            for marker in self.markers:
                assert marker not in text, f"a secret leaked into {where}: {text[:300]!r}"
        assert len(self.seen) > 0


@pytest.fixture
def leaks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> Iterator[Leaks]:
    caplog.set_level(logging.DEBUG)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    found = Leaks(tmp)
    yield found
    tempfile.tempdir = None
    found.check(caplog)


def _kubeconfig(sandbox: Any, path: Path, user: dict[str, Any], **cluster: Any) -> ClusterConfig:
    sandbox.write_kubeconfig(path)
    config = yaml.safe_load(path.read_text())
    config["users"][0]["user"] = user
    config["clusters"][0]["cluster"].update(cluster)
    path.write_text(yaml.safe_dump(config))
    return ClusterConfig(config_file=str(path))


def _plugin(tmp_path: Path, body: str) -> dict[str, Any]:
    script = tmp_path / f"plugin-{uuid.uuid4().hex[:6]}.py"
    script.write_text(textwrap.dedent(body))
    return {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": sys.executable,
        "args": [str(script)],
        "interactiveMode": "Never",
    }


async def _expect_config_error(leaks: Leaks, cfg: ClusterConfig, match: str) -> None:
    with pytest.raises(ClusterConfigError, match=match) as err:
        await DirectApiClient.create(cfg)
    leaks.saw(str(err.value), repr(err.value))


async def test_configuration_errors_and_tls_material_that_cannot_be_loaded(
    tls_sandbox: Any, tmp_path: Path, leaks: Leaks
) -> None:
    cfg = _kubeconfig(tls_sandbox, tmp_path / "kc", leaks.user())
    await _expect_config_error(
        leaks, ClusterConfig(config_file=cfg.config_file, cluster_context="absent"), "absent"
    )
    # The client key is not a key: the helper or the TLS context load refuses it.
    await _expect_config_error(leaks, cfg, ".")
    # The in-process loader (triggerer, worker): its message. Its files are not scanned: the client
    # library keeps inline keys in 0600 temporary files until the process exits (docs/security.md).
    library_tmp = tmp_path / "library-tmp"
    library_tmp.mkdir()
    os.environ["TMPDIR"], tempfile.tempdir = str(library_tmp), None
    try:
        with pytest.raises(ClusterConfigError) as err:
            await async_api_client(cfg)
    finally:
        os.environ["TMPDIR"], tempfile.tempdir = str(leaks.tmp), None
    leaks.saw(str(err.value))
    # A kubeconfig that is not YAML, with a token in it.
    broken = tmp_path / "broken"
    broken.write_text(f"users: [ {{token: {leaks.token}\n")
    await _expect_config_error(leaks, ClusterConfig(config_file=str(broken)), ".")


async def test_tls_failure_401_and_403(
    sandbox: Any, tls_sandbox: Any, rbac: Any, tmp_path: Path, leaks: Leaks
) -> None:
    # A server certificate signed by another CA: the TLS handshake fails.
    other_ca, _ = self_signed_cert()
    cfg = _kubeconfig(
        tls_sandbox,
        tmp_path / "tls",
        {"token": leaks.token, "password": leaks.password, "username": "u"},
        **{"certificate-authority-data": base64.b64encode(other_ca).decode()},
    )
    client = await DirectApiClient.create(cfg)
    try:
        with pytest.raises(aiohttp.ClientError) as err:
            await client.call_api(
                "/api/v1/pods", "GET", auth_settings=["BearerToken"], _preload_content=False
            )
        leaks.saw(str(err.value), repr(err.value))
    finally:
        await client.close()
    # 401: the token is not one the server issued; an informer reports it.
    cfg = _kubeconfig(sandbox, tmp_path / "401", {"token": leaks.token, "password": leaks.password})
    await _informer_failure(leaks, await DirectApiClient.create(cfg))
    # 403: a valid token of a user without a Role.
    kubeconfig = rbac.kubeconfig("system:serviceaccount:default:nobody")
    token = _user_of(kubeconfig)["token"]
    leaks.secret(token)
    await _informer_failure(leaks, await DirectApiClient.create(ClusterConfig(config_file=str(kubeconfig))))
    await _informer_failure(leaks, await async_api_client(ClusterConfig(config_file=str(kubeconfig))))


async def _informer_failure(leaks: Leaks, client: Any) -> None:
    informer = Informer(client, kind="pods", namespace="default", config=FAST)
    try:
        await informer.start()
        deadline = time.monotonic() + 30
        while informer.health.access_denied is None and informer.health.consecutive_failures < 2:
            assert time.monotonic() < deadline, "the informer to report the failure"
            await asyncio.sleep(0.05)
        leaks.saw(str(informer.health.access_denied), repr(informer.health))
    finally:
        await informer.stop()
        await client.close()


async def test_the_helper_failing_timing_out_and_killed_and_a_plugin_echoing_its_environment(
    sandbox: Any, tmp_path: Path, leaks: Leaks, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cloud credential in the scheduler's environment, which the plugin inherits and echoes.
    monkeypatch.setenv("AWS_SESSION_TOKEN", leaks.cloud)
    echo = _plugin(
        tmp_path,
        """
        import os, sys
        sys.stderr.write(repr(dict(os.environ)) + "\\n" + " ".join(sys.argv))
        sys.exit(3)
        """,
    )
    echo["env"] = [{"name": "CLOUD_SECRET", "value": leaks.env}]
    echo["args"].append(leaks.password)
    cfg = _kubeconfig(sandbox, tmp_path / "echo", {"exec": echo})
    await _expect_config_error(leaks, cfg, ".")

    hang = _plugin(tmp_path, "import time, sys\nsys.stderr.write('started')\ntime.sleep(3600)\n")
    hang["env"] = [{"name": "CLOUD_SECRET", "value": leaks.env}]
    cfg = _kubeconfig(sandbox, tmp_path / "hang", {"exec": hang, "password": leaks.password})
    with pytest.raises(ClusterConfigError, match="took more than") as err:
        await fetch_credentials(cfg, helper_timeout=3)
    leaks.saw(str(err.value))

    # The helper killed while its plugin hangs.
    fetch = asyncio.ensure_future(fetch_credentials(cfg, helper_timeout=60))
    helper = await _helper_of(leaks.tmp)
    os.kill(helper, signal.SIGKILL)
    with pytest.raises(ClusterConfigError, match="exit code -9") as err:
        await fetch
    leaks.saw(str(err.value))


def _proc_files(pid: str) -> tuple[bytes, bytes]:
    return Path(f"/proc/{pid}/cmdline").read_bytes(), Path(f"/proc/{pid}/environ").read_bytes()


def _user_of(kubeconfig: Any, **update: str) -> dict[str, Any]:
    """The kubeconfig's (first) user entry, after writing ``update`` into it."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    user: dict[str, Any] = config["users"][0]["user"]
    if update:
        user.update(update)
        Path(kubeconfig).write_text(yaml.safe_dump(config))
    return user


async def _helper_of(tmp: Path) -> int:
    """The pid of the credential helper running with a private folder under ``tmp``."""
    deadline = time.monotonic() + 30
    while True:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    cmdline, environ = _proc_files(entry)
                except OSError:
                    continue
                if b"airflow_jobwatch.kube.cluster.credhelper" in cmdline and f"={tmp}/".encode() in environ:
                    return int(entry)
        assert time.monotonic() < deadline, "the helper to start"
        await asyncio.sleep(0.05)


async def test_a_422_from_a_pod_create(sandbox: Any, tmp_path: Path, leaks: Leaks) -> None:
    sandbox.write_kubeconfig(tmp_path / "kc")
    config = yaml.safe_load((tmp_path / "kc").read_text())
    token = config["users"][0]["user"]["token"]
    leaks.secret(token)
    config["users"][0]["user"]["password"] = leaks.password
    (tmp_path / "kc").write_text(yaml.safe_dump(config))
    client = await async_api_client(ClusterConfig(config_file=str(tmp_path / "kc")))
    try:
        pod = {"metadata": {"name": "Not_A_Valid_Name"}, "spec": {"containers": []}}
        with pytest.raises(kubernetes_asyncio.client.ApiException) as err:
            await kubernetes_asyncio.client.CoreV1Api(client).create_namespaced_pod("default", pod)
        assert err.value.status == 422
        logging.getLogger("test").warning(
            "create refused: %s",
            access_denied_from_exception(err.value, verb="create", resource="pods", namespace="default"),
        )
        leaks.saw(str(err.value))
    finally:
        await client.close()


async def test_the_triggers_error_event(sandbox: Any, rbac: Any, leaks: Leaks) -> None:
    """A trigger whose user may not read Jobs in its namespace ends with an error event (403)."""
    kubeconfig = rbac.kubeconfig("system:serviceaccount:default:no-jobs")
    leaks.secret(_user_of(kubeconfig)["token"])
    _user_of(kubeconfig, password=leaks.password)
    trigger = JobTrigger("some-job", "default", config_file=str(kubeconfig), poll_interval=1.0)
    try:
        events = [event async for event in _first(trigger)]
    finally:
        await get_registry().close()
    assert events and events[0]["status"] == "error", events
    leaks.saw(*events)


async def _first(trigger: JobTrigger) -> Any:
    async for event in trigger.run():
        yield event.payload
        return
