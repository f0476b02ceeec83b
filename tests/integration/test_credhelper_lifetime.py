"""The credential helper leaves nothing behind: whatever ends a helper run (its timeout, the helper
killed, the fetch cancelled, the process that started it dying), no helper or exec-plugin process is left
running and no file is left in the temporary folder, including the client key ``kubernetes_asyncio``
writes there for ``client-key-data``. Each exec plugin carries a unique marker in its command line, and
the test scans /proc for it."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.incluster import cluster_token

from airflow_jobwatch.kube.cluster import direct
from airflow_jobwatch.kube.cluster.client import (
    MIN_RELOAD_INTERVAL_SECONDS,
    ClusterConfig,
    ClusterConfigError,
)
from airflow_jobwatch.kube.cluster.direct import DirectApiClient, end_helpers, fetch_credentials
from airflow_jobwatch_testing.sandbox.tls import self_signed_cert

# slow: the same on every Airflow minor, so CI runs it once (in the main suite), not in each compat run
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="scans /proc"),
]


def processes_with(marker: str) -> list[int]:
    """Pids of live (not zombie) processes whose command line or environment holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                if handle.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
            blobs = [Path(f"/proc/{entry}/cmdline").read_bytes()]
            try:
                blobs.append(Path(f"/proc/{entry}/environ").read_bytes())
            except PermissionError:
                pass
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if any(marker.encode() in blob for blob in blobs):
            found.append(int(entry))
    return found


async def wait_for(condition: Callable[[], Any], what: str, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


class Plugin:
    """An exec plugin that answers with ``token`` for its first ``answers`` runs and hangs in the later
    ones, after recording its parent's pid (the helper), its ``TMPDIR`` and what that folder holds."""

    def __init__(self, tmp_path: Path, token: str, *, answers: int = 0, ttl: float = 3600.0) -> None:
        self.marker = f"jobwatch-plugin-marker-{uuid.uuid4().hex}"
        self.record = tmp_path / "plugin-record"
        self.calls = tmp_path / "plugin-calls"
        self.path = tmp_path / "hanging_plugin.py"
        self.path.write_text(
            textwrap.dedent(
                f"""
                import datetime, json, os, pathlib, stat, time
                calls = pathlib.Path({str(self.calls)!r})
                n = int(calls.read_text()) + 1 if calls.exists() else 1
                calls.write_text(str(n))
                if n <= {answers}:
                    expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds={ttl})
                    print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1",
                                       "kind": "ExecCredential", "status": {{"token": {token!r},
                                       "expirationTimestamp": expiry.strftime("%Y-%m-%dT%H:%M:%SZ")}}}}))
                    raise SystemExit(0)
                tmp = os.environ.get("TMPDIR", "")
                mode = oct(stat.S_IMODE(os.stat(tmp).st_mode)) if tmp else ""
                record = pathlib.Path({str(self.record)!r})
                record.with_suffix(".tmp").write_text(json.dumps(
                    {{"helper": os.getppid(), "tmpdir": tmp, "mode": mode,
                      "files": sorted(os.listdir(tmp)) if tmp else []}}))
                record.with_suffix(".tmp").rename(record)
                time.sleep(3600)  # an identity service that never answers
                """
            )
        )

    def read(self) -> dict[str, Any]:
        import json

        return dict(json.loads(self.record.read_text()))

    def kubeconfig(self, sandbox: Any, path: Path, *, client_key: bool = True) -> ClusterConfig:
        sandbox.write_kubeconfig(path)
        config = yaml.safe_load(path.read_text())
        user: dict[str, Any] = {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": sys.executable,
                "args": [str(self.path), self.marker],
                "interactiveMode": "Never",
            }
        }
        if client_key:
            cert, key = (pem.decode() for pem in self_signed_cert())
            user["client-certificate-data"] = base64.b64encode(cert.encode()).decode()
            user["client-key-data"] = base64.b64encode(key.encode()).decode()
        config["users"][0]["user"] = user
        path.write_text(yaml.safe_dump(config))
        return ClusterConfig(config_file=str(path))


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own TMPDIR (for this process and the helpers it starts): what is left in it is ours."""
    directory = tmp_path / "tmp"
    directory.mkdir()
    monkeypatch.setenv("TMPDIR", str(directory))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    yield directory
    tempfile.tempdir = None


def assert_nothing_left(plugin: Plugin, private_tmp: Path) -> dict[str, Any]:
    """No process with the plugin's marker, and the helper's private folder gone (the record tells
    which it was, and that it held the client key while the plugin ran)."""
    assert processes_with(plugin.marker) == []
    record = plugin.read()
    assert processes_with(record["tmpdir"]) == []  # the helper (its TMPDIR is in its environment)
    assert record["tmpdir"].startswith(str(private_tmp)) and record["mode"] == "0o700"
    assert not os.path.exists(record["tmpdir"])
    assert list(private_tmp.iterdir()) == []
    return record


async def test_a_timed_out_helper_leaves_no_process_and_no_key_file(
    tls_sandbox: Any, tmp_path: Path, private_tmp: Path
) -> None:
    """``client-key-data`` and an exec token that expires within 5 minutes: the library writes the key
    to a temporary file, then runs the plugin again for a fresh token, and that run hangs."""
    plugin = Plugin(tmp_path, "unused", answers=1, ttl=60.0)
    cfg = plugin.kubeconfig(tls_sandbox, tmp_path / "kubeconfig")
    started = time.monotonic()
    with pytest.raises(ClusterConfigError, match="took more than 10 s"):
        await fetch_credentials(cfg, helper_timeout=10)
    cleanup = time.monotonic() - started - 10
    record = assert_nothing_left(plugin, private_tmp)
    assert record["files"], "the client key was expected in the helper's private folder"
    assert cleanup < 10, f"ending the helper's group took {cleanup:.1f} s"


async def test_a_hung_refresh_of_a_short_lived_exec_token_with_a_client_key_leaves_nothing(
    tls_sandbox: Any, tmp_path: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first helper run gets a token valid 2 s (the plugin runs twice in it: the library fetches a
    token again that expires within 5 minutes); the next run, before its expiry, hangs and times out.
    The client keeps its token, and no plugin, helper or key file is left."""
    plugin = Plugin(tmp_path, cluster_token(tls_sandbox, "exec-user"), answers=2, ttl=2.0)
    cfg = plugin.kubeconfig(tls_sandbox, tmp_path / "kubeconfig")
    client = await DirectApiClient.create(cfg)
    monkeypatch.setattr(direct, "HELPER_TIMEOUT_SECONDS", 10.0)  # for the refresh
    try:
        await wait_for(
            lambda: (
                time.time() >= client._bundle["expires_at"]
                and time.monotonic() - client._last_fetch >= MIN_RELOAD_INTERVAL_SECONDS
            ),
            "the token to expire (and the one-fetch-a-second limit to pass)",
        )
        assert await client.reload_credentials() is False
        assert client.reloads == 0
        assert_nothing_left(plugin, private_tmp)
    finally:
        await client.close()
    assert list(private_tmp.iterdir()) == []  # noqa: ASYNC240 - a local folder, once


async def test_a_helper_killed_with_sigkill_leaves_nothing(
    sandbox: Any, tmp_path: Path, private_tmp: Path
) -> None:
    plugin = Plugin(tmp_path, "unused")
    cfg = plugin.kubeconfig(sandbox, tmp_path / "kubeconfig")
    fetch = asyncio.ensure_future(fetch_credentials(cfg, helper_timeout=60))
    await wait_for(plugin.record.exists, "the plugin to start")
    os.kill(plugin.read()["helper"], signal.SIGKILL)  # skips the helper's atexit and signal handlers
    with pytest.raises(ClusterConfigError, match="helper exit code -9"):
        await fetch
    assert_nothing_left(plugin, private_tmp)


async def test_a_cancelled_fetch_leaves_nothing(sandbox: Any, tmp_path: Path, private_tmp: Path) -> None:
    plugin = Plugin(tmp_path, "unused")
    cfg = plugin.kubeconfig(sandbox, tmp_path / "kubeconfig", client_key=False)
    fetch = asyncio.ensure_future(fetch_credentials(cfg, helper_timeout=60))
    await wait_for(plugin.record.exists, "the plugin to start")
    fetch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await fetch
    assert_nothing_left(plugin, private_tmp)


async def test_the_exit_path_ends_a_running_helper(sandbox: Any, tmp_path: Path, private_tmp: Path) -> None:
    """What the watcher child runs before ``os._exit`` (its parent died): every live helper group ended
    and its folder removed at once, without waiting for the fetch."""
    plugin = Plugin(tmp_path, "unused")
    cfg = plugin.kubeconfig(sandbox, tmp_path / "kubeconfig")
    fetch = asyncio.ensure_future(fetch_credentials(cfg, helper_timeout=60))
    try:
        await wait_for(plugin.record.exists, "the plugin to start")
        end_helpers()
        assert not os.path.exists(plugin.read()["tmpdir"])  # noqa: ASYNC240 - a local folder, once
        await wait_for(lambda: processes_with(plugin.marker) == [], "the plugin to end", within=5)
    finally:
        with pytest.raises(ClusterConfigError):
            await fetch
    assert_nothing_left(plugin, private_tmp)


async def test_the_death_of_the_process_that_started_the_helper_ends_its_group(
    sandbox: Any, tmp_path: Path, private_tmp: Path
) -> None:
    """SIGKILL of the fetching process (the watcher child) runs none of its code: the helper's
    parent-death signal ends the helper, its plugin and its private folder."""
    plugin = Plugin(tmp_path, "unused")
    cfg = plugin.kubeconfig(sandbox, tmp_path / "kubeconfig")
    script = textwrap.dedent(
        f"""
        import asyncio
        from airflow_jobwatch.kube.cluster.client import ClusterConfig
        from airflow_jobwatch.kube.cluster.direct import fetch_credentials
        asyncio.run(fetch_credentials(ClusterConfig(config_file={cfg.config_file!r}), helper_timeout=60))
        """
    )
    # The stand-in for the watcher child: a process of its own, so that it can be killed.
    fetcher = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)  # noqa: ASYNC220
    try:
        await wait_for(plugin.record.exists, "the plugin to start")
        fetcher.kill()
        fetcher.wait(10)
        await wait_for(lambda: processes_with(plugin.marker) == [], "the plugin to end", within=10)
        await wait_for(lambda: not os.path.exists(plugin.read()["tmpdir"]), "the folder to go", within=5)
    finally:
        if fetcher.poll() is None:
            fetcher.kill()
        fetcher.wait(10)
        assert fetcher.stderr is not None
        fetcher.stderr.close()
    assert_nothing_left(plugin, private_tmp)
