"""Issue 20: the KubernetesJobWatcher child never imports Airflow; its metrics reach Stats through the parent.

The child is started the way the executor starts it (a :class:`WatcherSupervisor`, ``spawn``). What it has
imported is read from inside it: ``[kubernetes_executor] async_client_factory`` (honoured in the child)
points to a factory that, besides building the client, keeps writing the child's Airflow modules to a file.
"""

from __future__ import annotations

import json
import textwrap
import time
from typing import Any

import pytest

from airflow_jobwatch import metrics
from airflow_jobwatch.executors.pods import worker_label_selector
from airflow_jobwatch.executors.watcher import WatcherSupervisor
from airflow_jobwatch.kube.client import ClusterConfig
from airflow_jobwatch.kube.states import DEFAULT_FATAL_WAITING_REASONS
from tests.integration.executor.test_watcher import FAST_INFORMER, JOB_ID

pytestmark = pytest.mark.timeout(120)


def _factory(tmp_path: Any, kubeconfig: str, report: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "watcher_probe.py").write_text(
        textwrap.dedent(
            f"""
            import asyncio, json, os, sys
            import kubernetes_asyncio.client, kubernetes_asyncio.config

            async def _report():
                while True:
                    mods = sorted(m for m in list(sys.modules) if m == "airflow" or m.startswith("airflow."))
                    tmp = {str(report)!r} + ".tmp"
                    with open(tmp, "w") as fh:
                        json.dump({{"pid": os.getpid(), "airflow": mods}}, fh)
                    os.replace(tmp, {str(report)!r})
                    await asyncio.sleep(0.2)

            async def build():
                asyncio.get_running_loop().create_task(_report())
                client = await kubernetes_asyncio.config.new_client_from_config({kubeconfig!r})
                return kubernetes_asyncio.client.CoreV1Api(client)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # the spawned watcher inherits sys.path
    return "watcher_probe.build"


def test_watcher_child_imports_no_airflow_and_its_metrics_reach_the_parent(
    kube_sandbox, tmp_path, monkeypatch
):
    report = tmp_path / "child-modules.json"
    sent: list[tuple[str, str]] = []
    # The parent's side of the pipe: record what it would hand Airflow's Stats.
    monkeypatch.setattr(metrics, "_send", lambda kind, name, value=None, tags=None: sent.append((kind, name)))
    sup = WatcherSupervisor(
        cluster=ClusterConfig(config_file=kube_sandbox[1]),
        namespaces=["default"],
        label_selector=worker_label_selector(JOB_ID),
        informer_config=FAST_INFORMER,
        fatal_waiting_reasons=DEFAULT_FATAL_WAITING_REASONS,
        unresponsive_after=30.0,
        async_client_factory=_factory(tmp_path, kube_sandbox[1], report, monkeypatch),
    )
    sup.start()
    try:
        deadline = time.monotonic() + 60
        lists = "jobwatch.informer.executor.pods.default.lists"
        while not (sup.all_synced() and ("incr", lists) in sent and report.exists()):
            assert time.monotonic() < deadline, f"watcher not synced with metrics within 60 s; sent: {sent!r}"
            sup.poll()
            time.sleep(0.05)
        # A fresh report written after the first list and its metrics (when Stats used to be imported).
        first = report.stat().st_mtime_ns
        while report.stat().st_mtime_ns == first:
            assert time.monotonic() < deadline, "the child stopped reporting its modules"
            sup.poll()
            time.sleep(0.05)
        seen = json.loads(report.read_text())
        assert seen["pid"] == sup.child_pids()["default"]
        assert seen["airflow"] == [], f"the watcher child imported Airflow: {seen['airflow']}"
    finally:
        sup.stop(timeout=1.0)
