"""Memory of the executor's KubernetesJobWatcher process with N running worker pods: ours vs upstream.

    python bench/bench_watcher_memory.py               # 5,000 running worker pods
    python bench/bench_watcher_memory.py --pods 500    # a quicker run

Measured in the watcher processes themselves (``/proc/<pid>/status`` and ``/proc/<pid>/smaps_rollup``),
not estimated from a heap: JobWatchExecutor's watcher child (spawned by its ``WatcherSupervisor``) and
the upstream cncf.kubernetes ``KubernetesJobWatcher`` (a ``multiprocessing.Process`` forked by
``AirflowKubernetesScheduler``), each started by its executor's own ``start()``, in the same run,
against the same sandbox subprocess, namespace and pods. No scheduler and no metadata database: only
the executors' ``start()`` and their watchers, which talk real HTTP to the sandbox.

1. **Baseline**: each executor is started with no worker pod in the namespace; once its watch is open
   (the sandbox counted the watch request) and its process is idle, its memory is read; it is stopped.
2. **Load**: a separate process builds N worker pods the way the executor builds them (the provider's
   ``PodGenerator.construct_pod`` from a pod template and an ``ExecuteTask`` workload: upstream's labels
   and annotations, the ``execute_workload`` arguments), creates them, and writes a ``Running`` status
   with container statuses through the ``status`` subresource (no kubelet: N host processes would
   exhaust the machine).
3. **Loaded**: each executor is started again (a new watcher process). Synced means: ours delivered a
   ``running`` result for all N pods (the supervisor tracks them, as the executor does after adopting
   them); upstream logged its ``Event: <pod> is Running`` line for all N (it queues nothing for a
   running pod; that line is its only output per ADDED event it processed). Then, once the process is
   idle, its memory and CPU time are read.

Growth = loaded - baseline, of two separate starts. Reported per watcher: VmRSS, VmHWM (peak RSS),
private memory (USS: Private_Clean + Private_Dirty of smaps_rollup; upstream's child is forked, so its
VmRSS also counts the pages it shares copy-on-write with the process that forked it), growth and
bytes per pod, CPU seconds (utime + stime of the process), time to sync, and API requests (sandbox
counters). Upstream runs first in each phase, so the parent it forks from has the same size in both.
The section goes to docs/benchmarks/executor.md (the other sections are kept).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))  # support.workloads (tests/support/)

from bench_executor import write_section  # noqa: E402
from bench_informer import deep_size, send_requests  # noqa: E402

from airflow_jobwatch_testing.sandbox.process import SandboxProcess  # noqa: E402

NS = "default"  # the worker pods' namespace
EMPTY_NS = "jobwatch-empty"  # the baseline: the same watcher, no pod to see
JOB_ID = "1001"
MARKER = "## Executor watcher memory"
# Upstream's watcher logs this at INFO for each Running pod it processes (kubernetes_executor_utils).
UPSTREAM_RUNNING_LINE = " is Running, annotations: "
# Idle = the process used less than this much CPU over IDLE_WINDOW_SECONDS. Our child beats every
# 0.25 s and sends its stats every second, so "no CPU at all" would never hold for it.
IDLE_CPU_SECONDS = 0.03
IDLE_WINDOW_SECONDS = 1.0
SYNC_DEADLINE_SECONDS = 600.0
CLK_TCK = os.sysconf("SC_CLK_TCK")

# A worker pod template like a production one: resources, env, a logs volume, a service account and a
# security context, besides the ``base`` container the executors fill in.
POD_TEMPLATE = """\
apiVersion: v1
kind: Pod
metadata:
  name: placeholder
  labels:
    app.kubernetes.io/component: worker
    app.kubernetes.io/part-of: airflow
spec:
  restartPolicy: Never
  serviceAccountName: airflow-worker
  securityContext:
    runAsUser: 50000
    fsGroup: 0
  containers:
    - name: base
      image: apache/airflow:3.1.3-python3.11
      imagePullPolicy: IfNotPresent
      env:
        - name: AIRFLOW__CORE__EXECUTOR
          value: airflow_jobwatch.executors.JobWatchExecutor
        - name: AIRFLOW__CORE__EXECUTION_API_SERVER_URL
          value: http://airflow-api-server.airflow.svc:8080/execution/
        - name: AIRFLOW__LOGGING__REMOTE_LOGGING
          value: "False"
      resources:
        requests: {cpu: 250m, memory: 512Mi}
        limits: {memory: 1Gi}
      volumeMounts:
        - name: logs
          mountPath: /opt/airflow/logs
  volumes:
    - name: logs
      emptyDir: {}
"""


# --- /proc readings ---------------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid``, KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def private_kib(pid: int) -> int:
    """USS: the pages only this process maps (Private_Clean + Private_Dirty of smaps_rollup), KiB."""
    total = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Private_Clean", "Private_Dirty"):
            total += int(value.split()[0])
    return total


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all its threads), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of proc(5)


def wait_until(predicate: Callable[[], bool], *, within: float, what: str, tick: Callable[[], Any]) -> None:
    """Poll ``predicate`` (calling ``tick`` between polls, e.g. the supervisor's heartbeat) until it holds."""
    deadline = time.monotonic() + within
    while True:
        tick()
        if predicate():
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {within:.0f} s waiting for {what}")
        time.sleep(0.1)


def wait_idle(pid: int, *, tick: Callable[[], Any], within: float = 120.0) -> None:
    """Until the process spent less than IDLE_CPU_SECONDS of CPU over IDLE_WINDOW_SECONDS."""
    deadline = time.monotonic() + within
    while True:
        before, t0 = cpu_seconds(pid), time.monotonic()
        while time.monotonic() - t0 < IDLE_WINDOW_SECONDS:
            tick()
            time.sleep(0.1)
        if cpu_seconds(pid) - before < IDLE_CPU_SECONDS:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"process {pid} did not go idle within {within:.0f} s")


def snapshot(pid: int) -> dict[str, Any]:
    status = proc_status(pid)
    return {
        "rss_kib": status["VmRSS"],
        "hwm_kib": status["VmHWM"],
        "uss_kib": private_kib(pid),
        "cpu_s": cpu_seconds(pid),
    }


# --- the worker pods (run in a separate process, so this one stays the same size) --------------------


def populate(n: int, kubeconfig: str) -> dict[str, Any]:
    """Create ``n`` worker pods as the executor builds them and mark them Running; return their size."""
    from airflow.providers.cncf.kubernetes.kube_config import KubeConfig
    from kubernetes.client import ApiClient
    from support.workloads import make_workload

    from airflow_jobwatch.executors.pods import build_worker_pod, launch_pod_name, new_launch_id
    from airflow_jobwatch_testing.sandbox.admin import AdminClient

    kube_config = KubeConfig()
    sanitize = ApiClient().sanitize_for_serialization
    # A task token is a JWT of a few hundred bytes; the synthetic workload's is empty.
    token = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9." + "x" * 420 + "." + "s" * 342
    bodies = []
    for i in range(n):
        w = make_workload(
            dag_id=f"etl_{i % 40:02d}",
            task_id=f"load_partition_{i:05d}",
            run_id=f"scheduled__2026-12-03T{i % 24:02d}:00:00+00:00",
        )
        w = w.model_copy(update={"token": token})
        launch_id = new_launch_id()
        pod = build_worker_pod(
            w,
            kube_config=kube_config,
            scheduler_job_id=JOB_ID,
            pod_name=launch_pod_name(w.ti.key, launch_id),
            launch_id=launch_id,
        )
        bodies.append(sanitize(pod))
    admin = AdminClient.from_kubeconfig(kubeconfig)
    url, token = admin.url, admin.token
    started = "2026-12-03T10:00:00Z"

    def status_of(i: int, image: str) -> dict[str, Any]:
        ip = f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}"
        return {
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": started}
                    for t in (
                        "PodReadyToStartContainers",
                        "Initialized",
                        "Ready",
                        "ContainersReady",
                        "PodScheduled",
                    )
                ],
                "hostIP": f"192.168.{i % 8}.10",
                "hostIPs": [{"ip": f"192.168.{i % 8}.10"}],
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "startTime": started,
                "qosClass": "Burstable",
                "containerStatuses": [
                    {
                        "name": "base",
                        "state": {"running": {"startedAt": started}},
                        "lastState": {},
                        "ready": True,
                        "restartCount": 0,
                        "image": "docker.io/" + image,
                        "imageID": "docker.io/apache/airflow@sha256:" + "0f" * 32,
                        "containerID": f"containerd://{i:064x}",
                        "started": True,
                    }
                ],
            }
        }

    path = f"/api/v1/namespaces/{NS}/pods"
    asyncio.run(send_requests(url, token, [("POST", path, b, "application/json") for b in bodies], 16))
    asyncio.run(
        send_requests(
            url,
            token,
            [
                (
                    "PATCH",
                    f"{path}/{b['metadata']['name']}/status",
                    status_of(i, b["spec"]["containers"][0]["image"]),
                    "application/merge-patch+json",
                )
                for i, b in enumerate(bodies)
            ],
            16,
        )
    )
    sample = {**bodies[0], **status_of(0, bodies[0]["spec"]["containers"][0]["image"])}
    return {
        "pods": n,
        "pod_json_bytes": len(json.dumps(sample, separators=(",", ":"))),
        "names": [b["metadata"]["name"] for b in bodies],
    }


# --- the two watchers ----------------------------------------------------------------------------------


def setup_env(home: Path, kubeconfig: Path) -> None:
    template = home / "pod_template.yaml"
    template.write_text(POD_TEMPLATE)
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            "AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE": str(kubeconfig),
            "AIRFLOW__KUBERNETES_EXECUTOR__IN_CLUSTER": "False",
            "AIRFLOW__KUBERNETES_EXECUTOR__POD_TEMPLATE_FILE": str(template),
        }
    )


class Counter:
    """Counts upstream's per-pod ``is Running`` log lines, written by its forked watcher to a file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self.lines = 0
        self.watches_begun = 0

    def poll(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self._offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        self._offset += end
        chunk = chunk[:end]
        self.lines += chunk.count(UPSTREAM_RUNNING_LINE.encode())
        self.watches_begun += chunk.count(b"and now my watch begins")


def use_namespace(namespace: str) -> None:
    """The ``[kubernetes_executor] namespace`` the next executor reads (at construction)."""
    os.environ["AIRFLOW__KUBERNETES_EXECUTOR__NAMESPACE"] = namespace


def stop_upstream(ex: Any) -> None:
    """Upstream's executor shutdown: its ``terminate()`` does nothing, ``end()`` stops the watchers and the
    Manager. Whatever is still alive afterwards is killed, so that no watcher of this run outlives it."""
    scheduler = ex.kube_scheduler
    watchers = list(scheduler.kube_watchers.values()) if scheduler is not None else []
    manager = getattr(getattr(ex, "_manager", None), "_process", None)
    try:
        ex.end()
    except Exception as err:
        print(f"upstream end() raised {err!r}", file=sys.stderr)
    for proc in [*watchers, manager]:
        if proc is not None and proc.is_alive():
            proc.kill()
            proc.join(10)


def run_upstream(n: int, admin: Any, logfile: Path) -> dict[str, Any]:
    """Upstream's KubernetesExecutor.start() forks its KubernetesJobWatcher; measure that process."""
    from airflow.providers.cncf.kubernetes.executors.kubernetes_executor import KubernetesExecutor

    logfile.unlink(missing_ok=True)
    counter = Counter(logfile)
    admin.reset_counters()
    parent_rss = proc_status(os.getpid())["VmRSS"]
    namespace = NS if n else EMPTY_NS
    use_namespace(namespace)
    ex: Any = KubernetesExecutor()  # type: ignore[no-untyped-call]
    ex.job_id = JOB_ID
    t0 = time.monotonic()
    # Upstream's watcher logs (to stdout, as in production) one INFO line per running pod it processed.
    # It is forked by start(): point this process's stdout and stderr at a file while it forks, so that
    # the child writes there and its lines can be counted; this process gets its own back at once.
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(logfile, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        ex.start()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)
    try:
        proc = ex.kube_scheduler.kube_watchers[namespace]
        pid = proc.pid

        def synced() -> bool:
            counter.poll()
            if n == 0:
                return counter.watches_begun >= 1 and admin.counters().get("watch pods", 0) >= 1
            return counter.lines >= n

        wait_until(
            synced, within=SYNC_DEADLINE_SECONDS, what=f"upstream to process {n} pods", tick=lambda: None
        )
        sync_s = time.monotonic() - t0
        wait_idle(pid, tick=lambda: None)
        if not proc.is_alive():
            raise RuntimeError(f"upstream's watcher exited with code {proc.exitcode}")
        snap = snapshot(pid)
        manager = ex._manager._process.pid  # its Manager process holds the queues (not the watcher)
        snap["manager_rss_kib"] = proc_status(manager)["VmRSS"]
        snap["manager_uss_kib"] = private_kib(manager)
        if n:
            # On a quiet namespace its watch ends at the watcher's 30 s read timeout and a new one starts
            # (from the resourceVersion it logs). Read the process again once that watch is processed.
            first = counter.watches_begun

            def restarted() -> bool:
                counter.poll()
                return counter.watches_begun > first

            wait_until(restarted, within=120, what="upstream's watch to restart", tick=lambda: None)
            wait_idle(pid, tick=lambda: None)
            snap["restarted"] = snapshot(pid)
            counter.poll()
            snap["restarted"]["seen"] = counter.lines
    finally:
        stop_upstream(ex)
    counters = admin.counters()
    return {
        **snap,
        "sync_s": sync_s,
        "requests": counters_summary(counters),
        "parent_rss_kib": parent_rss,
        "seen": counter.lines,
    }


def run_ours(names: list[str], admin: Any) -> dict[str, Any]:
    """JobWatchExecutor.start() spawns its watcher child through WatcherSupervisor; measure that process."""
    from airflow_jobwatch.executors import JobWatchExecutor

    n = len(names)
    namespace = NS if n else EMPTY_NS
    use_namespace(namespace)
    admin.reset_counters()
    ex = JobWatchExecutor()
    ex.job_id = JOB_ID
    t0 = time.monotonic()
    ex.start()
    sup = ex.supervisor
    assert sup is not None
    running: set[Any] = set()
    try:
        # The executor tracks every pod it created or adopted; the watcher's results are for those only.
        for name in names:
            sup.track(namespace, name, (namespace, name))

        def tick() -> None:
            for result in sup.poll():
                if result.phase == "running":
                    running.add(result.key)

        def synced() -> bool:
            if n == 0:
                return sup.all_synced() and admin.counters().get("watch pods", 0) >= 1
            return len(running) >= n

        wait_until(
            synced, within=SYNC_DEADLINE_SECONDS, what=f"our watcher to report {n} pods running", tick=tick
        )
        sync_s = time.monotonic() - t0
        pid = sup.child_pids()[namespace]
        assert pid is not None
        wait_idle(pid, tick=tick)
        snap = snapshot(pid)
        if sup.counters.restarts:
            raise RuntimeError(
                f"our watcher restarted {sup.counters.restarts} time(s) during the measurement"
            )
    finally:
        ex.terminate()
    counters = admin.counters()
    return {**snap, "sync_s": sync_s, "requests": counters_summary(counters), "seen": len(running)}


# --- where our watcher's memory goes -------------------------------------------------------------------

# What our watcher child imports, step by step: a fresh interpreter imports each set and reports its RSS.
# The child's HTTP goes through kube/cluster/direct.py, so kubernetes_asyncio is not among them; the
# last row shows what importing it would add (what the child paid before).
_CHILD_MODULES = [
    "aiohttp",
    "airflow_jobwatch.kube.cluster.direct",
    "airflow_jobwatch.kube.engine.informer",
    "airflow_jobwatch.kube.meaning.states",
    "airflow_jobwatch.executors.watcher.child",
]
IMPORT_STEPS = [
    ("a bare interpreter", []),
    ("+ aiohttp", ["aiohttp"]),
    ("+ the child's own modules (kube/ direct, informer, states; executors/watcher)", _CHILD_MODULES),
    (
        "(+ kubernetes_asyncio.client, which the child no longer imports)",
        [*_CHILD_MODULES, "kubernetes_asyncio.client"],
    ),
]


def credential_helper_peak_kib() -> int:
    """Peak RSS (KiB) of one run of the watcher child's credential helper on the bench's kubeconfig.

    Started from a small interpreter (as from the small watcher child): a child's ``ru_maxrss`` also
    counts what it shared with its parent before it exec'd, which from this process would be the bench."""
    import pickle

    from airflow_jobwatch.executors.jobwatch_executor import cluster_config_from_conf

    runner = (
        "import os, subprocess, sys\n"
        "proc = subprocess.Popen([sys.executable, '-m', 'airflow_jobwatch.kube.cluster.credhelper'],\n"
        "                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)\n"
        "proc.stdin.write(sys.stdin.buffer.read()); proc.stdin.close()\n"
        "_, status, usage = os.wait4(proc.pid, 0)\n"
        "print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", runner],
        input=pickle.dumps((list(sys.path), cluster_config_from_conf())),
        capture_output=True,
        cwd=REPO,
        check=True,
    )
    code, peak = done.stdout.decode().split()
    if code != "0":
        raise RuntimeError(f"the credential helper exited with {code}: {done.stderr[-2000:]!r}")
    return int(peak)


def import_floors() -> list[tuple[str, int]]:
    """RSS (KiB) of a fresh interpreter after each step of IMPORT_STEPS."""
    code = (
        "import importlib, sys\n"
        "for m in sys.argv[1:]: importlib.import_module(m)\n"
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS:')][0])\n"
    )
    out = []
    for what, modules in IMPORT_STEPS:
        done = subprocess.run(
            [sys.executable, "-c", code, *modules], capture_output=True, text=True, check=True, cwd=REPO
        )
        out.append((what, int(done.stdout.strip().splitlines()[-1])))
    return out


def cache_in_process(n: int, *, projection: bool | None = None) -> dict[str, Any]:
    """The cache alone: the same Informer, with the watcher child's informer configuration (the executor's,
    with ``compact_store`` as the child sets it; ``projection`` overridden if given), run in this process on
    the same pods; what its stored objects hold as Python objects (decoded, as a dict store would keep
    them), their JSON, and what the compact store keeps (its bytes objects)."""
    from dataclasses import replace

    from airflow_jobwatch.executors.jobwatch_executor import (
        cluster_config_from_conf,
        informer_config_from_conf,
    )
    from airflow_jobwatch.executors.pods import worker_label_selector
    from airflow_jobwatch.kube.cluster.client import async_api_client
    from airflow_jobwatch.kube.engine.informer import Informer

    use_namespace(NS)

    async def run() -> dict[str, Any]:
        client = await async_api_client(cluster_config_from_conf())
        config = replace(informer_config_from_conf(), compact_store=True)  # as child_run sets it
        if projection is not None:
            config = replace(config, projection=projection)
        informer = Informer(
            client, kind="pods", namespace=NS, label_selector=worker_label_selector(JOB_ID), config=config
        )
        try:
            await informer.start()
            if not await informer.wait_synced(SYNC_DEADLINE_SECONDS):
                raise RuntimeError("the in-process informer did not sync")
            items = informer.items()
            if len(items) != n:
                raise RuntimeError(f"the in-process informer holds {len(items)} pods, expected {n}")
            return {
                "projection": config.projection,
                "objects_bytes_per_pod": deep_size(items) / n,
                "json_bytes_per_pod": sum(len(json.dumps(o, separators=(",", ":"))) for o in items) / n,
                "stored_bytes_per_pod": sum(
                    sys.getsizeof(b"") + size for size in informer.cache.packed_sizes()
                )
                / n,
            }
        finally:
            await informer.stop()
            await client.close()

    return asyncio.run(run())


def counters_summary(counters: dict[str, int]) -> str:
    keys = [k for k in counters if k.endswith(" pods") and counters[k]]
    return ", ".join(f"{counters[k]} {k.split()[0]}" for k in sorted(keys)) or "0"


# --- report ------------------------------------------------------------------------------------------


def medians(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each numeric figure over the samples (other values from the first sample)."""
    out = dict(samples[0])
    for key, value in samples[0].items():
        if isinstance(value, int | float):
            out[key] = statistics.median(s[key] for s in samples)
    return out


def mib(kib: float) -> str:
    return f"{kib / 1024:.1f}"


def render(
    n: int,
    pod: dict[str, Any],
    base: dict[str, dict[str, Any]],
    loaded: dict[str, dict[str, Any]],
    floors: list[tuple[str, int]],
    cache: dict[str, Any],
    load: tuple[str, str],
    runs: dict[str, list[tuple[int, int, bool]]],
    helper_kib: int,
) -> str:
    """``base``/``loaded``: per watcher, the median of each figure over the repetitions; ``runs``: per
    watcher, the (RSS, private) growth of each repetition, in KiB, and whether its RSS was at its peak."""
    names = {
        "ours": "JobWatchExecutor's watcher (started by WatcherSupervisor)",
        "upstream": "upstream KubernetesJobWatcher (forked), once synced",
        "upstream_restarted": "the same upstream process after its first watch restart",
    }
    rows = []
    growth: dict[str, float] = {}
    private_growth: dict[str, float] = {}
    for kind in names:
        empty, full = base[kind], loaded[kind]
        growth[kind] = statistics.median(r[0] for r in runs[kind])
        private_growth[kind] = statistics.median(r[1] for r in runs[kind])
        cells = [
            names[kind],
            mib(empty["rss_kib"]),
            mib(full["rss_kib"]),
            mib(full["hwm_kib"]),
            mib(empty["uss_kib"]),
            mib(full["uss_kib"]),
            mib(growth[kind]),
            mib(private_growth[kind]),
            ", ".join(mib(r[0]) for r in runs[kind]),
            f"{growth[kind] * 1024 / n:,.0f}",
            f"{empty['cpu_s']:.2f}",
            f"{full['cpu_s']:.2f}",
            f"{full['sync_s']:.1f}",
            full["requests"],
        ]
        rows.append("| " + " | ".join(cells) + " |")
    head = (
        "| watcher process | RSS, 0 pods (MiB) | RSS, N pods (MiB) | peak RSS (VmHWM), N pods (MiB) | private "
        "(USS), 0 pods (MiB) | private, N pods (MiB) | RSS growth (MiB) | private growth (MiB) | RSS growth of "
        "each run (MiB) | RSS growth per "
        "pod (bytes) | CPU s, 0 pods | CPU s, N pods | start -> synced, N pods (s) | API requests, N pods "
        "(first run) |"
    )
    ratio = growth["upstream"] / growth["ours"]
    private_ratio = private_growth["upstream"] / private_growth["ours"]
    up = loaded["upstream"]
    floor_rows = [f"| {what} | {mib(kib)} |" for what, kib in floors]
    per_pod = growth["ours"] * 1024 / n
    if "whole_objects_bytes_per_pod" in cache:
        aim = (
            f"the projected object is {cache['objects_bytes_per_pod']:,.0f} bytes of Python objects against "
            f"{cache['whole_objects_bytes_per_pod']:,.0f} for the whole pod stored as the informer would with "
            f"the projection off ({cache['whole_objects_bytes_per_pod'] / cache['objects_bytes_per_pod']:.1f}x "
            f"smaller; {cache['json_bytes_per_pod']:,.0f} vs {cache['whole_json_bytes_per_pod']:,.0f} bytes "
            "as JSON)"
        )
    else:
        aim = "the executor's informer configuration has the projection off"
    ratio_r = growth["upstream_restarted"] / growth["ours"]
    replayed = loaded["upstream_restarted"]["seen"]
    if replayed >= 2 * n:
        restart_note = (
            "Its watch restart (its 30 s read timeout on this quiet namespace) watched again from "
            'resourceVersion "0": when the read times out, upstream keeps the "0" it started with, not the '
            "last resourceVersion it saw, so the server replayed every pod as ADDED and the watcher processed "
            f"them all again ({replayed:,.0f} `is Running` lines in all; CPU "
            f"{loaded['upstream_restarted']['cpu_s']:.1f} s instead of {loaded['upstream']['cpu_s']:.1f} s). "
            "It does so after every quiet 30 s."
        )
    else:
        restart_note = (
            f"Its watch restart (its 30 s read timeout on this quiet namespace) did not replay the pods "
            f"({replayed:,.0f} `is Running` lines in all)."
        )
    low, high = sorted((ratio, ratio_r))
    low_mib, high_mib = sorted((growth["upstream"], growth["upstream_restarted"]))
    times = f"{low:.2f}x" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}x to {high:.2f}x"
    upstream_mib = mib(low_mib) if mib(low_mib) == mib(high_mib) else f"{mib(low_mib)} to {mib(high_mib)}"
    spread = "; ".join(
        f"{label} {mib(min(r[0] for r in runs[kind]))} to {mib(max(r[0] for r in runs[kind]))} MiB"
        for kind, label in (("ours", "ours"), ("upstream", "upstream once synced"))
    )
    private_ratio_r = private_growth["upstream_restarted"] / private_growth["ours"]
    return "\n".join(
        [
            f"{MARKER} with {n:,} running worker pods",
            "",
            f"`bench/bench_watcher_memory.py --pods {n}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
            f"load average {load[0]} at the start, {load[1]} at the end, on 2 cores shared with other runs). "
            "The executor watcher's memory with N running worker pods, measured in the watcher "
            "process itself (`/proc/<pid>/status`, `smaps_rollup`), not estimated from a heap. Each executor's "
            "own `start()` started its watcher, against the same sandbox subprocess and the same pods (same "
            "namespace; both selectors match them), one after the other in one run (upstream first): once "
            f"with its namespace empty (baseline) and once with {n:,} pods Running; no scheduler, no database. "
            "The pods were built as the executor builds them (`PodGenerator.construct_pod` from a pod template "
            "with resources, env, a logs volume and a security context, and an `ExecuteTask` workload with a "
            "JWT-sized token; upstream's labels and annotations), then given a Running status with conditions "
            f"and a container status through the status subresource: {pod['pod_json_bytes']:,} bytes of JSON "
            f"per pod. Each watcher was measured {len(runs['ours'])} times (a new process each time, "
            "baseline then loaded); the table gives the median of each figure, and the growth of each run. "
            f"Synced = ours reported `running` for all {n:,} (its supervisor tracking them, as the "
            f"executor does), upstream logged `Event: <pod> is Running` for all {n:,} (it queues nothing for a "
            "running pod); memory and CPU were read once the process was idle after that.",
            "",
            head,
            "|" + "---|" * 14,
            *rows,
            "",
            f"Growth with {n:,} pods: ours {mib(growth['ours'])} MiB of RSS ({per_pod:,.0f} bytes per pod); "
            f"upstream {mib(growth['upstream'])} MiB once synced and {mib(growth['upstream_restarted'])} MiB "
            f"after its first watch restart. {restart_note} Upstream / ours: "
            f"{ratio:.2f} once synced, {ratio_r:.2f} after the restart (private memory: {private_ratio:.2f}, "
            f"{private_ratio_r:.2f}). Peak RSS (VmHWM): ours {mib(loaded['ours']['hwm_kib'])} MiB, upstream "
            f"{mib(loaded['upstream']['hwm_kib'])} MiB. RSS growth over the {len(runs['ours'])} runs: "
            f"{spread}.",
            "",
            "Where our watcher's memory goes (same run):",
            "",
            "| our watcher child imports | RSS of a fresh interpreter (MiB) |",
            "|---|---|",
            *floor_rows,
            "",
            f"* Its {mib(base['ours']['rss_kib'])} MiB with no pod is those imports: aiohttp and our modules. "
            "It imports no Kubernetes client library: its requests go through aiohttp "
            "(`kube/cluster/direct.py`) and its credentials come from a helper process that `kubernetes_asyncio` "
            "resolves them in (`python -m airflow_jobwatch.kube.cluster.credhelper`, run at the start, when an exec "
            f"plugin's token nears its expiry and after a 401; it exits at once: peak RSS {mib(helper_kib)} "
            "MiB, measured here with the bench's kubeconfig). Nor Airflow: it is started as `python -m "
            "airflow_jobwatch.executors.watcher` (multiprocessing's spawn re-ran the scheduler's `airflow` "
            "script in it, which imports Airflow), and its informer's metrics cross the pipe for the scheduler "
            "to send through Stats. None of it is shared with the scheduler: a new interpreter shares no pages, "
            "so this is private memory, per scheduler.",
            f"* Its growth is the informer's store: with the child's informer configuration (projection "
            f"{'on' if cache['projection'] else 'off'}, compact store) the same informer, run in the bench "
            f"process on the same pods, keeps {cache['stored_bytes_per_pod']:,.0f} bytes per pod: each pod's "
            f"projection as one bytes object: its compact JSON ({cache['json_bytes_per_pod']:,.0f} bytes; the "
            f"projection keeps {cache['json_bytes_per_pod'] / pod['pod_json_bytes'] * 100:.0f}% of the "
            f"{pod['pod_json_bytes']:,}), deflated with the store's first pod as zlib's preset dictionary. "
            "Kept as dicts (the default store, which the triggerer uses) the same "
            f"projection is {cache['objects_bytes_per_pod']:,.0f} bytes of Python objects (each small dict and "
            "string costs tens to hundreds of bytes). The rest of the RSS growth is the last state sent per "
            "pod, the index by name, and memory the allocator keeps after parsing the 500-pod LIST pages.",
            "* Upstream's watcher is forked by the process that calls `start()` (the scheduler in production; "
            f"here the bench, {mib(up['parent_rss_kib'])} MiB RSS before the fork), so its VmRSS counts the "
            "pages it shares copy-on-write with that parent; private (USS) is what it costs on its own. It "
            "keeps no cache: each watch event becomes a `V1Pod`, is logged and dropped. Its growth is allocator "
            "high-water and parent pages it copied on write (the garbage collector writes to every object it "
            "scans), and its peak (VmHWM) is the initial ADDED burst of all pods, deserialised one by one. Its "
            "multiprocessing Manager (its queues, one more process, forked by `start()` too) had "
            f"{mib(up['manager_rss_kib'])} MiB RSS and {mib(up['manager_uss_kib'])} MiB private, not counted "
            "above; ours has no such process (its child sends on a pipe).",
            "* CPU s is utime + stime of the watcher process since it started; ours includes its interpreter's "
            "start and imports (the 0-pod column), upstream's forked child imports nothing. CPU figures are the "
            "least robust to the other load on this machine; memory is not affected by it.",
            "* Not measured: how upstream's private memory grows over hours as the garbage collector touches "
            "more of the parent's pages, and the scheduler-side state of either executor.",
            "",
            f"Against the memory aim (a cached object at least 5x smaller than the whole pod): "
            f"{aim}. Measured in the watcher process, a pod costs {per_pod:,.0f} bytes of RSS in ours; "
            f"upstream's watcher, which caches nothing, grows {times} as much as ours "
            f"({upstream_mib} MiB against "
            f"{mib(growth['ours'])} MiB).",
            "",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument(
        "--repeat", type=int, default=3, help="measurements of each watcher (median reported)"
    )
    parser.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "executor.md"))
    parser.add_argument("--populate", metavar="KUBECONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.populate:
        print(json.dumps(populate(args.pods, args.populate)))
        return 0

    # A SIGTERM (e.g. `timeout`) unwinds through the finally blocks: watchers and sandbox are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    load_start = open("/proc/loadavg").read().split()[:3]
    home = Path(tempfile.mkdtemp(prefix="jobwatch-bench-watcher-memory-"))
    sandbox = SandboxProcess(
        home / "kubeconfig",
        args=["--no-kubelet", "--no-job-controller"],
        log=home / "sandbox.log",
        cwd=REPO,
        admin_timeout=120,
    )
    try:
        sandbox.start()
        setup_env(home, sandbox.kubeconfig)
        admin = sandbox.admin
        print(f"creating {args.pods} running worker pods in {NS} ...", flush=True)
        done = subprocess.run(
            [sys.executable, __file__, "--populate", str(sandbox.kubeconfig), "--pods", str(args.pods)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"creating the pods failed:\n{done.stderr[-3000:]}")
        pod = json.loads(done.stdout.strip().splitlines()[-1])
        names = pod.pop("names")
        print(pod, flush=True)
        # Upstream first: its watcher is forked, and this process has about the same size at its forks.
        samples: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {
            "ours": [],
            "upstream": [],
            "upstream_restarted": [],
        }
        for kind in ("upstream", "ours"):
            for rep in range(args.repeat):
                pair = []
                for n in (0, args.pods):
                    print(f"{kind}, run {rep + 1}/{args.repeat}, with {n} pods ...", flush=True)
                    if kind == "upstream":
                        pair.append(run_upstream(n, admin, home / "upstream-watcher.log"))
                    else:
                        pair.append(run_ours(names[:n], admin))
                    print(pair[-1], flush=True)
                samples[kind].append((pair[0], pair[1]))
                if kind == "upstream":
                    samples["upstream_restarted"].append((pair[0], {**pair[1], **pair[1]["restarted"]}))
        base = {kind: medians([b for b, _ in pairs]) for kind, pairs in samples.items()}
        loaded = {kind: medians([f for _, f in pairs]) for kind, pairs in samples.items()}
        runs = {
            kind: [
                (
                    f["rss_kib"] - b["rss_kib"],
                    f["uss_kib"] - b["uss_kib"],
                    f["rss_kib"] >= 0.98 * f["hwm_kib"],
                )
                for b, f in pairs
            ]
            for kind, pairs in samples.items()
        }
        print("where our watcher's memory goes ...", flush=True)
        cache = cache_in_process(args.pods)
        whole = cache_in_process(args.pods, projection=not cache["projection"])
        if cache["projection"]:
            cache["whole_objects_bytes_per_pod"] = whole["objects_bytes_per_pod"]
            cache["whole_json_bytes_per_pod"] = whole["json_bytes_per_pod"]
        floors = import_floors()
        helper_kib = credential_helper_peak_kib()
        print(cache, floors, helper_kib, flush=True)
        load_end = open("/proc/loadavg").read().split()[:3]
        text = render(
            args.pods,
            pod,
            base,
            loaded,
            floors,
            cache,
            (" ".join(load_start), " ".join(load_end)),
            runs,
            helper_kib,
        )
        print()
        print(text)
        write_section(Path(args.out), text, MARKER)
    finally:
        try:
            sandbox.stop(timeout=15)
        except Exception:
            pass
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
