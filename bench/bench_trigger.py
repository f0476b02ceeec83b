"""Benchmark: upstream KubernetesJobTrigger vs our JobTrigger, N deferred Jobs each, same sandbox, one run.

    python bench/bench_trigger.py            # 500 Jobs lasting 10-120 s per variant (~5 minutes)
    python bench/bench_trigger.py --quick    # 50 Jobs lasting 5-20 s per variant (~1 minute)
    python bench/bench_trigger.py --slow-controller  # Jobs waiting for a slow Job controller, 50 and 200

Layout (so that CPU and memory are the triggers' own):

* the sandbox runs in its own process (``python -m airflow_jobwatch_testing.sandbox``), Jobs are ``sleep N``;
* this driver creates the Jobs and keeps one watch on them (its observer) that records, in wall-clock
  time, the moment each Job's terminal condition appears;
* each variant runs all its triggers' ``run()`` generators in one event loop in a child process (like a
  triggerer), which records the wall-clock time each TriggerEvent is yielded and reports its CPU seconds
  and peak RSS.

Detection latency = TriggerEvent time - terminal condition observed by the driver. API requests are the
sandbox's request counters over the child's run (the driver's single observer watch is opened before the
counters are reset). Prints a table and writes ``docs/benchmarks/trigger.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = "upstream"
OURS = "jobwatch"
CONTAINER = "base"


# ------------------------------------------------------------------------------------------- child side
async def _child_main(variant: str, kubeconfig: str, pairs: list[list[str]]) -> dict[str, Any]:
    names = [f"{ns}/{name}" for ns, name in pairs]
    rss_at_start = _rss_mib()  # the imports (Airflow's included), before any trigger exists
    if variant == UPSTREAM:
        from airflow.providers.cncf.kubernetes.triggers.job import KubernetesJobTrigger

        triggers: list[Any] = [
            KubernetesJobTrigger(
                job_name=name,
                job_namespace=namespace,
                pod_names=[],
                pod_namespace=namespace,
                base_container_name=CONTAINER,
                kubernetes_conn_id=None,
                config_file=kubeconfig,  # (its async hook ignores this; KUBECONFIG is set for it)
                poll_interval=10.0,  # upstream's default
                get_logs=False,
                do_xcom_push=False,
            )
            for namespace, name in pairs
        ]
    else:
        from airflow_jobwatch.triggers.job import JobTrigger

        triggers = [JobTrigger(name, namespace, config_file=kubeconfig) for namespace, name in pairs]

    results: dict[str, dict[str, Any]] = {}

    async def one(name: str, trigger: Any) -> None:
        try:
            async for event in trigger.run():
                results[name] = {"at": time.time(), "status": event.payload.get("status")}
                break
        except Exception as e:  # upstream lets API errors escape run(); count them as such
            results[name] = {"at": time.time(), "status": f"exception: {type(e).__name__}"}

    async def progress() -> None:
        started = time.monotonic()
        while True:
            await asyncio.sleep(15)
            print(
                f"  {variant}: {len(results)}/{len(names)} events after {time.monotonic() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    # Full (oldest-generation) collections of the cyclic garbage collector stop the loop; count and time
    # them, since with hundreds of thousands of live objects they are what an unlucky event waits for.
    import gc

    pauses: list[float] = []
    full_at: list[float] = []  # when each began, seconds after the triggers started
    started_at = [0.0]
    t0 = time.perf_counter()

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            started_at[0] = time.perf_counter()
        else:
            pauses.append(time.perf_counter() - started_at[0])
            full_at.append(round(started_at[0] - t0, 2))

    gc.callbacks.append(on_gc)
    reporter = asyncio.create_task(progress())
    # Event-loop stalls (a callback or a collection holding the loop): what delays any event behind them.
    stalls: list[tuple[float, float]] = []

    async def stall_monitor() -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            lag = time.perf_counter() - before - 0.01
            if lag > 0.1:
                stalls.append((round(before - t0, 2), round(lag, 3)))

    monitor = asyncio.create_task(stall_monitor())
    before = resource.getrusage(resource.RUSAGE_SELF)
    await asyncio.gather(*(one(n, t) for n, t in zip(names, triggers, strict=True)))
    after = resource.getrusage(resource.RUSAGE_SELF)
    reporter.cancel()
    monitor.cancel()
    gc.callbacks.remove(on_gc)
    return {
        "rss_at_start_mib": rss_at_start,
        "rss_at_end_mib": _rss_mib(),
        "cache": _cache_sizes() if variant == OURS else {},
        "gc_full_collections": len(pauses),
        "gc_full_max_seconds": max(pauses, default=0.0),
        "gc_full_total_seconds": sum(pauses),
        "gc_tracked_objects": len(gc.get_objects()),
        "events": results,
        "loop_stalls": stalls,
        "gc_full_at": full_at,
        "cpu_seconds": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "peak_rss_mib": after.ru_maxrss / 1024.0,
    }


def child(args: argparse.Namespace) -> int:
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` dumps the stacks when a variant hangs
    names = json.loads(Path(args.names_file).read_text())
    print("imported", flush=True)
    # From here on stdout (where Airflow's loggers write) goes to a file: nobody reads the pipe, and a
    # full pipe would block the event loop being measured.
    log_fd = os.open(Path(args.result_file).with_suffix(".log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log_fd, 1)
    go = sys.stdin.readline().strip()  # the driver says go once the Jobs exist
    if args.foreign_child:
        result = asyncio.run(_foreign_child_main(go, args.kubeconfig, names))
    else:
        if args.profile:  # cProfile the whole child: where the triggerer's loop spends its time
            import cProfile

            prof = cProfile.Profile()
            result = prof.runcall(asyncio.run, _child_main(args.child, args.kubeconfig, names))
            prof.dump_stats(args.profile)
        else:
            result = asyncio.run(_child_main(args.child, args.kubeconfig, names))
    Path(args.result_file).write_text(json.dumps(result))
    return 0


# ------------------------------------------------------------------------------- foreign objects run
FOREIGN_HEADING = "### Foreign objects in the namespace"
FOREIGN_NS = "shared"
FOREIGN_VARIANTS = ("projection", "full")
#: ``--annotated``: the foreign Jobs carry what finished tasks' Jobs carry; the projection as it is, and as it
#: was before it dropped the stored result and ``last-applied-configuration`` (every annotation kept).
ANNOTATED_VARIANTS = ("projection", "annotations-kept")
ANNOTATED_HEADING = "### Cached Jobs that carry a stored result"


async def _foreign_child_main(variant: str, kubeconfig: str, pairs: list[list[str]]) -> dict[str, Any]:
    """Our JobTriggers for ``pairs`` in a namespace full of other people's Jobs and pods; RSS once synced."""
    import gc

    from bench_informer import deep_size  # this script's folder is on sys.path

    import airflow_jobwatch.kube.engine.informer as informer_module
    from airflow_jobwatch.triggers.job import JobTrigger
    from airflow_jobwatch.triggers.registry import get_registry

    if variant == "full":
        # Measurement only: store whole objects (managedFields still stripped), as before the projection.
        informer_module.projector = lambda kind: None  # type: ignore[assignment,return-value]
    if variant == "annotations-kept":
        # Measurement only: the projection as before it dropped the stored result and last-applied.
        from airflow_jobwatch.kube.engine import projection

        projection.JOB_FIELDS["metadata"] = projection.METADATA_FIELDS
    triggers = [JobTrigger(name, namespace, config_file=kubeconfig) for namespace, name in pairs]
    gc.collect()
    base = _rss_mib()
    started = time.monotonic()
    tasks = [asyncio.create_task(t.wait()) for t in triggers]
    registry = get_registry()
    while not (registry._watches and all(w.synced for w in registry._watches.values())):
        await asyncio.sleep(0.1)
        if time.monotonic() - started > 900:
            raise RuntimeError("the shared watch did not sync within 900 s")
    synced_after = time.monotonic() - started
    await asyncio.sleep(2)
    gc.collect()
    [watch] = list(registry._watches.values())
    assert watch.jobs is not None and watch.pods is not None
    result = {
        "variant": variant,
        "sync_seconds": synced_after,
        "rss_growth_mib": _rss_mib() - base,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "jobs_cached": len(watch.jobs.items()),
        "pods_cached": len(watch.pods.items()),
        "jobs_heap_mib": deep_size(watch.jobs.items()) / 2**20,
        "pods_heap_mib": deep_size(watch.pods.items()) / 2**20,
        "packed": _cache_sizes(),
        "events": {},
    }
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return result


def _cache_sizes() -> dict[str, Any]:
    """What the shared watches hold at the end: objects, and the bytes of their packed copies."""
    from airflow_jobwatch.triggers.registry import get_registry

    sizes: dict[str, Any] = {}
    for watch in get_registry()._watches.values():
        for kind, informer in (("jobs", watch.jobs), ("pods", watch.pods)):
            if informer is None:
                continue
            row = sizes.setdefault(kind, {"objects": 0, "packed_bytes": 0})
            row["objects"] += len(informer.cache)
            row["packed_bytes"] += sum(informer.cache.packed_sizes())
    return sizes


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _foreign_pod(i: int, job_uid: str) -> dict[str, Any]:
    """A pod of someone else's Job (a Spark-executor-sized spec), carrying the Job controller's labels."""
    return {
        "metadata": {
            "name": f"spark-exec-{i:06d}",
            "labels": {
                "controller-uid": job_uid,
                "batch.kubernetes.io/controller-uid": job_uid,
                "job-name": f"etl-{i // 3:06d}",
                "batch.kubernetes.io/job-name": f"etl-{i // 3:06d}",
                "spark-role": "executor",
                "spark-app-selector": f"spark-{i // 50:05d}",
                "team": "data-platform",
            },
            "annotations": {
                "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
                "prometheus.io/scrape": "true",
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": "spark",
            "nodeSelector": {"workload": "batch"},
            "containers": [
                {
                    "name": "executor",
                    "image": "registry.example.com/data/spark:3.5.1-python3.11-20261101",
                    "args": ["executor", "--app", f"spark-{i // 50:05d}", "--cores", "4", "--memory", "8g"],
                    "env": [
                        {"name": f"SPARK_ENV_{k}", "value": f"value-{k}-{i}-" + "x" * 24} for k in range(14)
                    ],
                    "resources": {"requests": {"cpu": "4", "memory": "9Gi"}, "limits": {"memory": "9Gi"}},
                    "volumeMounts": [
                        {"name": "spark-conf", "mountPath": "/opt/spark/conf"},
                        {"name": "scratch", "mountPath": "/tmp/spark-local"},
                    ],
                }
            ],
            "volumes": [
                {"name": "spark-conf", "configMap": {"name": f"spark-conf-{i // 50:05d}"}},
                {"name": "scratch", "emptyDir": {"sizeLimit": "50Gi"}},
            ],
        },
    }


def _annotate_as_finished(job: dict[str, Any], i: int) -> dict[str, Any]:
    """``job`` with what a finished task's Job carries: the result its end wrote (one pod, a 2 KiB XCom of
    random text, which deflate cannot shrink much, signed as the triggerer signs it), and the copy of the
    manifest ``kubectl apply`` keeps."""
    import uuid

    from airflow_jobwatch.kube.meaning.result import RESULT_ANNOTATION, JobResult, PodOutcome

    uid = str(uuid.UUID(int=random.Random(i).getrandbits(128)))
    xcom = json.dumps({"rows": i, "digest": secrets.token_hex(1024)})
    result = JobResult(
        "success",
        "CompletionsReached",
        f"Job 'shared/{job['metadata']['name']}' succeeded (CompletionsReached).",
        uid=uid,
        pods=(PodOutcome(f"{job['metadata']['name']}-x7k2p", "succeeded", 0, "Completed"),),
        xcom_result=(xcom,),
    )
    annotations = job["metadata"]["annotations"]
    annotations[RESULT_ANNOTATION] = result.to_annotation(b"k" * 32) or ""
    annotations["kubectl.kubernetes.io/last-applied-configuration"] = json.dumps(job)
    return job


def _foreign_job(i: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"nightly-{i:06d}",
            "labels": {"app": "reports", "team": "analytics", "schedule": f"s{i % 24}"},
            "annotations": {"batch.kubernetes.io/cronjob-scheduled-timestamp": "2026-12-02T00:00:00Z"},
        },
        "spec": {
            "backoffLimit": 2,
            "ttlSecondsAfterFinished": 86400,
            "template": {
                "metadata": {"labels": {"app": "reports"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "report",
                            "image": "registry.example.com/analytics/reports:2026.11.30",
                            "command": ["python", "-m", "reports.nightly", "--partition", str(i % 97)],
                            "env": [{"name": f"REPORT_{k}", "value": f"v{k}-{i}"} for k in range(8)],
                            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                        }
                    ],
                },
            },
        },
    }


async def _bulk_create(url: str, token: str, requests: list[tuple[str, Any]], concurrency: int = 16) -> None:
    import aiohttp

    queue = list(reversed(requests))
    async with aiohttp.ClientSession(url, headers={"Authorization": f"Bearer {token}"}) as session:

        async def worker() -> None:
            while queue:
                path, body = queue.pop()
                async with session.post(path, json=body) as r:
                    if r.status >= 300 and r.status != 409:
                        raise RuntimeError(f"POST {path}: HTTP {r.status} {await r.text()}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def foreign_main(args: argparse.Namespace) -> int:
    """Triggerer memory in a namespace full of other people's objects, with and without the projection.

    ``--foreign-jobs`` Jobs and ``--foreign-pods`` pods (with the Job controller's ``controller-uid`` label, so
    the triggerer's pod watch selects them) that belong to nobody's deferred task, plus 100 Jobs of ours with
    a JobTrigger each; for each variant a child process (one triggerer loop) runs the 100 triggers until the
    shared watch has synced, and reports its RSS growth and the Python heap of the two caches.
    """
    import uuid

    from airflow_jobwatch_testing.sandbox.process import SandboxProcess

    workdir = Path(tempfile.mkdtemp(prefix="bench-foreign-"))
    token = secrets.token_urlsafe(24)
    sandbox = SandboxProcess(
        workdir / "kubeconfig",
        args=["--token", token, "--no-kubelet", "--no-job-controller"],
        log=workdir / "sandbox.log",
        admin_timeout=300,
    )
    kubeconfig = str(sandbox.kubeconfig)
    sandbox.start()
    ours = [[FOREIGN_NS, f"ours-{i:03d}"] for i in range(100)]
    try:
        url = sandbox.url
        t0 = time.monotonic()
        asyncio.run(_bulk_create(url, token, [("/api/v1/namespaces", {"metadata": {"name": FOREIGN_NS}})]))
        jobs_path = f"/apis/batch/v1/namespaces/{FOREIGN_NS}/jobs"
        pods_path = f"/api/v1/namespaces/{FOREIGN_NS}/pods"
        make_job = (lambda i: _annotate_as_finished(_foreign_job(i), i)) if args.annotated else _foreign_job
        requests: list[tuple[str, Any]] = [(jobs_path, make_job(i)) for i in range(args.foreign_jobs)]
        requests += [(pods_path, _foreign_pod(i, str(uuid.uuid4()))) for i in range(args.foreign_pods)]
        requests += [(jobs_path, _foreign_job(0) | {"metadata": {"name": name}}) for _, name in ours]
        asyncio.run(_bulk_create(url, token, requests))
        print(f"created {len(requests)} objects in {time.monotonic() - t0:.0f} s", flush=True)
        rows = []
        for variant in ANNOTATED_VARIANTS if args.annotated else FOREIGN_VARIANTS:
            names_file, result_file = workdir / "names.json", workdir / f"{variant}.json"
            names_file.write_text(json.dumps(ours))
            env = dict(os.environ, KUBECONFIG=kubeconfig, AIRFLOW_HOME=str(workdir / "airflow"))
            proc = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    OURS,
                    "--foreign-child",
                    "--kubeconfig",
                    kubeconfig,
                    "--names-file",
                    str(names_file),
                    "--result-file",
                    str(result_file),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            assert proc.stdout is not None and proc.stdin is not None
            if proc.stdout.readline().strip() != "imported":
                raise RuntimeError(f"{variant} child failed to start")
            proc.stdin.write(variant + "\n")
            proc.stdin.flush()
            proc.wait(timeout=1800)
            rows.append(json.loads(result_file.read_text()))
            print(f"  {variant}: {rows[-1]}", flush=True)
    finally:
        sandbox.stop(timeout=30)
    text = render_annotated(rows, args) if args.annotated else render_foreign(rows, args)
    print(text)
    if not args.no_write and not args.annotated:
        target = ROOT / "docs" / "benchmarks" / "trigger.md"
        head = target.read_text().partition(FOREIGN_HEADING)[0].rstrip() + "\n\n" if target.exists() else ""
        target.write_text(head + text)
    return 0


def render_annotated(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """``--annotated``: what the cache holds per Job when the namespace's Jobs carry stored results."""
    lines = [
        ANNOTATED_HEADING,
        "",
        f"`bench/bench_trigger.py --foreign --annotated --foreign-jobs {args.foreign_jobs} --foreign-pods "
        f"{args.foreign_pods}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
        f"{os.getloadavg()[0]:.1f}): each foreign Job carries a stored result (one pod, a 2 KiB XCom) and "
        "`kubectl apply`'s copy of its manifest; one triggerer process per variant, measured once synced.",
        "",
        "| variant | Jobs cached | packed bytes per Job | packed Jobs MiB | heap of cached Jobs MiB | RSS growth MiB | peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        packed = r["packed"].get("jobs", {})
        per_job = packed.get("packed_bytes", 0) / max(1, packed.get("objects", 0))
        lines.append(
            f"| {r['variant']} | {r['jobs_cached']:,} | {per_job:,.0f} | {packed.get('packed_bytes', 0) / 2**20:.1f} | "
            f"{r['jobs_heap_mib']:.1f} | {r['rss_growth_mib']:.0f} | {r['peak_rss_mib']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def render_foreign(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    proj = next(r for r in rows if r["variant"] == "projection")
    full = next(r for r in rows if r["variant"] == "full")
    objects = proj["jobs_cached"] + proj["pods_cached"]

    def per_object(r: dict[str, Any]) -> float:
        return (r["jobs_heap_mib"] + r["pods_heap_mib"]) * 2**20 / max(1, r["jobs_cached"] + r["pods_cached"])

    ratio = per_object(full) / max(per_object(proj), 1e-9)
    pods_mb = proj["pods_heap_mib"] * 2**20 / 1e6
    lines = [
        FOREIGN_HEADING,
        "",
        f"`bench/bench_trigger.py --foreign`: {args.foreign_jobs:,} foreign Jobs and {args.foreign_pods:,} "
        "foreign pods (Spark-executor-sized specs, with the Job controller's `controller-uid` label so the "
        "triggerer's pod watch selects them) in one namespace, plus 100 Jobs of ours, each with a JobTrigger, "
        "in one triggerer process per variant; measured once the shared watch has synced. 'full' stores "
        "whole objects (only managedFields stripped), as before the projection.",
        "",
        "| variant | Jobs cached | pods cached | heap of cached Jobs MiB | heap of cached pods MiB | bytes per object | RSS growth MiB | peak RSS MiB | sync s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['jobs_cached']:,} | {r['pods_cached']:,} | {r['jobs_heap_mib']:.1f} | "
            f"{r['pods_heap_mib']:.1f} | {per_object(r):,.0f} | {r['rss_growth_mib']:.0f} | "
            f"{r['peak_rss_mib']:.0f} | {r['sync_seconds']:.1f} |"
        )
    lines += [
        "",
        f"Projection: {ratio:.1f}x less memory per cached object ({objects:,} objects). Aims: at "
        f"least 5x - {'met' if ratio >= 5 else 'NOT met'}; {args.foreign_pods:,} foreign pods under 150 MB "
        f"- {'met' if pods_mb < 150 else 'NOT met'} ({pods_mb:.0f} MB of Python heap for the cached pods "
        f"with projection, {full['pods_heap_mib'] * 2**20 / 1e6:.0f} MB without). Heap = deep `sys.getsizeof` of "
        "the cached objects; RSS growth = the process's resident memory after the sync minus before the "
        "triggers started (includes the allocator's free lists and the largest LIST response in flight). "
        "The sandbox's pods have no kubelet-written status and no managedFields; real pods carry both, so "
        "real savings are larger.",
        "",
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ driver side
class Observer:
    """One watch on the namespace's Jobs; wall-clock time each Job's terminal condition first appeared."""

    def __init__(self, api_client: Any, prefix: str) -> None:
        from kubernetes import client, watch

        self.batch = client.BatchV1Api(api_client)
        self.watch = watch.Watch()
        self.prefix = prefix  # namespaces of this variant
        self.done: dict[str, float] = {}  # "namespace/name" -> time
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _record(self, job: dict[str, Any]) -> None:
        meta = job.get("metadata") or {}
        if not meta.get("namespace", "").startswith(self.prefix):
            return
        for c in (job.get("status") or {}).get("conditions") or []:
            if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
                self.done.setdefault(f"{meta['namespace']}/{meta['name']}", time.time())

    def _run(self) -> None:
        # Plain JSON, not the client's models: building a model per event costs milliseconds (each model
        # copies the client configuration), and with tens of thousands of Jobs this reference watch
        # would fall behind the triggers it times.
        while True:
            try:
                resp = self.batch.list_job_for_all_namespaces(_preload_content=False)
                listed = json.loads(resp.data)
                for job in listed.get("items") or []:
                    self._record(job)
                self.ready.set()
                for ev in self.watch.stream(
                    self.batch.list_job_for_all_namespaces,
                    resource_version=listed["metadata"]["resourceVersion"],
                    timeout_seconds=3600,
                    deserialize=False,
                ):
                    if isinstance(ev.get("object"), dict):
                        self._record(ev["object"])
            except Exception:  # reconnect (relist); the benchmark's sandbox has no faults on
                time.sleep(0.2)

    def start(self) -> None:
        self.thread.start()
        self.ready.wait(30)


def _simulated_pod(job: Any) -> dict[str, Any]:
    """--simulate: the pod the Job controller would create for ``job`` (a V1Job), labelled and owned as
    the real controller does, so the triggers' pod watch sees it."""
    meta = job.metadata
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta.name}-pod",
            "labels": {
                "controller-uid": meta.uid,
                "batch.kubernetes.io/controller-uid": meta.uid,
                "job-name": meta.name,
                "batch.kubernetes.io/job-name": meta.name,
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta.name,
                    "uid": meta.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": CONTAINER, "image": "busybox", "command": ["true"]}],
        },
    }


def _finish_jobs_on_schedule(
    batch: Any, core: Any, durations: dict[tuple[str, str], int], started: float
) -> dict[str, float]:
    """--simulate: no kubelet and no Job controller. ``duration`` seconds after the triggers started, write
    what they would, in their order: the pod's Succeeded status (the kubelet), then the Job's
    ``SuccessCriteriaMet`` and ``Complete`` conditions (the Job controller), from a few threads."""
    import concurrent.futures

    schedule = sorted((started + seconds, ns, name) for (ns, name), seconds in durations.items())

    def finish(item: tuple[float, str, str]) -> None:
        at, ns, name = item
        time.sleep(max(0.0, at - time.time()))
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        terminated = {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}
        core.patch_namespaced_pod_status(
            f"{name}-pod",
            ns,
            {
                "status": {
                    "phase": "Succeeded",
                    "containerStatuses": [
                        {
                            "name": CONTAINER,
                            "ready": False,
                            "restartCount": 0,
                            "image": "busybox",
                            "imageID": "",
                            "state": {"terminated": terminated},
                        }
                    ],
                }
            },
        )
        condition = {"status": "True", "lastProbeTime": now, "lastTransitionTime": now}
        body = {
            "status": {
                "conditions": [
                    {"type": "SuccessCriteriaMet", "reason": "CompletionsReached", **condition},
                    {"type": "Complete", "reason": "CompletionsReached", **condition},
                ],
                "succeeded": 1,
                "startTime": now,
                "completionTime": now,
            }
        }
        batch.patch_namespaced_job_status(name, ns, body)
        written[f"{ns}/{name}"] = time.time()

    written: dict[str, float] = {}  # "namespace/name" -> when the Complete write was answered
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for _ in pool.map(finish, schedule):
            pass
    return written


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100.0 * (len(ordered) - 1))))
    return ordered[k]


def run_variant(
    variant: str,
    *,
    n: int,
    lo: int,
    hi: int,
    kubeconfig: str,
    admin: Any,
    api_client: Any,
    seed: int,
    namespaces: int = 1,
    simulate: bool = False,
    profile: str | None = None,
    ended: int = 0,
) -> dict[str, Any]:
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    spaces = [f"bench-{variant}-{k:02d}" for k in range(namespaces)]
    for namespace in spaces:
        try:
            core.create_namespace({"metadata": {"name": namespace}})
        except client.ApiException as e:
            if e.status != 409:
                raise
    rnd = random.Random(seed)
    # (namespace, name) -> seconds of sleep; Jobs dealt round-robin over the namespaces
    durations = {(spaces[i % namespaces], f"{variant}-{i:05d}"): rnd.randint(lo, hi) for i in range(n)}
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-trigger-{variant}-"))
    names_file, result_file = workdir / "names.json", workdir / "result.json"
    names_file.write_text(json.dumps([list(key) for key in durations]))
    env = dict(os.environ, KUBECONFIG=kubeconfig, AIRFLOW_HOME=str(workdir / "airflow"))
    proc = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--child",
            variant,
            "--kubeconfig",
            kubeconfig,
            "--names-file",
            str(names_file),
            "--result-file",
            str(result_file),
            *(["--profile", f"{profile}.{variant}"] if profile else []),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None and proc.stdin is not None
    if proc.stdout.readline().strip() != "imported":
        raise RuntimeError(f"{variant} child failed to start")

    observer = Observer(api_client, f"bench-{variant}-")
    observer.start()
    batch = client.BatchV1Api(api_client)
    created_at = time.monotonic()

    def create(item: tuple[tuple[str, str], int]) -> None:
        (namespace, name), seconds = item
        command = ["sleep", str(seconds)] if seconds else ["true"]
        job = batch.create_namespaced_job(
            namespace,
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": name},
                "spec": {
                    "backoffLimit": 0,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": CONTAINER, "image": "busybox", "command": command}],
                        }
                    },
                },
            },
            # The answer as a model only where it is read (building one costs the driver milliseconds).
            **({} if simulate else {"_preload_content": False}),
        )
        if simulate:  # the Job controller's pod, as it would create it (the kubelet is off: it stays Pending)
            core.create_namespaced_pod(namespace, _simulated_pod(job))

    import concurrent.futures

    # Ended Jobs beside the live ones: run by the Job controller to completion (with their Succeeded
    # pods) before the triggers start, so a shared watch's list holds them all, as in a namespace
    # that keeps its finished Jobs.
    finished = {(spaces[i % namespaces], f"ended-{i:05d}"): 0 for i in range(ended)}
    if finished:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for _ in pool.map(create, finished.items()):
                pass
        deadline = time.monotonic() + 600 + ended / 10
        keys = {f"{ns}/{name}" for ns, name in finished}
        while len(keys & observer.done.keys()) < len(keys):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{variant}: {len(keys - observer.done.keys())} of {ended} ended Jobs not complete in time"
                )
            time.sleep(0.5)
        print(f"  {variant}: {ended} ended Jobs in {time.monotonic() - created_at:.0f} s", flush=True)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for _ in pool.map(create, durations.items()):
            pass
    print(
        f"  {variant}: created {n} Jobs{' and their pods' if simulate else ''} in "
        f"{time.monotonic() - created_at:.0f} s",
        flush=True,
    )
    admin.reset_counters()
    started = time.time()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    written = _finish_jobs_on_schedule(batch, core, durations, started) if simulate else {}
    proc.wait(timeout=hi + 600)
    wall = time.time() - started
    counters = admin.counters()
    result = json.loads(result_file.read_text())
    latencies = []
    from_write: list[float] = []  # --simulate: from the Complete write's response (not clamped)
    observer_from_write: list[float] = []  # the reference watch's own delay after the write
    statuses: dict[str, int] = {}
    for name, ev in result["events"].items():
        statuses[ev["status"]] = statuses.get(ev["status"], 0) + 1
        if name in observer.done:
            latencies.append(max(0.0, ev["at"] - observer.done[name]))
        if name in written:
            from_write.append(ev["at"] - written[name])
            if name in observer.done:
                observer_from_write.append(observer.done[name] - written[name])

    # The driver's own writes (creating Jobs, and with --simulate their Complete conditions) are not the
    # triggers' requests.
    def driver(key: str) -> bool:
        return key.startswith("create ") or key in ("patch jobs/status", "patch pods/status")

    requests = sum(v for k, v in counters.items() if not driver(k))

    # clean up the variant's Jobs (Background) so the next variant's sandbox is not loaded by them
    def delete(key: tuple[str, str]) -> None:
        namespace, name = key
        try:
            batch.delete_namespaced_job(
                name, namespace, propagation_policy="Background", _preload_content=False
            )
        except client.ApiException:
            pass

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for _ in pool.map(delete, [*durations, *finished]):
            pass
    return {
        "variant": variant,
        "jobs": n,
        "ended": ended,
        "namespaces": namespaces,
        "statuses": statuses,
        "requests": requests,
        "request_breakdown": {k: v for k, v in sorted(counters.items()) if v and not driver(k)},
        "p50": statistics.median(latencies) if latencies else float("nan"),
        "p99": percentile(latencies, 99),
        "max": max(latencies) if latencies else float("nan"),
        "cpu_seconds": result["cpu_seconds"],
        "peak_rss_mib": result["peak_rss_mib"],
        "rss_at_start_mib": result.get("rss_at_start_mib"),
        "rss_at_end_mib": result.get("rss_at_end_mib"),
        "cache": result.get("cache"),
        "wall_seconds": wall,
        "gc": {k: result[k] for k in result if k.startswith("gc_")},
        "from_write": (
            {"p50": statistics.median(from_write), "p99": percentile(from_write, 99), "max": max(from_write)}
            if from_write
            else None
        ),
        "observer_from_write": (
            {
                "p50": statistics.median(observer_from_write),
                "p99": percentile(observer_from_write, 99),
                "max": max(observer_from_write),
            }
            if observer_from_write
            else None
        ),
        "loop_stalls": result.get("loop_stalls", []),
    }


def render(rows: list[dict[str, Any]], *, lo: int, hi: int, note: str = "") -> str:
    up = next(r for r in rows if r["variant"] == UPSTREAM)
    ours = next(r for r in rows if r["variant"] == OURS)
    per_job_up = up["requests"] / max(1, up["jobs"])
    per_job_ours = ours["requests"] / max(1, ours["jobs"])
    lines = [
        "## trigger",
        "",
        f"`bench/bench_trigger.py --jobs {ours['jobs']} --namespaces {ours['namespaces']}"
        f"{' --upstream-jobs ' + str(up['jobs']) if up['jobs'] != ours['jobs'] else ''}`: concurrent "
        f"deferred Jobs (`sleep` of {lo}-{hi} s, random) spread over {ours['namespaces']} namespaces, all "
        "triggers of a variant in one event loop in a child process (like one triggerer), the sandbox in "
        "its own process, both variants in the same run. Latency = TriggerEvent yielded - the Job's "
        "terminal condition seen by a separate watch.",
        "",
        "| variant | Jobs | API requests | per Job | detection p50 | p99 | max | triggerer CPU s | peak RSS MiB | results |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        label = (
            "upstream KubernetesJobTrigger (10.25.0)"
            if r["variant"] == UPSTREAM
            else "JobTrigger (shared watch)"
        )
        lines.append(
            f"| {label} | {r['jobs']} | {r['requests']} | {r['requests'] / max(1, r['jobs']):.2f} | "
            f"{r['p50']:.3f} s | {r['p99']:.3f} s | {r['max']:.3f} s | "
            f"{r['cpu_seconds']:.1f} | {r['peak_rss_mib']:.0f} | "
            + ", ".join(f"{k} {v}" for k, v in sorted(r["statuses"].items()))
            + " |"
        )
    p99_ok = ours["p99"] < 0.100
    rss_ok = ours["peak_rss_mib"] < 600
    lines += [
        "",
        f"Requests per Job: upstream {per_job_up:.1f}, ours {per_job_ours:.3f} "
        f"({per_job_up / max(per_job_ours, 1e-9):.0f}x fewer). Ours are the shared watches' LISTs and "
        "watch requests (two per namespace, plus reconnects), whatever the number of Jobs.",
        "",
        f"Aims: detection p99 below 100 ms - {'met' if p99_ok else 'NOT met'} "
        f"({ours['p99'] * 1000:.0f} ms); peak RSS below 600 MiB - {'met' if rss_ok else 'NOT met'} "
        f"({ours['peak_rss_mib']:.0f} MiB); requests independent of the Job count - see the per-Job column.",
        "",
        "Notes: the latency reference is a separate watch in the driver process, which receives the same "
        "watch event as our triggers, so our figures are our own processing delay (values below the "
        "observer's own delivery delay count as 0); upstream's are dominated by its 10 s GET period, and "
        "stretch beyond it when its hooks (a new ApiClient and aiohttp session per poll) saturate its "
        "event loop. RSS includes the Airflow imports both variants share. Upstream's trigger is built "
        "with `get_logs=False, do_xcom_push=False` (its XCom path waits pod by pod).",
        "",
    ]
    if note:
        lines += [note, ""]
    lines += [
        "Request breakdown: upstream "
        + ", ".join(f"{k} {v}" for k, v in up["request_breakdown"].items())
        + "; ours "
        + ", ".join(f"{k} {v}" for k, v in ours["request_breakdown"].items())
        + ".",
        "",
    ]
    write_lines = [
        f"{r['variant']} p50 {w['p50'] * 1000:.0f} ms, p99 {w['p99'] * 1000:.0f} ms, max {w['max'] * 1000:.0f} ms"
        for r in (up, ours)
        if (w := r.get("from_write"))
    ]
    if write_lines:
        observer = ours.get("observer_from_write") or {}
        lines += [
            "Latency from the driver's write of the Job's `Complete` condition being answered (a stricter "
            "reference: it adds the sandbox's watch delivery, and nothing is clamped): "
            + "; ".join(write_lines)
            + (
                f". The reference watch itself, in ours' run, saw the condition p50 {observer['p50'] * 1000:.0f} ms, "
                f"p99 {observer['p99'] * 1000:.0f} ms, max {observer['max'] * 1000:.0f} ms after that answer: "
                "the part of the tail that is the sandbox's delivery (and the driver's threads), not the "
                "triggerer's"
                if observer
                else ""
            )
            + ".",
            "",
        ]
    stall_lines = []
    for r in (up, ours):
        stalls = r.get("loop_stalls") or []
        late = [lag for at, lag in stalls if at >= lo]
        stall_lines.append(
            f"{r['variant']}: {len(stalls)} (longest {max((lag for _, lag in stalls), default=0) * 1000:.0f} ms), "
            f"{len(late)} of them after the first Jobs ended at {lo} s"
            + (f" (longest {max(late) * 1000:.0f} ms)" if late else "")
        )
    lines += [
        "Event-loop stalls over 100 ms in each triggerer (a 10 ms timer that fired late; an event arriving "
        "meanwhile waits): " + "; ".join(stall_lines) + ".",
        "",
    ]
    gc_lines = [
        f"{r['variant']}: {g['gc_full_collections']} full collections, longest "
        f"{g['gc_full_max_seconds'] * 1000:.0f} ms, {g['gc_full_total_seconds']:.1f} s in all"
        + (f", started at {', '.join(f'{t:g}' for t in g['gc_full_at'])} s" if g.get("gc_full_at") else "")
        + f", {g['gc_tracked_objects']:,} objects tracked at the end"
        for r in (up, ours)
        if (g := r.get("gc"))
    ]
    if gc_lines:
        lines += [
            "Python's cyclic garbage collector in each triggerer process (its full collections stop the "
            "loop; an event arriving meanwhile waits): " + "; ".join(gc_lines) + ".",
            "",
        ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- --live
LIVE_NAMESPACE = "bench-live"
LIVE_HEADING = "## Detection under live load"
LIVE_ANALYSIS = "**Where the tail was"


def write_keeping(target: Path, text: str, heading: str, *, sep: str, end: str) -> None:
    """Write ``text`` to ``target``, keeping what the file had from ``heading`` on (hand-written text or
    another run's section) after ``sep``; ``end`` closes the file when there is nothing to keep."""
    target.parent.mkdir(parents=True, exist_ok=True)
    kept = target.read_text().partition(heading)[2] if target.exists() else ""
    target.write_text(text + (f"{sep}{heading}{kept}" if kept else end))
    print(f"wrote {target}")


LIVE_NOTE = """One process, as measured: the sandbox (API server, Job controller, kubelet running each
container as a local process) in a thread, and one triggerer-like event loop running every JobTrigger
through the shared registry. The ended Jobs and their Succeeded pods are put in the sandbox's store before
the run, so the triggers' informers list them (the namespace's cache holds all of them). Each live Job runs
`true`; its trigger starts as soon as the Job's create is answered, as an operator defers. Detection = the
trigger's event - the moment the sandbox's store committed the Job's terminal condition (`time.time()` in
the sandbox thread, not the 1 s `lastTransitionTime`). Delivery = that commit - the moment a plain watch on
the Jobs (one aiohttp stream in the triggers' loop, no informer) received it. Requests are the sandbox's
counters from the first live create to the last event (creates left out; the plain watch is one of the
`watch jobs`); a list counts each page (500 items), so one initial list of 5,000+ Jobs is 11 `list jobs`.
The sandbox and the triggers share one GIL here: a stall of either delays both."""


def _ended_job(i: int, now: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """An ended Job and its Succeeded pod, as the Job controller and kubelet leave them."""
    import uuid

    name, uid = f"ended-{i:05d}", str(uuid.uuid4())
    labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": LIVE_NAMESPACE, "uid": uid, "creationTimestamp": now},
        "spec": {
            "backoffLimit": 0,
            "completions": 1,
            "parallelism": 1,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"restartPolicy": "Never", "containers": [{"name": CONTAINER, "image": "busybox"}]},
            },
        },
        "status": {
            "startTime": now,
            "completionTime": now,
            "succeeded": 1,
            "conditions": [
                {"type": t, "status": "True", "lastProbeTime": now, "lastTransitionTime": now}
                for t in ("SuccessCriteriaMet", "Complete")
            ],
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-x",
            "namespace": LIVE_NAMESPACE,
            "uid": str(uuid.uuid4()),
            "creationTimestamp": now,
            "labels": dict(labels, **{"job-name": name, "controller-uid": uid}),
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": True}
            ],
        },
        "spec": {"restartPolicy": "Never", "containers": [{"name": CONTAINER, "image": "busybox"}]},
        "status": {"phase": "Succeeded"},
    }
    return job, pod


def live_main(args: argparse.Namespace) -> int:
    """One process: the sandbox (Job controller + kubelet) in a thread, the triggers in this thread's loop."""
    from airflow_jobwatch_testing.sandbox.store import now_rfc3339
    from airflow_jobwatch_testing.sandbox.thread import SandboxThread

    n, ended, rate = args.live_jobs, args.live_ended, args.live_rate
    workdir = Path(tempfile.mkdtemp(prefix="bench-trigger-live-"))
    sandbox = SandboxThread(namespaces=("default", LIVE_NAMESPACE)).start()
    kubeconfig = sandbox.write_kubeconfig(workdir / "kubeconfig", namespace=LIVE_NAMESPACE)
    # The sandbox's internal moment each Job got its terminal condition (its store's commit, in the
    # sandbox thread): sub-millisecond, unlike the conditions' 1 s lastTransitionTime.
    terminal_at: dict[str, float] = {}

    def on_commit(event: Any) -> None:
        if (
            event.resource != "jobs"
            or event.type == "DELETED"
            or event.obj["metadata"]["name"] in terminal_at
        ):
            return
        for c in (event.obj.get("status") or {}).get("conditions") or []:
            if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
                terminal_at[event.obj["metadata"]["name"]] = time.time()

    def seed(sb: Any) -> None:
        now = now_rfc3339()
        for i in range(ended):
            job, pod = _ended_job(i, now)
            sb.store.commit("jobs", "ADDED", job)
            sb.store.commit("pods", "ADDED", pod)
        sb.store.listeners.append(on_commit)

    sandbox._call(seed)
    print(f"live: {ended} ended Jobs (and their pods) stored; {n} Jobs at {rate}/s ...", flush=True)
    sandbox.reset_counters()
    try:
        result = asyncio.run(_live_loop(sandbox.url, sandbox.token, kubeconfig, n, rate, args.live_command))
    finally:
        counters = sandbox.counters()
        sandbox.stop()
    detection = [result["events"][k] - terminal_at[k] for k in result["events"] if k in terminal_at]
    delivery = [result["delivered"][k] - terminal_at[k] for k in result["delivered"] if k in terminal_at]
    create_to_end = [terminal_at[k] - result["created"][k] for k in result["created"] if k in terminal_at]
    kinds = {"list": 0, "watch": 0, "get": 0}
    for key, count in counters.items():
        verb = key.split(" ", 1)[0]
        if verb in kinds:
            kinds[verb] += count
    row = {
        "jobs": n,
        "ended": ended,
        "rate": rate,
        "events": len(result["events"]),
        "statuses": result["statuses"],
        "detection_p50": percentile(detection, 50),
        "detection_p99": percentile(detection, 99),
        "detection_max": max(detection, default=float("nan")),
        "delivery_p50": percentile(delivery, 50),
        "delivery_p99": percentile(delivery, 99),
        "create_to_end_p50": percentile(create_to_end, 50),
        "requests": kinds,
        "counters": {k: v for k, v in sorted(counters.items()) if not k.startswith("create ")},
        "loop_stalls": result["stalls"],
        "wall": result["wall"],
        "cpu": result["cpu"],
    }
    print(json.dumps(row, indent=1))
    text = render_live(row, args)
    print(text)
    if not args.no_write:
        # the hand-written analysis below the figures (from LIVE_ANALYSIS on) is kept
        write_keeping(
            ROOT / "docs" / "benchmarks" / "trigger_live.md", text, LIVE_ANALYSIS, sep="\n\n", end="\n"
        )
    return 0


async def _live_loop(
    url: str, token: str, kubeconfig: str, n: int, rate: float, command: list[str]
) -> dict[str, Any]:
    import aiohttp

    from airflow_jobwatch.triggers.job import JobTrigger

    headers = {"Authorization": f"Bearer {token}"}
    events: dict[str, float] = {}
    statuses: dict[str, int] = {}
    delivered: dict[str, float] = {}
    created: dict[str, float] = {}
    stalls: list[float] = []

    async def observe(session: aiohttp.ClientSession) -> None:
        """A plain watch on the Jobs (no informer): when the sandbox delivers each terminal status."""
        params = {"watch": "1", "allowWatchBookmarks": "false", "timeoutSeconds": "3600"}
        async with session.get(f"{url}/apis/batch/v1/namespaces/{LIVE_NAMESPACE}/jobs", params=params) as r:
            async for line in r.content:
                at = time.time()
                ev = json.loads(line)
                obj = ev.get("object") or {}
                name = (obj.get("metadata") or {}).get("name", "")
                if name in delivered or not name.startswith("live-"):
                    continue
                for c in (obj.get("status") or {}).get("conditions") or []:
                    if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
                        delivered[name] = at

    async def monitor() -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            lag = time.perf_counter() - before - 0.01
            if lag > 0.1:
                stalls.append(round(lag, 3))

    async def one(name: str) -> None:
        trigger = JobTrigger(name, LIVE_NAMESPACE, config_file=kubeconfig)
        async for event in trigger.run():
            events[name] = time.time()
            status = str(event.payload.get("status"))
            statuses[status] = statuses.get(status, 0) + 1
            break

    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    async with aiohttp.ClientSession(headers=headers) as session:
        watcher = asyncio.create_task(observe(session))
        mon = asyncio.create_task(monitor())
        tasks = []

        async def create(i: int) -> None:
            name = f"live-{i:05d}"
            body = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": name},
                "spec": {
                    "backoffLimit": 0,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": CONTAINER, "image": "busybox", "command": command}],
                        }
                    },
                },
            }
            async with session.post(f"{url}/apis/batch/v1/namespaces/{LIVE_NAMESPACE}/jobs", json=body) as r:
                if r.status != 201:
                    raise RuntimeError(f"create {name}: {r.status} {await r.text()}")
            created[name] = time.time()
            tasks.append(asyncio.create_task(one(name)))  # as an operator defers right after the create

        creators = []
        for i in range(n):  # a steady rate, not a burst
            due = started + i / rate
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            creators.append(asyncio.create_task(create(i)))
        await asyncio.gather(*creators)
        async with asyncio.timeout(600):
            await asyncio.gather(*tasks)
        watcher.cancel()
        mon.cancel()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "events": events,
        "statuses": statuses,
        "delivered": delivered,
        "created": created,
        "stalls": stalls,
        "wall": time.monotonic() - started,
        "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
    }


def render_live(row: dict[str, Any], args: argparse.Namespace) -> str:
    req = row["requests"]
    return "\n".join(
        [
            LIVE_HEADING,
            "",
            f"`python bench/bench_trigger.py --live --live-jobs {row['jobs']} --live-ended {row['ended']} "
            f"--live-rate {row['rate']}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end).",
            "",
            "| measure | value |",
            "|---|---|",
            f"| Jobs created at a steady rate / ended Jobs already stored | {row['jobs']} at {row['rate']}/s / "
            f"{row['ended']} |",
            f"| trigger events (status) | {row['events']} ({row['statuses']}) |",
            f"| detection p50 / p99 / max (trigger event - sandbox's terminal commit) | "
            f"{row['detection_p50'] * 1000:.0f} ms / {row['detection_p99'] * 1000:.0f} ms / "
            f"{row['detection_max'] * 1000:.0f} ms |",
            f"| sandbox delivery p50 / p99 (terminal commit - plain watch receives it) | "
            f"{row['delivery_p50'] * 1000:.0f} ms / {row['delivery_p99'] * 1000:.0f} ms |",
            f"| Job create answered - terminal commit, p50 | {row['create_to_end_p50'] * 1000:.0f} ms |",
            f"| requests during the run: list / watch / get (sandbox counters) | {req['list']} / "
            f"{req['watch']} / {req['get']} |",
            f"| all non-create requests | {row['counters']} |",
            f"| event-loop stalls > 100 ms (count, max) | {len(row['loop_stalls'])}, "
            f"{max(row['loop_stalls'], default=0) * 1000:.0f} ms |",
            f"| process CPU (sandbox + triggers) / wall | {row['cpu']:.1f} s / {row['wall']:.1f} s |",
            "",
            LIVE_NOTE,
        ]
    )


SLOW_NAMESPACE = "bench-slow"
SLOW_HEADING = "### Jobs waiting for a slow Job controller"
SLOW_NOTE = """One process per Job count: the sandbox in a thread, its Job controller slowed to the given
number of pods per second in all (`pod_creation_rate`), every pod simulated (no host process); all Jobs are
created at once, each trigger started as soon as its Job's create is answered, in one triggerer-like event
loop through the shared registry. A Job waits up to N / rate seconds for its pod, with no event and no
status; past 5 s without a pod its trigger looks for a refusal. Requests are the sandbox's counters from
before the first create to the last trigger event, creates left out. `events` is the LISTs and WATCHes of
the namespace's events: the only requests that could grow with the number of waiting Jobs."""


def slow_main(args: argparse.Namespace) -> int:
    """Jobs waiting for a slow Job controller: requests at two (or more) Job counts."""
    rows = [_slow_run(n, args.slow_rate, args.slow_job_seconds) for n in args.slow_jobs]
    print(json.dumps(rows, indent=1))
    text = render_slow(rows, args)
    print(text)
    if not args.no_write:
        target = ROOT / "docs" / "benchmarks" / "trigger_slow.md"
        target.write_text(text + "\n")
        print(f"wrote {target}")
    return 0


def _slow_run(n: int, rate: float, seconds: int) -> dict[str, Any]:
    from airflow_jobwatch_testing.sandbox.thread import SandboxThread

    workdir = Path(tempfile.mkdtemp(prefix="bench-trigger-slow-"))
    sandbox = SandboxThread(namespaces=("default", SLOW_NAMESPACE), simulate_pods=True).start()
    kubeconfig = sandbox.write_kubeconfig(workdir / "kubeconfig", namespace=SLOW_NAMESPACE)
    sandbox.set_pod_creation_rate(rate)
    # When each Job's first pod was committed (wall clock, in the sandbox thread).
    pod_at: dict[str, float] = {}

    def on_commit(event: Any) -> None:
        if event.resource == "pods" and event.type == "ADDED":
            owner = ((event.obj.get("metadata") or {}).get("labels") or {}).get("job-name")
            if owner:
                pod_at.setdefault(owner, time.time())

    sandbox._call(lambda sb: sb.store.listeners.append(on_commit))
    print(f"slow controller: {n} Jobs, {rate} pods/s ...", flush=True)
    sandbox.reset_counters()
    try:
        result = asyncio.run(_slow_loop(sandbox.url, sandbox.token, kubeconfig, n, seconds))
    finally:
        counters = sandbox.counters()
        sandbox.stop()
    from airflow_jobwatch.triggers.notes import MISSING_PODS_FIRST_CHECK_SECONDS as grace

    created = result["created"]
    waits = [pod_at[k] - created[k] for k in created if k in pod_at]
    counted = {k: v for k, v in sorted(counters.items()) if not k.startswith("create ")}
    return {
        "jobs": n,
        "rate": rate,
        "statuses": result["statuses"],
        "wall": result["wall"],
        "waited_past_grace": sum(1 for w in waits if w > grace),
        "longest_wait": max(waits, default=0.0),
        "events_requests": sum(v for k, v in counted.items() if k.endswith(" events")),
        "requests": sum(counted.values()),
        "counters": counted,
    }


async def _slow_loop(url: str, token: str, kubeconfig: str, n: int, seconds: int) -> dict[str, Any]:
    import aiohttp

    from airflow_jobwatch.triggers.job import JobTrigger

    statuses: dict[str, int] = {}
    created: dict[str, float] = {}

    async def one(name: str) -> None:
        trigger = JobTrigger(name, SLOW_NAMESPACE, config_file=kubeconfig)
        async for event in trigger.run():
            status = str(event.payload.get("status"))
            statuses[status] = statuses.get(status, 0) + 1
            break

    started = time.monotonic()
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session:
        tasks: list[asyncio.Task[None]] = []

        async def create(i: int) -> None:
            name = f"slow-{i:05d}"
            body = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": name},
                "spec": {
                    "backoffLimit": 0,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {"name": CONTAINER, "image": "busybox", "command": ["sleep", str(seconds)]}
                            ],
                        }
                    },
                },
            }
            async with session.post(f"{url}/apis/batch/v1/namespaces/{SLOW_NAMESPACE}/jobs", json=body) as r:
                if r.status != 201:
                    raise RuntimeError(f"create {name}: {r.status} {await r.text()}")
            created[name] = time.time()
            tasks.append(asyncio.create_task(one(name)))

        await asyncio.gather(*(create(i) for i in range(n)))
        async with asyncio.timeout(600 + n):
            await asyncio.gather(*tasks)
    return {"statuses": statuses, "wall": time.monotonic() - started, "created": created}


def render_slow(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    counts = " ".join(str(r["jobs"]) for r in rows)
    lines = [
        SLOW_HEADING,
        "",
        f"`python bench/bench_trigger.py --slow-controller --slow-jobs {counts} --slow-rate {args.slow_rate}` "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f} at the end).",
        "",
        "| Jobs | pods/s | Jobs that waited > 5 s for their pod (longest wait) | results "
        "| events requests (list + watch) | all requests | per Job | wall s |",
        "|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['jobs']} | {r['rate']:g} | {r['waited_past_grace']} ({r['longest_wait']:.1f} s) | "
            f"{r['statuses']} | "
            f"{r['events_requests']} | {r['requests']} | {r['requests'] / r['jobs']:.2f} | {r['wall']:.1f} |"
        )
    lines += ["", "Requests by kind: " + "; ".join(f"{r['jobs']} Jobs: {r['counters']}" for r in rows), ""]
    lines.append(SLOW_NOTE)
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="50 Jobs of 5-20 s instead of 500 of 10-120 s")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument(
        "--namespaces", type=int, default=1, help="spread each variant's Jobs over N namespaces"
    )
    parser.add_argument(
        "--upstream-jobs",
        type=int,
        default=None,
        help="Jobs for upstream (default: --jobs); its largest survivable count",
    )
    parser.add_argument(
        "--note", default="", help="a sentence added to the report (e.g. why sizes were reduced)"
    )
    parser.add_argument(
        "--foreign",
        action="store_true",
        help="the foreign-objects run: triggerer RSS with and without projection (see foreign_main)",
    )
    parser.add_argument(
        "--simulate",
        action="store_true",
        help="no kubelet or Job controller: the driver writes each Job's Complete condition on schedule "
        "(the sandbox's kubelet runs every container as a host process, too many for 10,000 Jobs)",
    )
    parser.add_argument(
        "--simulated-pods",
        action="store_true",
        help="the sandbox's kubelet and Job controller run normally, on simulated pods (no host process; "
        "each `sleep N` is read as N seconds), so that 10,000 live Jobs fit on one machine",
    )
    parser.add_argument(
        "--ended-per-job",
        type=int,
        default=0,
        help="ended Jobs (and their pods) run to completion beside each live Job before the triggers start",
    )
    parser.add_argument("--rows-file", help="also write the measured rows (JSON) to this file")
    parser.add_argument("--min-seconds", type=int, default=None, help="shortest Job (default 10, quick 5)")
    parser.add_argument("--max-seconds", type=int, default=None, help="longest Job (default 120, quick 20)")
    parser.add_argument(
        "--live",
        action="store_true",
        help="detection under live load: sandbox with Job controller and kubelet in this process, "
        "ended Jobs stored first, then Jobs created at a steady rate with a trigger started after each create",
    )
    parser.add_argument("--live-jobs", type=int, default=1000)
    parser.add_argument("--live-ended", type=int, default=5000)
    parser.add_argument("--live-rate", type=float, default=38.0, help="Jobs created per second")
    parser.add_argument("--live-command", nargs="+", default=["true"], help="each live Job's command")
    parser.add_argument(
        "--slow-controller",
        action="store_true",
        help="Jobs waiting for a Job controller slowed to --slow-rate pods/s: requests at each --slow-jobs count",
    )
    parser.add_argument("--slow-jobs", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--slow-rate", type=float, default=10.0, help="pods per second, in all")
    parser.add_argument("--slow-job-seconds", type=int, default=1, help="how long each Job's pod runs")
    parser.add_argument(
        "--annotated",
        action="store_true",
        help="with --foreign: the foreign Jobs carry stored results; the projection now against keeping them",
    )
    parser.add_argument("--foreign-jobs", type=int, default=20000)
    parser.add_argument("--foreign-pods", type=int, default=50000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--only", choices=[UPSTREAM, OURS], help="run one variant (for profiling; the report needs both)"
    )
    parser.add_argument(
        "--profile", metavar="PATH", help="cProfile each triggerer child, stats to PATH.<variant>"
    )
    parser.add_argument("--no-write", action="store_true", help="do not write docs/benchmarks/trigger.md")
    parser.add_argument("--child", choices=[UPSTREAM, OURS], help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    parser.add_argument("--foreign-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--names-file", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    if args.foreign:
        return foreign_main(args)
    if args.live:
        return live_main(args)
    if args.slow_controller:
        return slow_main(args)

    from airflow_jobwatch.kube.cluster.client import ClusterConfig, sync_api_client
    from airflow_jobwatch_testing.sandbox.process import SandboxProcess

    n, lo, hi = (50, 5, 20) if args.quick else (500, 10, 120)
    n = args.jobs or n
    lo = args.min_seconds if args.min_seconds is not None else lo
    hi = args.max_seconds if args.max_seconds is not None else hi
    workdir = Path(tempfile.mkdtemp(prefix="bench-trigger-"))
    token = secrets.token_urlsafe(24)
    sandbox_args = ["--token", token] + (["--no-kubelet", "--no-job-controller"] if args.simulate else [])
    if args.simulated_pods:
        sandbox_args.append("--simulate-pods")
    sandbox = SandboxProcess(
        workdir / "kubeconfig", args=sandbox_args, log=workdir / "sandbox.log", admin_timeout=300
    )
    kubeconfig = str(sandbox.kubeconfig)
    sandbox.start()
    try:
        api_client = sync_api_client(ClusterConfig(config_file=kubeconfig))
        admin = sandbox.admin
        rows = []
        for i, variant in enumerate((UPSTREAM, OURS)):
            if args.only and variant != args.only:
                continue
            count = (args.upstream_jobs or n) if variant == UPSTREAM else n
            print(f"running {variant}: {count} Jobs of {lo}-{hi} s ...", flush=True)
            rows.append(
                run_variant(
                    variant,
                    n=count,
                    namespaces=args.namespaces,
                    simulate=args.simulate,
                    profile=args.profile,
                    lo=lo,
                    hi=hi,
                    kubeconfig=kubeconfig,
                    admin=admin,
                    api_client=api_client,
                    seed=args.seed + i,
                    ended=args.ended_per_job * count,
                )
            )
            if args.rows_file:
                Path(args.rows_file).write_text(json.dumps(rows, indent=1, default=str))
    finally:
        sandbox.stop(timeout=30)
    note = args.note
    if args.simulate:
        note = (
            "Run with `--simulate`: no kubelet and no Job controller; the driver creates each Job's pod "
            "(labelled and owned as the Job controller does) and, at the Job's scheduled end, writes the "
            "pod's `Succeeded` status (as the kubelet would) and then the Job's `SuccessCriteriaMet` and "
            "`Complete` conditions (as the Job controller would). The sandbox's kubelet runs each container "
            "as a host process, and 10,000 concurrent `sleep`s would exhaust the shared machine's process "
            "and file limits. The triggers see the same objects and watch events either way. " + note
        ).strip()
    if args.simulated_pods:
        note = (
            "Run with `--simulated-pods`: the sandbox's kubelet and Job controller run as usual, but every "
            "pod is simulated (no host process; its `sleep N` is read as N seconds), so the triggers see "
            "the Job controller's own pods and conditions. " + note
        ).strip()
    if args.only:  # a profiling run: no side-by-side report
        print(json.dumps(rows, indent=1, default=str))
        return 0
    text = render(rows, lo=lo, hi=hi, note=note)
    print(text)
    if not args.no_write:
        write_keeping(ROOT / "docs" / "benchmarks" / "trigger.md", text, FOREIGN_HEADING, sep="\n", end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
