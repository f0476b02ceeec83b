"""JobWatchExecutor vs the upstream cncf.kubernetes KubernetesExecutor, same sandbox, same faults.

    .venv/bin/python bench/bench_executor.py            # 200 tasks per executor
    .venv/bin/python bench/bench_executor.py --quick    # 40 tasks
    .venv/bin/python bench/bench_executor.py --throughput [--tasks 2000 --parallelism 200]

``--throughput`` is a second benchmark, without faults: N tasks at [core] parallelism P through
JobWatchExecutor and through upstream's KubernetesExecutor at its default
``worker_pods_creation_batch_size`` (1) and at 16, one after the other on the same sandbox. Reported:
``sync()`` duration p50 / p99 / max (the executor's share of each scheduler heartbeat), latency from a
workload taking an executor slot to its pod's create being answered, pods created per second, and the
watcher process's peak RSS (plus upstream's multiprocessing Manager, which it needs for its queues).

Each executor is driven the way the scheduler drives it (``queue_workload`` then ``heartbeat()`` every
0.2 s, events read from ``get_event_buffer()``), without a scheduler: N synthetic ``ExecuteTask``
workloads whose pods run ``sh -c "sleep S; date +%s.%N > END_FILE"`` (S in 2..5 s). Running full Airflow
for 2 x 200 tasks does not fit in this machine's time budget; the executors' own code (pod creation,
watcher processes, health checks, state handling) runs unmodified, except two upstream methods that
need task-instance rows in a metadata database: ``_should_create_pod_for_job`` is answered "yes" (and
so is JobWatchExecutor's own check that this scheduler still holds each launch)
(every workload is current) and its ``Succeeded -> state None -> DB lookup`` finds no row, so upstream
reports ``None`` for a success (the bench counts ``None`` as upstream's success).

Faults, identical for both executors, on the same sandbox subprocess:

* a 410 storm: the sandbox keeps a history window of 1 change, and every 2.5 s all watches are cut
  and two unrelated changes are made at once, so every watch resumed from its last resourceVersion
  is answered 410 Expired (a watch from a fresh list's resourceVersion works, as on a real server);
* every 10 s the watcher process is SIGKILLed and 2 running worker pods are force-deleted (no
  terminal status, as after node loss) before the executor's next heartbeat restarts the watcher.

Expected: a force-deleted pod's task ends ``failed``, every other task ``success``. Reported per
executor: right / wrong / stuck (no terminal event within the settle time), time until all tasks are
terminal, watcher restarts, API requests (sandbox counters), and latency from a pod's end (the time
its command wrote) to the executor's event, p50 / p99. Figures go to docs/benchmarks/executor.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from airflow_jobwatch_testing.pod_template import pod_template_yaml
from airflow_jobwatch_testing.sandbox.process import SandboxProcess

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # support.workloads: the synthetic workloads (tests/support/)
HEARTBEAT_SECONDS = 0.2
STORM_EVERY_SECONDS = 2.5
KILL_EVERY_SECONDS = 6.0
DELETIONS_PER_KILL = 2
# With no pod alive and no new event for this long, the run is over: what is not terminal is stuck.
SETTLE_SECONDS = 30.0


def _setup_env(home: Path, kubeconfig: Path, tasks: int, database_url: str | None = None) -> None:
    template = home / "pod_template.yaml"
    template.write_text(pod_template_yaml())
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # Slots: tasks run in waves, so the run spans many fault cycles (200 tasks -> ~30 s).
        "AIRFLOW__CORE__PARALLELISM": str(parallelism(tasks)),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url or f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
        "AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE": str(kubeconfig),
        "AIRFLOW__KUBERNETES_EXECUTOR__IN_CLUSTER": "False",
        "AIRFLOW__KUBERNETES_EXECUTOR__NAMESPACE": "default",
        "AIRFLOW__KUBERNETES_EXECUTOR__POD_TEMPLATE_FILE": str(template),
        "AIRFLOW__KUBERNETES_EXECUTOR__DELETE_WORKER_PODS": "True",
        "AIRFLOW__KUBERNETES_EXECUTOR__DELETE_WORKER_PODS_ON_FAILURE": "True",
        "AIRFLOW__KUBERNETES_EXECUTOR__WORKER_PODS_CREATION_BATCH_SIZE": "50",
        # The same engine settings a production deployment would use, except shorter backoff caps so
        # a 2-minute run is not dominated by 30 s waits (applies to our informer only; upstream has none).
        "AIRFLOW__JOBWATCH__BACKOFF_MAX_SECONDS": "5",
    }
    os.environ.update(env)
    subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        check=True,
        capture_output=True,
        env=os.environ,
    )


def parallelism(tasks: int) -> int:
    return max(8, tasks // 6)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    idx = min(len(values) - 1, max(0, round(q * (len(values) - 1))))
    return values[idx]


class _UpstreamRestartCounter:
    count = 0


def _make_executor(kind: str, job_id: str, *, real_database: bool = False) -> tuple[Any, Any]:
    """Return (executor, watcher_pid_getter). ``real_database``: every task has its row in Airflow's
    database, so both executors' own database checks run as in a scheduler."""
    if kind == "jobwatch":
        from airflow_jobwatch.executors import JobWatchExecutor, results

        if not real_database:
            # As upstream's _should_create_pod_for_job below: no task instance rows here, so every launch is
            # answered as this scheduler's (the database check before each create would find none).
            results.launches_held = lambda launches, job_id: dict.fromkeys(launches, True)  # type: ignore[assignment]
        ex = JobWatchExecutor()
        ex.job_id = job_id
        ex.start()
        return ex, lambda: ex.supervisor.child_pids().get("default")

    from airflow.providers.cncf.kubernetes.executors import kubernetes_executor_utils as utils
    from airflow.providers.cncf.kubernetes.executors.kubernetes_executor import KubernetesExecutor

    original = utils.AirflowKubernetesScheduler._make_kube_watcher

    def counting(self: Any, namespace: Any) -> Any:
        _UpstreamRestartCounter.count += 1
        return original(self, namespace)

    utils.AirflowKubernetesScheduler._make_kube_watcher = counting  # type: ignore[method-assign]
    ex = KubernetesExecutor()
    ex.job_id = job_id
    if not real_database:
        # Needs task-instance rows in the metadata DB; every synthetic workload is current.
        ex._should_create_pod_for_job = lambda task: True  # type: ignore[method-assign]
    ex.start()
    _UpstreamRestartCounter.count = 0
    return ex, lambda: ex.kube_scheduler.kube_watchers["default"].pid


def _noise_pod(kubeconfig: Path) -> Any:
    """A pod outside both executors' selectors whose annotation each storm bumps: it moves the
    resourceVersion past the history window while the watches are cut, so every resumed watch gets 410."""
    from kubernetes.client import CoreV1Api

    from airflow_jobwatch.kube.cluster.client import ClusterConfig, sync_api_client

    core = CoreV1Api(sync_api_client(ClusterConfig(config_file=str(kubeconfig))))
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bench-noise", "labels": {"app": "bench-noise"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "x", "command": ["sleep", "3600"]}],
        },
    }
    try:
        core.create_namespaced_pod("default", body)
    except Exception:
        pass  # already there from the previous executor's run

    def bump(tick: int) -> None:
        core.patch_namespaced_pod(
            "bench-noise", "default", {"metadata": {"annotations": {"tick": str(tick)}}}
        )

    return bump


def run_one(
    kind: str, *, tasks: int, admin: Any, job_id: str, end_dir: Path, seed: int, kubeconfig: Path
) -> dict[str, Any]:
    import random

    from support.workloads import make_workload

    rng = random.Random(seed)
    bump = _noise_pod(kubeconfig)
    tick = 0
    # History window 1: a watch resumed from any resourceVersion but the newest is answered 410 Expired.
    admin.fault("set_history_window", n=1)
    admin.reset_counters()
    ex, watcher_pid = _make_executor(kind, job_id)
    run_id = f"bench_{kind}"
    durations = {f"t{i:03d}": rng.choice([2, 3, 4, 5]) for i in range(tasks)}
    keys = {}
    from unittest import mock

    for task_id, seconds in durations.items():
        end_file = end_dir / f"{kind}-{task_id}.end"
        w = make_workload(
            dag_id="bench",
            task_id=task_id,
            run_id=run_id,
            command=f"sleep {seconds}; date +%s.%N > {end_file}",
        )
        keys[w.ti.key] = task_id
        ex.queue_workload(w, session=mock.sentinel.no_session)

    deleted: set[str] = set()
    events: dict[str, tuple[Any, float]] = {}
    started = time.monotonic()
    next_storm = started + STORM_EVERY_SECONDS
    next_kill = started + KILL_EVERY_SECONDS
    all_done_at: float | None = None
    last_progress = started
    worker_label = job_id
    while True:
        now = time.monotonic()
        ex.heartbeat()
        for key, (state, _info) in ex.get_event_buffer().items():
            task_id = keys.get(key)
            s = str(state) if state is not None else "None"
            if task_id is None or s in ("queued", "running"):
                continue
            if task_id not in events:
                events[task_id] = (s, time.time())
                last_progress = now
        if len(events) == tasks and all_done_at is None:
            all_done_at = now
            break
        pods = [
            p
            for p in admin.objects("pods", "default")
            if p["metadata"].get("labels", {}).get("airflow-worker") == worker_label
        ]
        live = [p for p in pods if p.get("status", {}).get("phase") in ("Pending", "Running", None)]
        if now >= next_storm:
            next_storm = now + STORM_EVERY_SECONDS
            admin.fault("drop_watches")
            for _ in range(2):
                tick += 1
                bump(tick)
        if now >= next_kill:
            next_kill = now + KILL_EVERY_SECONDS
            pid = watcher_pid()
            running = [p for p in live if p.get("status", {}).get("phase") == "Running"]
            if pid and running:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                time.sleep(0.1)
                for pod in running[:DELETIONS_PER_KILL]:
                    meta = pod["metadata"]
                    if admin.fault("force_delete_pod", namespace=meta["namespace"], name=meta["name"]):
                        deleted.add(meta["annotations"]["task_id"])
        if live:
            last_progress = now
        if now - last_progress > SETTLE_SECONDS or now - started > 900:
            break
        time.sleep(HEARTBEAT_SECONDS)

    elapsed = (all_done_at or time.monotonic()) - started
    # Keys still queued to the executor, or (JobWatchExecutor) whose record still waits for its pod create.
    waiting = [r.key for r in ex.records.pending()] if hasattr(ex, "records") else []
    never_launched = {keys[k] for k in list(ex.queued_tasks) + waiting if k in keys}
    if kind == "jobwatch":
        restarts = ex.supervisor.counters.restarts
        relists = ex.supervisor.counters.relists
    else:
        restarts = _UpstreamRestartCounter.count
        relists = None
    try:
        ex.end()
    except Exception as err:  # upstream's end() may fail on its manager queues after kills
        print(f"{kind}: end() raised {err!r}", file=sys.stderr)
    counters = admin.counters()

    right = wrong = stuck = 0
    latencies: list[float] = []
    success_states = {"success", "None"} if kind == "upstream" else {"success"}
    for task_id in durations:
        expected_fail = task_id in deleted
        got = events.get(task_id)
        if got is None:
            stuck += task_id not in never_launched
            continue
        state, at = got
        ok = (state == "failed") if expected_fail else (state in success_states)
        right += ok
        wrong += not ok
        end_file = end_dir / f"{kind}-{task_id}.end"
        if not expected_fail and end_file.exists():
            try:
                latencies.append(at - float(end_file.read_text().strip()))
            except ValueError:
                pass
    return {
        "executor": "JobWatchExecutor" if kind == "jobwatch" else "upstream KubernetesExecutor",
        "tasks": tasks,
        "deleted_in_gap": len(deleted),
        "right": right,
        "wrong": wrong,
        "stuck": stuck,
        "never_launched": len(never_launched),
        "all_terminal_s": round(elapsed, 1) if all_done_at else None,
        "watcher_restarts": restarts,
        "relists": relists,
        "api_requests": sum(counters.values()),
        "list_watch_requests": sum(v for k, v in counters.items() if k.startswith(("list ", "watch "))),
        "latency_p50_s": _round(_pct(latencies, 0.5)),
        "latency_p99_s": _round(_pct(latencies, 0.99)),
    }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def _round3(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


COLUMNS = [
    ("executor", "executor"),
    ("tasks", "tasks"),
    ("deleted_in_gap", "pods deleted while watcher down"),
    ("right", "right terminal state"),
    ("wrong", "wrong state"),
    ("stuck", "stuck: pod gone, no terminal event"),
    ("never_launched", "never launched (slots leaked)"),
    ("all_terminal_s", "time until all terminal (s)"),
    ("watcher_restarts", "watcher restarts"),
    ("relists", "relists"),
    ("api_requests", "API requests"),
    ("list_watch_requests", "list+watch requests"),
    ("latency_p50_s", "pod end -> event p50 (s)"),
    ("latency_p99_s", "p99 (s)"),
]


def render(rows: list[dict[str, Any]], *, quick: bool) -> str:
    head = "| " + " | ".join(title for _, title in COLUMNS) + " |"
    sep = "|" + "---|" * len(COLUMNS)
    lines = [head, sep]
    for row in rows:
        lines.append("| " + " | ".join("—" if row[k] is None else str(row[k]) for k, _ in COLUMNS) + " |")
    mode = "quick mode" if quick else "full run"
    summary = []
    for row in rows:
        verdict = (
            f"all {row['tasks']} terminal in {row['all_terminal_s']} s"
            if row["all_terminal_s"] is not None
            else f"{row['stuck'] + row['never_launched']} never got a terminal event"
        )
        summary.append(
            f"* **{row['executor']}**: {row['right']}/{row['tasks']} right, {row['wrong']} wrong, {verdict}; "
            f"{row['deleted_in_gap']} pods deleted while its watcher was down, "
            f"{row['watcher_restarts']} watcher (re)starts."
        )
    return "\n".join(
        [
            "## Executor: JobWatchExecutor vs upstream KubernetesExecutor",
            "",
            f"`bench/bench_executor.py` ({mode}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}). Both executors "
            "on the same sandbox subprocess, driven like the scheduler drives them (heartbeat every "
            f"{HEARTBEAT_SECONDS} s) with synthetic workloads whose pods sleep 2-5 s, run with [core] parallelism = max(8, tasks/6) so they come in waves; faults for both: a 410 storm "
            f"(history window of 1 change; every {STORM_EVERY_SECONDS} s all watches are cut and the "
            "resourceVersion moved on, so every resumed watch gets 410 Expired), and every "
            f"{KILL_EVERY_SECONDS:.0f} s the watcher process SIGKILLed with {DELETIONS_PER_KILL} running pods "
            "force-deleted before the next heartbeat restarts it. A force-deleted pod's task must end `failed`, "
            f"every other `success` (upstream reports `None` = look up the DB, counted as success). Stuck = no "
            f"terminal event although no pod has been alive for {SETTLE_SECONDS:.0f} s: in Airflow 3 each is an "
            "executor slot held for good; when all slots leak, the remaining tasks are never launched (they would "
            "wait for [scheduler] task_queued_timeout, 600 s by default). Time until all terminal is empty when "
            "that never happened.",
            "",
            *lines,
            "",
            *summary,
            "",
            "Why: upstream's watcher dies on every broken stream or 410 and restarts from resourceVersion "
            '"0", which replays only the pods that still exist, so a pod deleted while no watcher ran is never '
            "reported and its task keeps an executor slot. JobWatchExecutor's informer relists inside the child "
            "(a 410 is not a crash), and after a watcher restart the parent checks every pod it still tracks "
            "that is missing from the new child's first list (GET, 404 -> `failed`/`Deleted`). A child that "
            "had synced and run >= 5 s is replaced at once; only early deaths back off.",
            "",
            "Latency: from the time the pod's command wrote its end (`date +%s.%N`) to the heartbeat at which "
            "the executor put the event in its buffer (so it includes the sandbox kubelet's status update and up "
            f"to one {HEARTBEAT_SECONDS} s heartbeat). The upstream executor was driven without a metadata "
            "database row per task: `_should_create_pod_for_job` answered True, and its success lookup found no "
            "row (state None). Single machine (2 cores, shared): compare the columns, not absolute times.",
            "",
        ]
    )


# --- throughput -----------------------------------------------------------------------------------


def _rss_kib(pid: int | None) -> int:
    if not pid:
        return 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _private_kib(pid: int | None) -> int:
    """A process's private memory (Private_Clean + Private_Dirty of smaps_rollup): what it alone holds,
    unlike RSS, which also counts the pages a forked child still shares with its parent."""
    if not pid:
        return 0
    total = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return total


def run_throughput(
    variant: str,
    *,
    tasks: int,
    parallelism: int,
    admin: Any,
    job_id: str,
    seconds: float,
    max_seconds: float | None = None,
    deadline_s: float | None = None,
    pod_shapes: int = 0,
    database: Any = None,
) -> dict[str, Any]:
    """One executor, no faults: how fast it turns slots into pods, and what each heartbeat costs.

    ``database``: an engine on a database ``airflow db migrate`` made: each task gets its QUEUED row there,
    queued by ``job_id`` under a pre-assigned launch id, and both executors' database checks run for real.

    Each task's command (``sleep D``, read by simulated pods) is set by its ``pod_override``, so tasks
    with different durations have different pods beyond their per-task values. ``pod_shapes`` > 1 draws
    the durations from that many evenly spaced values (tasks of a few kinds, as a DAG's tasks are);
    0 draws each to 0.1 s (nearly every task its own pod shape).

    With ``deadline_s`` the run stops after that long even if tasks are left (an executor that cannot
    get through the work in time is measured on what it did); the row says how many ended.
    """
    from unittest import mock

    from kubernetes.client import CoreV1Api
    from support.workloads import make_workload

    kind = "jobwatch" if variant.startswith("jobwatch") else "upstream"
    batch = {"jobwatch": 16, "jobwatch-default": 1, "upstream-default": 1, "upstream-16": 16}[variant]
    os.environ["AIRFLOW__KUBERNETES_EXECUTOR__WORKER_PODS_CREATION_BATCH_SIZE"] = str(batch)
    os.environ["AIRFLOW__KUBERNETES_EXECUTOR__DELETE_WORKER_PODS"] = "True"
    admin.fault("set_history_window", n=100_000)
    admin.fault("record_pod_ends")
    admin.reset_counters()
    run_id = f"tp_{variant}_{tasks}_{job_id}"
    created_at: dict[str, float] = {}  # task_id -> create answered (wall clock)
    original_create = CoreV1Api.create_namespaced_pod

    def timed_create(self: Any, namespace: Any, body: Any, **kwargs: Any) -> Any:
        result = original_create(self, namespace, body, **kwargs)
        meta = body.get("metadata") if isinstance(body, dict) else body.metadata
        annotations = (meta.get("annotations") if isinstance(meta, dict) else meta.annotations) or {}
        created_at.setdefault(annotations.get("task_id", "?"), time.time())
        return result

    CoreV1Api.create_namespaced_pod = timed_create  # type: ignore[method-assign]
    try:
        ex, watcher_pid = _make_executor(kind, job_id, real_database=database is not None)
        ex.parallelism = parallelism
        accepted_at: dict[str, float] = {}
        original_process = ex._process_workloads

        def timed_process(workloads: Any) -> Any:
            now = time.time()
            for w in workloads:
                accepted_at.setdefault(w.ti.task_id, now)
            return original_process(workloads)

        ex._process_workloads = timed_process
        sync_durations: list[float] = []
        original_sync = ex.sync

        profiler = None
        if os.environ.get("JOBWATCH_BENCH_PROFILE"):  # cProfile of sync() only, stats to that path
            import cProfile

            profiler = cProfile.Profile()

        def timed_sync() -> None:
            t0 = time.perf_counter()
            if profiler is not None:
                profiler.enable()
            original_sync()
            if profiler is not None:
                profiler.disable()
            sync_durations.append(time.perf_counter() - t0)

        ex.sync = timed_sync
        keys = {}
        workloads = []
        rng = random.Random(11)  # the same durations for every executor
        own_rss_before = _rss_kib(os.getpid())
        peak_own = own_rss_before
        for i in range(tasks):
            if max_seconds is None:
                duration = seconds
            elif pod_shapes > 1:
                step = (max_seconds - seconds) / (pod_shapes - 1)
                duration = round(seconds + step * rng.randrange(pod_shapes), 1)
            else:
                duration = round(rng.uniform(seconds, max_seconds), 1)
            w = make_workload(
                dag_id="bench_tp", task_id=f"t{i:05d}", run_id=run_id, command=f"sleep {duration}"
            )
            keys[w.ti.key] = w.ti.task_id
            workloads.append(w)
        if database is not None:
            from datetime import UTC, datetime

            from support.airflow_rows import write_queued

            for w in workloads:
                w.ti.external_executor_id = f"launch-{w.ti.task_id}"  # as Airflow 3.2.2+ pre-assigns it
            write_queued(
                database,
                [(w.ti.key, w.ti.external_executor_id) for w in workloads],
                queued_by=int(job_id),
                jobs={int(job_id): datetime.now(UTC)},
                ids={w.ti.key: w.ti.id for w in workloads},
            )
        for w in workloads:
            ex.queue_workload(w, session=mock.sentinel.no_session)
        done: set[str] = set()
        event_at: dict[str, float] = {}  # task_id -> its terminal event left get_event_buffer()
        peak_watcher = peak_manager = peak_watcher_private = 0
        started = time.monotonic()
        cpu_started = time.process_time()  # this process: the scheduler side (not the watcher processes)
        last_progress = started
        peak_running = 0  # pods created whose task has not ended: the tasks running at once
        while len(done) < tasks:
            if deadline_s is not None and time.monotonic() - started > deadline_s:
                break
            ex.heartbeat()
            for key, (state, _info) in ex.get_event_buffer().items():
                s = str(state) if state is not None else "None"
                if key in keys and s not in ("queued", "running"):
                    done.add(keys[key])
                    event_at.setdefault(keys[key], time.time())
                    last_progress = time.monotonic()
            peak_running = max(peak_running, len(created_at) - len(done))
            if len(sync_durations) % 10 == 0:
                peak_own = max(peak_own, _rss_kib(os.getpid()))
                peak_watcher = max(peak_watcher, _rss_kib(watcher_pid()))
                peak_watcher_private = max(peak_watcher_private, _private_kib(watcher_pid()))
                manager = getattr(ex, "_manager", None)
                peak_manager = max(
                    peak_manager, _rss_kib(getattr(getattr(manager, "_process", None), "pid", None))
                )
            # No event for longer than a pod lasts (plus the settle time): what is not terminal is stuck.
            if time.monotonic() - last_progress > SETTLE_SECONDS + (max_seconds or 0.0):
                break
            time.sleep(HEARTBEAT_SECONDS)
        elapsed = time.monotonic() - started
        scheduler_cpu = time.process_time() - cpu_started
        if profiler is not None:
            profiler.dump_stats(f"{os.environ['JOBWATCH_BENCH_PROFILE']}.{variant}.{tasks}")
        try:
            ex.end()
        except Exception as err:
            print(f"{variant}: end() raised {err!r}", file=sys.stderr)
    finally:
        CoreV1Api.create_namespaced_pod = original_create  # type: ignore[method-assign]
    latencies = [created_at[t] - accepted_at[t] for t in created_at if t in accepted_at]
    ended_at = {
        e["annotations"].get("task_id", ""): e["at"]
        for e in admin.fault("pod_ends")
        if e["annotations"].get("run_id") == run_id
    }
    end_to_event = [event_at[t] - ended_at[t] for t in event_at if t in ended_at]
    creates = sorted(created_at.values())
    rate = (
        (len(creates) - 1) / (creates[-1] - creates[0])
        if len(creates) > 1 and creates[-1] > creates[0]
        else None
    )
    # The launch burst: the first `parallelism` creates, while free slots do not bound the rate.
    burst = creates[:parallelism]
    burst_rate = (
        (len(burst) - 1) / (burst[-1] - burst[0]) if len(burst) > 1 and burst[-1] > burst[0] else None
    )
    ms = [d * 1000 for d in sync_durations]
    counters = admin.counters()
    by_verb: dict[str, int] = {}
    for name, count in counters.items():
        verb = name.split(" ", 1)[0]
        by_verb[verb] = by_verb.get(verb, 0) + count
    # Per task launched (all of them, unless a deadline stopped the run first).
    per_task = {v: round(by_verb.get(v, 0) / max(len(created_at), 1), 2) for v in VERBS}
    return {
        **{f"req_{v}": n for v, n in per_task.items()},
        "scheduler_rss_growth_kib_per_running": round((peak_own - own_rss_before) / max(parallelism, 1), 1),
        "executor": {
            "jobwatch": "JobWatchExecutor (batch 16)",
            "jobwatch-default": "JobWatchExecutor, worker_pods_creation_batch_size=1 (default)",
            "upstream-default": "upstream, worker_pods_creation_batch_size=1 (default)",
            "upstream-16": "upstream, worker_pods_creation_batch_size=16",
        }[variant],
        "tasks": tasks,
        "parallelism": parallelism,
        "terminal": len(done),
        "launched": len(created_at),
        "peak_running": peak_running,
        "elapsed_s": round(elapsed, 1),
        "sync_p50_ms": _round(_pct(ms, 0.5)),
        "sync_p99_ms": _round(_pct(ms, 0.99)),
        "sync_max_ms": _round(max(ms) if ms else None),
        "slot_to_pod_p50_s": _round(_pct(latencies, 0.5)),
        "slot_to_pod_p99_s": _round(_pct(latencies, 0.99)),
        "pods_per_s": _round(rate),
        "burst_pods_per_s": _round(burst_rate),
        "scheduler_cpu_ms_per_launch": _round(scheduler_cpu * 1000 / max(len(created_at), 1)),
        "watcher_rss_mib": round(peak_watcher / 1024, 1),
        "watcher_private_mib": round(peak_watcher_private / 1024, 1),
        "load": round(os.getloadavg()[0], 1),
        "end_to_event_p50_s": _round3(_pct(end_to_event, 0.5)),
        "end_to_event_p99_s": _round3(_pct(end_to_event, 0.99)),
        "manager_rss_mib": round(peak_manager / 1024, 1) if kind == "upstream" else None,
    }


VERBS = ("list", "watch", "get", "create", "patch", "delete")

TP_COLUMNS = [
    ("executor", "executor"),
    ("terminal", "tasks ended"),
    ("elapsed_s", "all ended (s)"),
    ("sync_p50_ms", "sync() p50 (ms)"),
    ("sync_p99_ms", "sync() p99 (ms)"),
    ("sync_max_ms", "sync() max (ms)"),
    ("slot_to_pod_p50_s", "slot -> pod created p50 (s)"),
    ("slot_to_pod_p99_s", "p99 (s)"),
    ("pods_per_s", "pods created / s"),
    ("watcher_rss_mib", "watcher peak RSS (MiB)"),
    ("manager_rss_mib", "upstream Manager RSS (MiB)"),
]
SCALE_COLUMNS = [
    TP_COLUMNS[0],
    ("launched", "tasks launched"),
    TP_COLUMNS[1],
    ("peak_running", "peak running at once"),
    *TP_COLUMNS[2:6],
    ("pods_per_s", "pods created / s"),
    ("burst_pods_per_s", "launch burst pods / s"),
    ("scheduler_cpu_ms_per_launch", "scheduler CPU / task launched (ms)"),
    ("end_to_event_p50_s", "pod end -> event p50 (s)"),
    ("end_to_event_p99_s", "p99 (s)"),
    ("watcher_private_mib", "watcher peak private (MiB)"),
    ("watcher_rss_mib", "watcher peak RSS (MiB)"),
    ("scheduler_rss_growth_kib_per_running", "scheduler RSS growth / running task (KiB)"),
    *((f"req_{v}", f"{v} / task") for v in VERBS),
    ("load", "machine load (1 min) at end"),
]


def render_throughput(rows: list[dict[str, Any]], *, tasks: int, parallelism: int, seconds: float) -> str:
    head = "| " + " | ".join(title for _, title in TP_COLUMNS) + " |"
    sep = "|" + "---|" * len(TP_COLUMNS)
    lines = [head, sep]
    for row in rows:
        lines.append("| " + " | ".join("—" if row[k] is None else str(row[k]) for k, _ in TP_COLUMNS) + " |")
    ours = next((r for r in rows if r["executor"].startswith("JobWatch")), None)
    base = next((r for r in rows if "default" in r["executor"]), None)
    ratio = ""
    if ours and base and ours["pods_per_s"] and base["pods_per_s"]:
        ratio = (
            f"Launch throughput: JobWatchExecutor {ours['pods_per_s']} pods/s vs upstream's default "
            f"{base['pods_per_s']} pods/s ({ours['pods_per_s'] / base['pods_per_s']:.1f}x)."
        )
    return "\n".join(
        [
            "## Executor throughput: sync() cost and launch rate",
            "",
            f"`bench/bench_executor.py --throughput --tasks {tasks} --parallelism {parallelism}` "
            f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}). No faults. {tasks} tasks whose pods "
            f"sleep {seconds:g} s, [core] parallelism {parallelism}, heartbeat every {HEARTBEAT_SECONDS} s, "
            "each executor in turn on the same sandbox subprocess, in one run. `sync()` is timed around the "
            "executor's own `sync()` inside `heartbeat()`; slot -> pod created is from `_process_workloads` "
            "(the workload takes a slot) to the answer of its pod's create; pods/s is creates over the span "
            "from first to last create; RSS is the watcher process's peak (upstream also runs a "
            "multiprocessing Manager process for its queues, shown apart).",
            "",
            *lines,
            "",
            ratio,
            "",
        ]
    )


RELIABILITY_MARKER = "## Executor: JobWatchExecutor vs upstream"
THROUGHPUT_MARKER = "## Executor throughput"


def write_section(out: Path, text: str, marker: str) -> None:
    """Write the section of the fragment whose heading starts with ``marker``, keeping the others.

    Sections are the ``## `` headings of docs/benchmarks/executor.md: the reliability run, the
    throughput run (this script) and the watcher's memory (bench_watcher_memory.py). A section already
    there is replaced in place; a new one is appended.
    """
    existing = out.read_text() if out.exists() else ""
    sections: list[str] = []
    for line in existing.splitlines(keepends=True):
        if line.startswith("## ") or not sections:
            sections.append("")
        sections[-1] += line
    sections = [s for s in sections if s.strip()]
    for i, section in enumerate(sections):
        if section.startswith(marker):
            sections[i] = text
            break
    else:
        sections.append(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n\n".join(s.strip() for s in sections) + "\n")
    print(f"wrote {out}")


def write_fragment(out: Path, text: str, *, throughput: bool) -> None:
    """Write the reliability or the throughput section, keeping the other sections as they are."""
    write_section(out, text, THROUGHPUT_MARKER if throughput else RELIABILITY_MARKER)


def main_throughput(tasks: int, parallelism: int, seconds: float, out: Path) -> None:
    home = Path(tempfile.mkdtemp(prefix="jobwatch-bench-executor-tp-"))
    sandbox = SandboxProcess(home / "kubeconfig", log=home / "sandbox.log")
    try:
        os.environ["AIRFLOW_HOME"] = str(home)
        sandbox.start()
        admin, kubeconfig = sandbox.admin, sandbox.kubeconfig
        _setup_env(home, kubeconfig, tasks)
        rows = []
        for i, variant in enumerate(["jobwatch", "upstream-default", "upstream-16"]):
            print(f"throughput: {variant} with {tasks} tasks at parallelism {parallelism} ...", flush=True)
            rows.append(
                run_throughput(
                    variant,
                    tasks=tasks,
                    parallelism=parallelism,
                    admin=admin,
                    job_id=str(201 + i),
                    seconds=seconds,
                )
            )
            print(rows[-1], flush=True)
        text = render_throughput(rows, tasks=tasks, parallelism=parallelism, seconds=seconds)
        print()
        print(text)
        write_fragment(out, text, throughput=True)
    finally:
        try:
            sandbox.stop(timeout=15)
        except Exception:
            pass
        shutil.rmtree(home, ignore_errors=True)


SCALE_MARKER = "## Executor at scale"
DEFAULT_OUT = str(REPO / "docs" / "benchmarks" / "executor.md")


def render_scale(results: list[tuple[int, list[dict[str, Any]]]], *, low: float, high: float) -> str:
    cols = SCALE_COLUMNS
    head = "| tasks | " + " | ".join(title for _, title in cols) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 1)]
    for tasks, rows in results:
        for row in rows:
            cells = ["—" if row.get(k) is None else str(row[k]) for k, _ in cols]
            lines.append(f"| {tasks} | " + " | ".join(cells) + " |")
    return "\n".join(
        [
            "## Executor at scale: simulated pods, cost per task as the count grows",
            "",
            f"`bench/bench_executor.py --scale --scale-tasks N` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}). "
            f"N tasks at [core] parallelism N/2 on simulated sandbox pods (no host process) of {low:g}-{high:g} s "
            "(the same durations for each executor), both executors in turn on the same sandbox subprocess with "
            "the same client settings, each executor in a fresh driver process. Requests per task are the "
            "sandbox's counters over the run, by verb. Pod end -> event is the moment the sandbox committed "
            "the pod's terminal phase to the moment its task's terminal state left `get_event_buffer()` "
            "(read every 0.2 s heartbeat, as the scheduler does). Watcher private memory is the watcher "
            "process's Private_Clean + Private_Dirty (pages it shares with the scheduler it was forked from "
            "are not counted). Scheduler RSS growth is the driver process's peak RSS minus its RSS before the "
            "run, over the parallelism.",
            "",
            *lines,
            "",
        ]
    )


def main_scale(
    counts: list[int],
    low: float,
    high: float,
    out: Path,
    variants: list[str],
    deadline: float | None = None,
    pod_shapes: int = 0,
) -> None:
    home = Path(tempfile.mkdtemp(prefix="jobwatch-bench-executor-scale-"))
    sandbox = SandboxProcess(
        home / "kubeconfig", log=home / "sandbox.log", args=["--simulate-pods", "--history-window", "100000"]
    )
    results: list[tuple[int, list[dict[str, Any]]]] = []
    try:
        os.environ["AIRFLOW_HOME"] = str(home)
        sandbox.start()
        kubeconfig = sandbox.kubeconfig
        _setup_env(home, kubeconfig, max(counts))
        for n, tasks in enumerate(counts):
            rows = []
            for i, variant in enumerate(variants):
                print(f"scale: {variant} with {tasks} tasks at parallelism {tasks // 2} ...", flush=True)
                # Each executor in a fresh process, so that neither pays the other's first-time growth
                # (imports, client, allocator) in its memory figures.
                result_file = home / f"result-{tasks}-{variant}.json"
                subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--scale-child",
                        variant,
                        "--tasks",
                        str(tasks),
                        "--kubeconfig",
                        str(kubeconfig),
                        "--job-id",
                        str(301 + 10 * n + i),
                        "--min-seconds",
                        str(low),
                        "--max-seconds",
                        str(high),
                        "--result-file",
                        str(result_file),
                        *(["--scale-deadline", str(deadline)] if deadline else []),
                        "--pod-shapes",
                        str(pod_shapes),
                    ],
                    check=True,
                    env=os.environ,
                )
                rows.append(json.loads(result_file.read_text()))
                print(rows[-1], flush=True)
            results.append((tasks, rows))
            text = render_scale(results, low=low, high=high)
            print(text)
            write_section(out, text, SCALE_MARKER)
    finally:
        try:
            sandbox.stop(timeout=15)
        except Exception:
            pass
        shutil.rmtree(home, ignore_errors=True)


def add_child_arguments(parser: argparse.ArgumentParser) -> None:
    """The hidden options of a benchmark run in a child process: its sandbox, scheduler job and result file."""
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    parser.add_argument("--job-id", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="40 tasks per executor instead of 200")
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--only", choices=["jobwatch", "upstream"], default=None)
    parser.add_argument("--throughput", action="store_true", help="the sync()/launch-rate benchmark")
    parser.add_argument("--parallelism", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=5.0, help="throughput: how long each pod sleeps")
    parser.add_argument(
        "--scale",
        action="store_true",
        help="simulated pods, parallelism N/2, at each --scale-tasks count; writes docs/benchmarks/scale.md",
    )
    parser.add_argument(
        "--scale-tasks", default="200,600", help="scale: comma-separated task counts (10x: 20000)"
    )
    parser.add_argument("--min-seconds", type=float, default=30.0, help="scale: shortest pod")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="scale: longest pod")
    parser.add_argument(
        "--variants",
        default="jobwatch,upstream-16",
        help="scale: jobwatch, jobwatch-default, upstream-default, upstream-16",
    )
    parser.add_argument(
        "--scale-deadline",
        type=float,
        default=None,
        help="scale: stop each executor's run after this many seconds, ended or not (reported)",
    )
    parser.add_argument(
        "--pod-shapes",
        type=int,
        default=0,
        help="scale: draw pod durations from N values (N pod shapes); 0: each to 0.1 s (one per task)",
    )
    parser.add_argument("--scale-child", help=argparse.SUPPRESS)
    add_child_arguments(parser)
    args = parser.parse_args()
    if args.scale_child:
        from airflow_jobwatch_testing.sandbox.admin import AdminClient

        row = run_throughput(
            args.scale_child,
            tasks=args.tasks,
            parallelism=max(1, args.tasks // 2),
            admin=AdminClient.from_kubeconfig(args.kubeconfig, timeout=120),
            job_id=args.job_id,
            seconds=args.min_seconds,
            max_seconds=args.max_seconds,
            deadline_s=args.scale_deadline,
            pod_shapes=args.pod_shapes,
        )
        Path(args.result_file).write_text(json.dumps(row))
        return
    if args.scale:
        counts = [int(c) for c in args.scale_tasks.split(",") if c.strip()]
        out = Path(args.out) if args.out != DEFAULT_OUT else REPO / "docs" / "benchmarks" / "scale.md"
        main_scale(
            counts,
            args.min_seconds,
            args.max_seconds,
            out,
            args.variants.split(","),
            args.scale_deadline,
            args.pod_shapes,
        )
        return
    if args.throughput:
        main_throughput(args.tasks or 2000, args.parallelism, args.seconds, Path(args.out))
        return
    tasks = args.tasks or (40 if args.quick else 200)

    home = Path(tempfile.mkdtemp(prefix="jobwatch-bench-executor-"))
    sandbox = SandboxProcess(home / "kubeconfig", log=home / "sandbox.log")
    try:
        os.environ["AIRFLOW_HOME"] = str(home)
        sandbox.start()
        admin, kubeconfig = sandbox.admin, sandbox.kubeconfig
        _setup_env(home, kubeconfig, tasks)
        end_dir = home / "ends"
        end_dir.mkdir()
        rows = []
        kinds = [args.only] if args.only else ["jobwatch", "upstream"]
        for i, kind in enumerate(kinds):
            print(f"running {kind} with {tasks} tasks ...", flush=True)
            rows.append(
                run_one(
                    kind,
                    tasks=tasks,
                    admin=admin,
                    job_id=str(101 + i),
                    end_dir=end_dir,
                    seed=7,
                    kubeconfig=kubeconfig,
                )
            )
            print(rows[-1], flush=True)
        text = render(rows, quick=args.quick)
        print()
        print(text)
        write_fragment(Path(args.out), text, throughput=False)
    finally:
        try:
            sandbox.stop(timeout=15)
        except Exception:
            pass
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
