"""The KubernetesJobWatcher child never imports Airflow (nor the synchronous ``kubernetes`` client);
its metrics reach Stats through the parent.

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
from test_watcher import FAST_INFORMER, JOB_ID

from airflow_jobwatch import metrics
from airflow_jobwatch.executors.pods import worker_label_selector
from airflow_jobwatch.executors.watcher import WatcherSupervisor
from airflow_jobwatch.kube.cluster.client import ClusterConfig
from airflow_jobwatch.kube.meaning.states import DEFAULT_FATAL_WAITING_REASONS

pytestmark = pytest.mark.timeout(120)


def _supervisor(kubeconfig: str, **options: Any) -> WatcherSupervisor:
    """A supervisor of one watcher child for the sandbox's ``default`` namespace, as the executor builds it."""
    return WatcherSupervisor(
        cluster=ClusterConfig(config_file=kubeconfig),
        namespaces=["default"],
        label_selector=worker_label_selector(JOB_ID),
        informer_config=FAST_INFORMER,
        fatal_waiting_reasons=DEFAULT_FATAL_WAITING_REASONS,
        unresponsive_after=30.0,
        **options,
    )


def _factory(tmp_path: Any, kubeconfig: str, report: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.syspath_prepend(str(tmp_path))  # the watcher child gets the parent's sys.path
    return _probe_module(str(tmp_path), kubeconfig, str(report))


def _probe_module(directory: str, kubeconfig: str, report: str) -> str:
    """Write ``watcher_probe.py`` (an async client factory that also reports the Airflow and synchronous
    ``kubernetes`` modules of the process it runs in) to ``directory``, put that on ``sys.path``, and return its import path."""
    import sys
    from pathlib import Path

    if directory not in sys.path:
        sys.path.insert(0, directory)
    (Path(directory) / "watcher_probe.py").write_text(
        textwrap.dedent(
            f"""
            import asyncio, json, os, sys
            import kubernetes_asyncio.client, kubernetes_asyncio.config

            async def _report():
                while True:
                    names = list(sys.modules)
                    mods = sorted(m for m in names if m == "airflow" or m.startswith("airflow."))
                    sync = sorted(m for m in names if m == "kubernetes" or m.startswith("kubernetes."))
                    tmp = {str(report)!r} + ".tmp"
                    with open(tmp, "w") as fh:
                        json.dump({{"pid": os.getpid(), "airflow": mods, "kubernetes": sync}}, fh)
                    os.replace(tmp, {str(report)!r})
                    await asyncio.sleep(0.2)

            async def build():
                asyncio.get_running_loop().create_task(_report())
                client = await kubernetes_asyncio.config.new_client_from_config({kubeconfig!r})
                return kubernetes_asyncio.client.CoreV1Api(client)
            """
        )
    )
    return "watcher_probe.build"


def test_watcher_child_imports_no_airflow_and_its_metrics_reach_the_parent(
    kube_sandbox, tmp_path, monkeypatch
):
    report = tmp_path / "child-modules.json"
    sent: list[tuple[str, str]] = []
    # The parent's side of the pipe: record what it would hand Airflow's Stats.
    monkeypatch.setattr(metrics, "_send", lambda kind, name, value=None, tags=None: sent.append((kind, name)))
    sup = _supervisor(
        kube_sandbox[1], async_client_factory=_factory(tmp_path, kube_sandbox[1], report, monkeypatch)
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
        # The synchronous client (about 36 MiB with its model classes) is not needed by the child.
        assert seen["kubernetes"] == [], (
            f"the watcher child imported the sync client: {seen['kubernetes'][:5]}"
        )
    finally:
        sup.stop(timeout=1.0)


def test_watcher_child_of_an_airflow_main_imports_no_airflow(kube_sandbox, tmp_path):
    """As under ``airflow scheduler``: the parent's ``__main__`` imports Airflow (the console script does),
    which ``multiprocessing``'s spawn would re-run in the child."""
    import subprocess
    import sys

    report = tmp_path / "child-modules.json"
    script = tmp_path / "scheduler_like.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, os, sys, time
            import airflow  # as the `airflow` console script's `from airflow.__main__ import main`
            from test_watcher_imports import _probe_module
            from airflow_jobwatch.executors.pods import worker_label_selector
            from airflow_jobwatch.executors.watcher import WatcherSupervisor
            from airflow_jobwatch.kube.cluster.client import ClusterConfig
            from airflow_jobwatch.kube.meaning.states import DEFAULT_FATAL_WAITING_REASONS
            from test_watcher import FAST_INFORMER, JOB_ID

            if __name__ == "__main__":
                sup = WatcherSupervisor(
                    cluster=ClusterConfig(config_file={kube_sandbox[1]!r}),
                    namespaces=["default"],
                    label_selector=worker_label_selector(JOB_ID),
                    informer_config=FAST_INFORMER,
                    fatal_waiting_reasons=DEFAULT_FATAL_WAITING_REASONS,
                    unresponsive_after=30.0,
                    async_client_factory=_probe_module({str(tmp_path)!r}, {kube_sandbox[1]!r}, {str(report)!r}),
                )
                sup.start()
                deadline = time.monotonic() + 60
                while not sup.all_synced():
                    assert time.monotonic() < deadline
                    sup.poll()
                    time.sleep(0.05)
                first = os.stat({str(report)!r}).st_mtime_ns if os.path.exists({str(report)!r}) else 0
                while not os.path.exists({str(report)!r}) or os.stat({str(report)!r}).st_mtime_ns == first:
                    assert time.monotonic() < deadline, "no report from the watcher child"
                    sup.poll()
                    time.sleep(0.05)
                seen = json.loads(open({str(report)!r}).read())
                print(json.dumps({{"child_pid": sup.child_pids()["default"], **seen}}))
                sup.stop(timeout=1.0)
            """
        )
    )
    import os
    from pathlib import Path

    # This directory on the path (as pytest puts it) for the script's imports of these test modules.
    here = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=100, check=False, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["pid"] == seen["child_pid"]
    assert seen["airflow"] == [], (
        f"the watcher child of an Airflow __main__ imported Airflow: {seen['airflow']}"
    )
    assert seen["kubernetes"] == [], (
        f"the watcher child of an Airflow __main__ imported the sync client: {seen['kubernetes'][:5]}"
    )


def test_watcher_child_imports_no_kubernetes_client_library(kube_sandbox, capfd, monkeypatch):
    """With the default client (no ``async_client_factory``) the child imports neither
    ``kubernetes_asyncio`` nor ``kubernetes`` (their packages import every model class: about 38 MiB each);
    its credentials come from a helper process. What the child imported is read from its own
    ``-X importtime`` report (inherited through the environment; the helper's goes to a pipe)."""
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")
    sup = _supervisor(kube_sandbox[1])
    sup.start()
    try:
        deadline = time.monotonic() + 60
        while not sup.all_synced():
            assert time.monotonic() < deadline, "the watcher child did not sync within 60 s"
            sup.poll()
            time.sleep(0.05)
    finally:
        sup.stop(timeout=1.0)
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in capfd.readouterr().err.splitlines()
        if line.startswith("import time:")
    }
    assert (
        "aiohttp" in imported and "airflow_jobwatch.kube.engine.informer" in imported
    )  # the report is the child's
    libraries = sorted(
        m for m in imported if m.split(".")[0] in ("kubernetes_asyncio", "kubernetes", "airflow", "urllib3")
    )
    assert libraries == [], f"the watcher child imported {libraries[:8]}"
