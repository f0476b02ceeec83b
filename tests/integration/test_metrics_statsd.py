"""Metrics reach a StatsD server (a UDP listener on 127.0.0.1 run by the test) through Airflow's Stats,
configured by Airflow's own [metrics] settings, from the real watch engine, trigger and executor code."""

from __future__ import annotations

import asyncio
from pathlib import Path

import kubernetes_asyncio.client as k8s
import pytest
from statsd_listener import statsd_listener

from airflow_jobwatch import metrics
from airflow_jobwatch.kube.cluster.client import ClusterConfig, async_api_client
from airflow_jobwatch.kube.engine.informer import Informer, InformerConfig
from airflow_jobwatch_testing.sandbox import SandboxThread

pytestmark = pytest.mark.timeout(120)

P = "airflow.jobwatch."


def _pod(name: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x", "command": ["true"]}]},
    }


async def _until(predicate) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30.0
    while not predicate():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_informer_metrics_lists_events_410_relist_restarts_health(monkeypatch, tmp_path: Path):
    with statsd_listener(monkeypatch) as statsd, SandboxThread(kubelet=False, job_controller=False) as sb:
        kubeconfig = sb.write_kubeconfig(str(tmp_path / "kubeconfig"))
        api = await async_api_client(ClusterConfig(config_file=kubeconfig))
        informer = Informer(
            api,
            kind="pods",
            namespace="default",
            config=InformerConfig(backoff_initial_seconds=0.05, backoff_max_seconds=0.2),
            observer=metrics.InformerMetrics("executor", "pods", "default"),
        )
        base = P + "informer.executor.pods.default."
        try:
            # Every watch from a resourceVersion meets 410 Expired: the engine relists, and we count both.
            sb.set_watch_expired(True)
            await informer.start()
            assert await informer.wait_synced(30)
            await statsd.names_received(base + "lists", base + "expired", base + "relists")
            sb.set_watch_expired(False)
            await k8s.CoreV1Api(api).create_namespaced_pod("default", _pod("a"))
            await _until(lambda: informer.by_name("default", "a") is not None)
            # A watch cut by the server is resumed without a list: a watch restart.
            await _until(lambda: sb.drop_watches() > 0)
            await statsd.names_received(
                base + "watch_restarts",
                base + "events.added",
                base + "healthy",
                base + "seconds_since_last_event",
            )
        finally:
            await informer.stop()
            await api.close()
    assert set(statsd.values(base + "lists")) == {"1|c"} and len(statsd.values(base + "lists")) >= 2
    assert "1|c" in statsd.values(base + "events.added")
    assert all(v.endswith("|g") for v in statsd.values(base + "seconds_since_last_event"))
    assert statsd.values(base + "healthy")[0] == "1|g"


def test_executor_and_triggerer_metrics_names(monkeypatch):
    """The executor and trigger registry call these at their call sites (one line each)."""
    with statsd_listener(monkeypatch) as statsd:
        metrics.pod_created(launch_seconds=1.5)
        metrics.pod_create_error(409)
        metrics.pod_create_error(0)
        metrics.terminal_report("success", after_watcher_gap=False)
        metrics.terminal_report("failed", after_watcher_gap=True)
        metrics.watcher_restarts(2)
        metrics.watcher_restarts(0)  # nothing sent for no restart
        metrics.detection_delay(0.25, status="success")
        statsd.wait_for_names(P + "executor.watcher_restarts", P + "triggerer.detection_delay")
    assert statsd.values(P + "executor.pods_created") == ["1|c"]
    assert statsd.values(P + "executor.launch_latency") == ["1500.000000|ms"]
    assert statsd.values(P + "executor.create_errors.409") == ["1|c"]
    assert statsd.values(P + "executor.create_errors.0") == ["1|c"]
    assert statsd.values(P + "executor.terminal_reports.success") == ["1|c"]
    assert statsd.values(P + "executor.terminal_reports.failed") == ["1|c"]
    assert statsd.values(P + "executor.reconciled_after_restart") == ["1|c"]
    assert statsd.values(P + "executor.watcher_restarts") == ["2|c"]
    assert statsd.values(P + "triggerer.detection_delay") == ["250.000000|ms"]


def test_metric_calls_never_wait_for_the_backend(monkeypatch):
    """A slow backend (here: blocked) must not hold up the caller - the watch engine's event loop and the
    scheduler loop call these. Metrics queue up and are sent once the backend answers."""
    import threading

    gate = threading.Event()
    got: list[str] = []

    class Slow:
        def incr(self, name, count=1, tags=None):
            gate.wait(30)
            got.append(name)

    monkeypatch.setattr(metrics, "_backend", lambda: Slow())
    for _ in range(100):
        metrics.pod_created(launch_seconds=0.1)  # would take 100 x 30 s if it waited
    assert got == []
    gate.set()
    assert metrics.flush(30)
    assert got.count("jobwatch.executor.pods_created") == 100


def test_a_broken_metrics_backend_never_raises(monkeypatch):
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "no-such-host.invalid")
    metrics.configure()
    try:
        metrics.pod_created(launch_seconds=1.0)  # must not raise
        metrics.InformerMetrics("executor", "pods", None).on_event("ADDED")
        assert metrics.flush(30)
    finally:
        monkeypatch.undo()
        metrics.configure()
