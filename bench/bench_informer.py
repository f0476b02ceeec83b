"""Benchmark: the watch engine (airflow_jobwatch.kube.engine.informer) against the sandbox in its own process.

    python bench/bench_informer.py           # 10,000 pods, 20,000 watch events
    python bench/bench_informer.py --quick   # 2,000 pods, 4,000 watch events

Measures, with the sandbox as a subprocess so its CPU is not counted as the engine's (the sandbox's own CPU
during the initial sync and the relist is read from /proc and reported next to it):

* **initial sync**: LIST (paged, 500 per page) + store + an ADDED event per pod to a subscriber;
* **relist + reconcile**: a 410 forces a relist of all pods while 10% changed and 1% vanished; the diff emits
  MODIFIED and DELETED_UNKNOWN events. Wall time, CPU time, RSS, and the tracemalloc peak of a second relist;
* **events/s**: the engine's stream is held silent (``stall_watches``) while M status changes are made, then
  cut; the engine resumes from its resourceVersion and the server replays all M events at once, so the figure
  is the engine's intake (read, split, parse, store, dispatch to a subscriber), not the generator's pace.

Side by side, in the same run and on the same data: the upstream provider's way of doing the same work, the
``kubernetes`` client's ``Watch().stream(list_namespaced_pod, ...)`` (what the cncf.kubernetes
KubernetesJobWatcher runs, models deserialised) replaying the same M events, and ``list_namespaced_pod`` with
models for the LIST. Prints a table and writes ``docs/benchmarks/informer.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from airflow_jobwatch.kube.engine.informer import EventType, Informer, InformerConfig, InformerEvent  # noqa: E402
from airflow_jobwatch_testing.sandbox.process import SandboxProcess  # noqa: E402

NS = "default"
# Stall detection is off in effect (the bench holds the stream silent on purpose while it prepares events).
# Events replayed per burst (the sandbox keeps at most 5,000 queued events per watcher).
REPLAY_ROUND = 4000
BENCH_CONFIG = InformerConfig(stall_timeout_seconds=600, watch_timeout_seconds=600, page_size=500)


def deep_size(obj: Any) -> int:
    """Bytes of ``obj`` and everything it holds (sys.getsizeof, each object counted once)."""
    seen: set[int] = set()
    stack = [obj]
    total = 0
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    """This process's peak RSS: VmHWM (which reset_peak_rss() can lower), else ru_maxrss (never lowered)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak_rss() -> bool:
    """Lower this process's peak RSS (VmHWM) to its current RSS (Linux >= 4.0, /proc/self/clear_refs "5"), so
    that the peak measured afterwards is the engine's, not that of the bench creating 50,000 pods from here."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` (the sandbox), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pod_body(i: int) -> dict[str, Any]:
    """A pod about the size of an Airflow worker pod (labels, annotations, env, resources)."""
    return {
        "metadata": {
            "name": f"bench-{i:06d}",
            "labels": {
                "airflow-worker": "42",
                "dag_id": f"dag_{i % 37}",
                "task_id": f"task_{i % 101}",
                "run_id": f"scheduled__2026-12-02T{i % 24:02d}0000",
                "kubernetes_executor": "True",
                "try_number": "1",
            },
            "annotations": {
                "dag_id": f"dag_{i % 37}",
                "task_id": f"task_{i % 101}",
                "run_id": f"scheduled__2026-12-02T{i % 24:02d}:00:00+00:00",
                "try_number": "1",
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "base",
                    "image": "apache/airflow:3.3.2-python3.11",
                    "command": ["python", "-m", "airflow.sdk.execution_time.execute_workload"],
                    "args": ["--json-string", json.dumps({"token": "x" * 64, "ti": {"id": i}})],
                    "env": [{"name": f"AIRFLOW__CORE__VAR_{k}", "value": f"value-{k}-{i}"} for k in range(6)],
                    "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                }
            ],
        },
    }


def start_sandbox(history_window: int) -> SandboxProcess:
    """The sandbox in its own process, without kubelet or Job controller (pods only need to exist)."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-informer-"))
    return SandboxProcess(
        workdir / "kubeconfig",
        args=[
            "--no-kubelet",
            "--no-job-controller",
            "--history-window",
            str(history_window),
            "--bookmark-interval",
            "0",
        ],
        cwd=ROOT,
        admin_timeout=120,
    ).start()


async def bulk(sb: SandboxProcess, requests: list[tuple[str, str, Any, str]], concurrency: int = 24) -> None:
    """Send (method, path, body, content-type) requests with bounded concurrency; fail loudly on errors."""
    await send_requests(sb.url, sb.token, requests, concurrency)


async def send_requests(
    url: str, token: str, requests: list[tuple[str, str, Any, str]], concurrency: int = 24
) -> None:
    """:func:`bulk` for a sandbox known by its URL and bearer token (another process's sandbox)."""
    headers = {"Authorization": f"Bearer {token}"}
    queue = list(reversed(requests))
    async with aiohttp.ClientSession(url, headers=headers) as session:

        async def worker() -> None:
            while queue:
                method, path, body, ctype = queue.pop()
                async with session.request(
                    method, path, data=json.dumps(body), headers={"Content-Type": ctype}
                ) as r:
                    if r.status >= 300:
                        raise RuntimeError(f"{method} {path}: HTTP {r.status} {await r.text()}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))


async def create_pods(sb: SandboxProcess, n: int) -> None:
    path = f"/api/v1/namespaces/{NS}/pods"
    await bulk(sb, [("POST", path, pod_body(i), "application/json") for i in range(n)])


async def patch_status(sb: SandboxProcess, indexes: list[int], phase_of: Any) -> None:
    reqs = [
        (
            "PATCH",
            f"/api/v1/namespaces/{NS}/pods/bench-{i:06d}/status",
            {"status": {"phase": phase_of(k), "message": f"change {k}"}},
            "application/merge-patch+json",
        )
        for k, i in enumerate(indexes)
    ]
    await bulk(sb, reqs)


async def delete_pods(sb: SandboxProcess, indexes: list[int]) -> None:
    reqs = [
        (
            "DELETE",
            f"/api/v1/namespaces/{NS}/pods/bench-{i:06d}",
            {"gracePeriodSeconds": 0},
            "application/json",
        )
        for i in indexes
    ]
    await bulk(sb, reqs)


async def settle(informer: Informer) -> None:
    """Wait until the watch is connected and has been open for more than a second: a watch cut sooner
    without events is a "short watch" failure (backed off), which would distort the next measurement."""
    await wait_until(lambda: informer.health.connected, 60, "watch connected")
    await asyncio.sleep(1.2)
    if not informer.health.connected:
        raise RuntimeError("watch did not stay connected")


async def wait_until(predicate: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(0.002)


class Counter:
    def __init__(self) -> None:
        self.by_type: dict[EventType, int] = dict.fromkeys(EventType, 0)
        self.total = 0

    def __call__(self, event: InformerEvent) -> None:
        self.by_type[event.type] += 1
        self.total += 1


async def bench_ours(sb: SandboxProcess, n_pods: int, n_events: int, upstream: Upstream) -> dict[str, Any]:
    from kubernetes_asyncio import config as k8s_config

    out: dict[str, Any] = {}
    client = await k8s_config.new_client_from_config(config_file=str(sb.kubeconfig))
    try:
        # --- initial sync ------------------------------------------------------------------------
        informer = Informer(client, kind="pods", namespace=NS, config=BENCH_CONFIG)
        counter = Counter()
        informer.subscribe(counter)
        rss0 = rss_mb()
        # This process created the pods too (bench requests held in memory): its peak so far is not the engine's.
        out["peak_rss_before_mb"] = peak_rss_mb()
        out["peak_rss_reset"] = reset_peak_rss()
        sb_cpu0, cpu0, t0 = process_cpu_s(sb.pid), time.process_time(), time.perf_counter()
        await informer.start()
        if not await informer.wait_synced(300):
            raise RuntimeError("initial sync did not finish")
        out["sync_s"] = time.perf_counter() - t0
        out["sync_cpu_s"] = time.process_time() - cpu0
        out["sync_sandbox_cpu_s"] = process_cpu_s(sb.pid) - sb_cpu0
        out["sync_rss_mb"] = rss_mb()
        out["sync_rss_growth_mb"] = out["sync_rss_mb"] - rss0
        assert counter.by_type[EventType.ADDED] == n_pods, counter.by_type
        sample = informer.items()[:200]
        out["pod_json_bytes"] = sum(len(json.dumps(o, separators=(",", ":"))) for o in sample) / len(sample)
        await settle(informer)

        # --- relist + reconcile with 10% changed, 1% vanished -----------------------------------------
        changed = list(range(0, n_pods, 10))
        vanished = list(range(5, n_pods, 100))
        sb.admin.fault("stall_watches", on=True)
        await patch_status(sb, changed, lambda k: "Running")
        await delete_pods(sb, vanished)
        sb.admin.fault("stall_watches", on=False)
        before = dict(counter.by_type)
        relists = informer.health.relists
        confirm_gets = informer.stats["confirm_gets"]
        sb.admin.fault("set_watch_expired", on=True)
        sb_cpu0, cpu0, t0 = process_cpu_s(sb.pid), time.process_time(), time.perf_counter()
        sb.admin.fault("drop_watches")
        await wait_until(lambda: informer.health.relists > relists, 120, "relist")
        out["relist_s"] = time.perf_counter() - t0
        out["relist_cpu_s"] = time.process_time() - cpu0
        out["relist_sandbox_cpu_s"] = process_cpu_s(sb.pid) - sb_cpu0
        out["relist_confirm_gets"] = informer.stats["confirm_gets"] - confirm_gets
        sb.admin.fault("set_watch_expired", on=False)
        out["relist_modified"] = counter.by_type[EventType.MODIFIED] - before[EventType.MODIFIED]
        out["relist_tombstones"] = (
            counter.by_type[EventType.DELETED_UNKNOWN] - before[EventType.DELETED_UNKNOWN]
        )
        out["relist_rss_mb"] = rss_mb()
        out["relist_peak_rss_mb"] = peak_rss_mb()
        await settle(informer)

        # a second relist (nothing changed) under tracemalloc, for the Python heap peak of list + reconcile
        tracemalloc.start()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        relists = informer.health.relists
        sb.admin.fault("set_watch_expired", on=True)
        sb.admin.fault("drop_watches")
        await wait_until(lambda: informer.health.relists > relists, 300, "relist under tracemalloc")
        sb.admin.fault("set_watch_expired", on=False)
        out["relist_tracemalloc_peak_mb"] = (tracemalloc.get_traced_memory()[1] - base) / 2**20
        tracemalloc.stop()
        await settle(informer)

        # --- events/s: changes held back by a silent stream, then replayed at once ---------------------
        # In rounds of at most REPLAY_ROUND events: the sandbox's per-watcher buffer holds 5,000 events
        # (WATCHER_MAX_BUFFER), and a longer replay would not fit in it.
        live = [i for i in range(n_pods) if i % 100 != 5]
        out["rounds"] = []  # (resourceVersion before the round, events in it), replayed again for upstream
        out["events_s"] = out["events_cpu_s"] = 0.0
        done = 0
        while done < n_events:
            batch = min(REPLAY_ROUND, n_events - done)
            targets = [live[(done + k) % len(live)] for k in range(batch)]
            sb.admin.fault("stall_watches", on=True)
            out["rounds"].append((int(sb.admin.fault("current_resource_version")), batch))
            await patch_status(sb, targets, lambda k: "Running" if k % 2 else "Pending")
            sb.admin.fault("stall_watches", on=False)
            start_total = counter.total
            cpu0, t0 = time.process_time(), time.perf_counter()
            sb.admin.fault("drop_watches")
            await wait_until(lambda: counter.total - start_total >= batch, 120, f"{batch} events")  # noqa: B023
            out["events_s"] += time.perf_counter() - t0
            out["events_cpu_s"] += time.process_time() - cpu0
            done += batch
            await settle(informer)
            # the same burst through the upstream client, now, before the next round's changes push the
            # history past the sandbox's per-watcher replay limit
            await upstream.replay(out["rounds"][-1][0], batch)
        out["events_per_s"] = n_events / out["events_s"]
        # Last, so that its memory does not inflate the figures above: the cached pods' heap, projected and
        # whole.
        out["heap_projected_mib"] = deep_size(informer.items()) / 2**20
        # The same pods stored whole (only managedFields stripped), as before kube/engine/projection.py.
        full = Informer(
            client, kind="pods", namespace=NS, config=replace(BENCH_CONFIG, projection=False), name="full"
        )
        await full.start()
        if not await full.wait_synced(300):
            raise RuntimeError("the unprojected informer did not sync")
        out["heap_full_mib"] = deep_size(full.items()) / 2**20
        out["full_pod_json_bytes"] = sum(
            len(json.dumps(o, separators=(",", ":"))) for o in full.items()[:200]
        ) / min(200, n_pods)
        await full.stop()
        del full
        await informer.stop()
    finally:
        await client.close()
    return out


# ---- upstream, in a worker process (so its imports and CPU are not the engine's) -------------------
_UPSTREAM_CORE: Any = None


def _upstream_core(kubeconfig: str) -> Any:
    global _UPSTREAM_CORE
    if _UPSTREAM_CORE is None:
        import kubernetes

        api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
        _UPSTREAM_CORE = kubernetes.client.CoreV1Api(api)
    return _UPSTREAM_CORE


def upstream_list(kubeconfig: str) -> dict[str, Any]:
    """LIST all pods with models, as the `kubernetes` client returns them."""
    core = _upstream_core(kubeconfig)
    cpu0, t0 = time.process_time(), time.perf_counter()
    pods = core.list_namespaced_pod(NS)
    return {"s": time.perf_counter() - t0, "cpu_s": time.process_time() - cpu0, "items": len(pods.items)}


def upstream_replay(kubeconfig: str, rv_before: int, batch: int) -> dict[str, Any]:
    """Watch from ``rv_before`` with ``kubernetes.watch.Watch().stream`` (what the cncf.kubernetes
    KubernetesJobWatcher runs) and consume the ``batch`` events the server replays from its history."""
    from kubernetes import watch

    core = _upstream_core(kubeconfig)
    seen = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    stream = watch.Watch().stream(
        core.list_namespaced_pod, NS, resource_version=str(rv_before), timeout_seconds=60
    )
    for _event in stream:
        seen += 1
        if seen >= batch:
            break
    stream.close()
    if seen < batch:
        raise RuntimeError(f"upstream watch from {rv_before} got {seen} of {batch} events")
    return {"s": time.perf_counter() - t0, "cpu_s": time.process_time() - cpu0, "seen": seen}


class Upstream:
    """Drives the upstream measurements in one spawned worker process; accumulates the figures."""

    def __init__(self, sb: SandboxProcess) -> None:
        import concurrent.futures
        import multiprocessing

        self.kubeconfig = str(sb.kubeconfig)
        self.pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        self.out: dict[str, Any] = {"events_s": 0.0, "events_cpu_s": 0.0, "events_seen": 0}

    async def replay(self, rv_before: int, batch: int) -> None:
        loop = asyncio.get_running_loop()
        got = await loop.run_in_executor(self.pool, upstream_replay, self.kubeconfig, rv_before, batch)
        self.out["events_s"] += got["s"]
        self.out["events_cpu_s"] += got["cpu_s"]
        self.out["events_seen"] += got["seen"]

    def list_all(self) -> None:
        got = self.pool.submit(upstream_list, self.kubeconfig).result()
        self.out.update(list_s=got["s"], list_cpu_s=got["cpu_s"], list_items=got["items"])

    def close(self) -> None:
        self.out["events_per_s"] = (
            self.out["events_seen"] / self.out["events_s"] if self.out["events_s"] else 0.0
        )
        self.pool.shutdown()


def write_report(n_pods: int, n_events: int, ours: dict[str, Any], up: dict[str, Any], quick: bool) -> str:
    ratio_events = ours["events_per_s"] / up["events_per_s"] if up.get("events_per_s") else float("nan")
    lines = [
        "## Watch engine (kube/engine/informer.py)",
        "",
        f"`python bench/bench_informer.py{' --quick' if quick else ''}`: {n_pods:,} pods "
        f"({ours['pod_json_bytes'] / 1024:.1f} KiB of JSON each on average), "
        f"{n_events:,} watch events; sandbox in its own process (no kubelet), so CPU and memory are the engine's.",
        "Upstream = the `kubernetes` client as the cncf.kubernetes KubernetesJobWatcher uses it "
        "(`watch.Watch().stream(list_namespaced_pod)`, models deserialised), same data, same run.",
        "",
        "| measure | jobwatch informer | upstream (`kubernetes` client) | ratio |",
        "|---|---|---|---|",
        f"| watch events/s (replayed burst, to a subscriber) | {ours['events_per_s']:,.0f} "
        f"(CPU {ours['events_cpu_s']:.2f} s) | {up['events_per_s']:,.0f} (CPU {up['events_cpu_s']:.2f} s) "
        f"| {ratio_events:.1f}x |",
        f"| initial LIST of {n_pods:,} pods + store + ADDED events | {ours['sync_s']:.2f} s "
        f"(CPU {ours['sync_cpu_s']:.2f} s; sandbox CPU {ours['sync_sandbox_cpu_s']:.2f} s) "
        f"| {up['list_s']:.2f} s for the LIST alone "
        f"(CPU {up['list_cpu_s']:.2f} s) | {up['list_s'] / ours['sync_s']:.1f}x |",
        f"| relist + reconcile {n_pods:,} pods after 410 ({ours['relist_modified']:,} MODIFIED, "
        f"{ours['relist_tombstones']:,} DELETED_UNKNOWN) | {ours['relist_s']:.2f} s (CPU {ours['relist_cpu_s']:.2f} s; "
        f"sandbox CPU {ours['relist_sandbox_cpu_s']:.2f} s; {ours['relist_confirm_gets']:,} confirming GETs) "
        '| no relist (restarts its watch at "0", tombstones never emitted) | |',
        f"| tracemalloc peak of one relist + reconcile | {ours['relist_tracemalloc_peak_mb']:.0f} MB | | |",
        f"| RSS after initial sync (growth during sync) | {ours['sync_rss_mb']:.0f} MB "
        f"(+{ours['sync_rss_growth_mb']:.0f} MB) | | |",
        f"| peak RSS of the process from the informer's start to the end of the relist | "
        f"{ours['relist_peak_rss_mb']:.0f} MB"
        + (
            f" (peak reset at the start; before it, creating the pods from this process: "
            f"{ours['peak_rss_before_mb']:.0f} MB)"
            if ours["peak_rss_reset"]
            else " (could not reset the peak: includes creating the pods from this process)"
        )
        + " | | |",
        f"| Python heap of the {n_pods:,} cached pods, projected (kube/engine/projection.py) | "
        f"{ours['heap_projected_mib']:.1f} MiB ({ours['heap_projected_mib'] * 2**20 / n_pods:,.0f} B/pod, "
        f"{ours['pod_json_bytes']:,.0f} B of JSON) | whole objects: {ours['heap_full_mib']:.1f} MiB "
        f"({ours['heap_full_mib'] * 2**20 / n_pods:,.0f} B/pod, {ours['full_pod_json_bytes']:,.0f} B of JSON) "
        f"| {ours['heap_full_mib'] / max(ours['heap_projected_mib'], 1e-9):.1f}x |",
        "",
        "Aims: >= 5,000 events/s; a 10,000-pod relist in < 2 s with < 200 MB resident. "
        f"Aims at 50,000 pods: relist under 3 s - {'met' if ours['relist_s'] < 3 else 'NOT met'} "
        f"({ours['relist_s']:.2f} s); under 300 MB - {'met' if ours['relist_peak_rss_mb'] < 300 else 'NOT met'} "
        f"(peak RSS {ours['relist_peak_rss_mb']:.0f} MB). These are worker pods as the executor's watcher caches them (its label "
        "selector selects exactly these), heap = deep `sys.getsizeof` of the stored objects.",
        "",
        f"Load average (1 min) of the machine: {ours['load_before']:.2f} when the run started, "
        f"{ours['load_after']:.2f} when it ended (2 cores; every process on the machine counts). Wall times "
        "include waiting for the sandbox, which competes for the same cores; CPU times are each process's own.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 pods and 4,000 events")
    parser.add_argument("--pods", type=int, default=None)
    parser.add_argument("--events", type=int, default=None)
    parser.add_argument("--verbose", action="store_true", help="log the engine's INFO lines")
    args = parser.parse_args()
    if args.verbose:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    n_pods = args.pods or (2000 if args.quick else 10000)
    n_events = args.events or (4000 if args.quick else 20000)
    load_before = os.getloadavg()[0]
    sb = start_sandbox(history_window=n_events + n_pods * 2 + 1000)
    try:
        t0 = time.perf_counter()
        asyncio.run(create_pods(sb, n_pods))
        print(f"created {n_pods} pods in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        upstream = Upstream(sb)
        try:
            ours = asyncio.run(bench_ours(sb, n_pods, n_events, upstream))
            upstream.list_all()
        finally:
            upstream.close()
        up = upstream.out
    finally:
        sb.stop()
    ours.update(load_before=load_before, load_after=os.getloadavg()[0])
    report = write_report(n_pods, n_events, ours, up, args.quick)
    print(report)
    target = ROOT / "docs" / "benchmarks" / "informer.md"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(report)
    print(f"wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
