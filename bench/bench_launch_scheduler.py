"""The launch rate under a real scheduler loop on PostgreSQL: JobWatchExecutor now, JobWatchExecutor before
the fence (a version given with ``--before``) and upstream's KubernetesExecutor, in one run.

    .venv/bin/python bench/bench_launch_scheduler.py --before /path/to/a/checkout/of/the/previous/version
    .venv/bin/python bench/bench_launch_scheduler.py --tasks 50 --rounds 1      # a smoke run
    .venv/bin/python bench/bench_launch_scheduler.py --log-statements ...       # the database's part

One stack for the whole run (the end-to-end tests' ``AirflowStack`` on ``support.postgres``): PostgreSQL,
the sandbox with every pod simulated (each runs 2 s, no host process: the machine's cores go to the
scheduler, not to worker processes), api-server and dag-processor. For each run, a real ``airflow
scheduler`` is started with the variant's executor (the previous version from the ``--before`` directory
through ``PYTHONPATH``, the scheduler and its watcher only), one DAG run of ``bench/dags_launch`` is
triggered, and its ``--tasks`` tasks, all ready at once, are queued by the scheduler in one loop
(``[scheduler] max_tis_per_query``, ``[core] parallelism`` and the default pool's slots above the task
count), so the executor paces
the pods. Both executors start at most ``worker_pods_creation_batch_size`` = 16 creates per heartbeat.
When every task has its pod and every pod has run, the scheduler is stopped, what is left of the run is
marked failed in the database (so the next scheduler adopts nothing) and the pods are deleted. Variants
alternate, each round starting with the next one, each scheduler a fresh process.

Measured per run, from a watch of the pods opened by this script (arrival times) and the task instances'
``queued_dttm``: pods created per second from the first task queued to the last pod created (first pod of
each task), queued -> pod created and queued -> pod running (p50 / p95), pods per task (1 unless a launch
was made twice), the scheduler's CPU seconds (its process group: scheduler, watcher, upstream's Manager) from
the trigger to the last pod, and the load average (1 min) at the start and the end. The table gives the
median of the rounds and their spread (min-max).

Written to docs/benchmarks/fence.md, section "The fence under a real scheduler loop" (the fragment's other
sections are kept), and docs/benchmarks.md is assembled again. No test asserts on these figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
from bench_e2e_trigger import JobWatch, git_commit, pct  # noqa: E402
from bench_executor import write_section  # noqa: E402
from run_all import assemble  # noqa: E402

DAG_ID = "launch_bench"
DAGS = REPO / "bench" / "dags_launch"
FRAGMENT = REPO / "docs" / "benchmarks" / "fence.md"
SECTION = "## The fence under a real scheduler loop"
OURS = "airflow_jobwatch.executors.JobWatchExecutor"
UPSTREAM = "airflow.providers.cncf.kubernetes.executors.kubernetes_executor.KubernetesExecutor"
LABELS = {
    "after": "JobWatchExecutor (fence: locked read, a name per launch)",
    "before": "JobWatchExecutor before the fence (plain read, random names)",
    "upstream": "upstream KubernetesExecutor",
}
TERMINAL = ("success", "failed", "skipped", "upstream_failed", "removed")


class PodWatch(JobWatch):
    """A watch of the namespace's pods: when each pod of the bench's DAG was first seen and first seen
    Running (arrival times at this process), and the task it runs (its annotations)."""

    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes import client, config

        super().__init__(kubeconfig, dag_id=DAG_ID)
        self.core = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
        self.list_objects = self.core.list_namespaced_pod
        self.pods: dict[str, dict[str, Any]] = {}  # pod name -> {"task", "added", "running"}

    def _note(self, pod: dict[str, Any], arrived: float) -> None:
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if annotations.get("dag_id") != self.dag_id:
            return
        seen = self.pods.setdefault(
            meta["name"],
            {
                "task": (annotations.get("run_id"), annotations.get("task_id")),
                "added": arrived,
                "running": None,
            },
        )
        phase = (pod.get("status") or {}).get("phase")
        if seen["running"] is None and phase in ("Running", "Succeeded", "Failed"):
            seen["running"] = arrived

    def of_run(self, run_id: str) -> list[dict[str, Any]]:
        return [p for p in list(self.pods.values()) if p["task"][0] == run_id]


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU seconds of every live process in a process group (and of its reaped children)."""
    import psutil

    total = 0.0
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) != pgid:
                continue
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except (psutil.Error, ProcessLookupError):
            continue
    return total


# One entry of PostgreSQL's log with log_min_duration_statement = 0 and log_line_prefix '%m [%p] '.
STATEMENT = re.compile(r"^\d{4}-\d\d-\d\d [\d:.]+ \w+ \[\d+\] LOG:  duration: ([\d.]+) ms  statement: (.*)$")
# The executors' reads of a task instance's launch (JobWatchExecutor's fence, before and after).
FENCE_COLUMNS = "task_instance.queued_by_job_id, task_instance.external_executor_id"


def statements(text: str) -> list[tuple[float, str]]:
    """(duration in ms, SQL) of each statement logged in ``text`` (a statement may span lines)."""
    out: list[tuple[float, str]] = []
    for line in text.splitlines():
        found = STATEMENT.match(line)
        if found:
            out.append((float(found.group(1)), found.group(2)))
        elif out and not re.match(r"^\d{4}-\d\d-\d\d ", line):
            out[-1] = (out[-1][0], out[-1][1] + "\n" + line)
    return out


def fence_profile(text: str, pods: int) -> dict[str, Any]:
    """What the database did between a run's trigger and its last pod: every statement, and the launch
    reads by kind (``FOR SHARE SKIP LOCKED``, plain), with the task instances each named."""
    logged = statements(text)
    locked = [(ms, sql) for ms, sql in logged if FENCE_COLUMNS in sql and "FOR SHARE" in sql]
    plain = [(ms, sql) for ms, sql in logged if FENCE_COLUMNS in sql and "FOR SHARE" not in sql]
    return {
        "statements": len(logged),
        "statements_ms": sum(ms for ms, _ in logged),
        "locked_reads": len(locked),
        "locked_ms": sum(ms for ms, _ in locked),
        "locked_keys": sum(sql.count("'noop_") for _, sql in locked),
        "plain_reads": len(plain),
        "plain_ms": sum(ms for ms, _ in plain),
        "plain_keys": sum(sql.count("'noop_") for _, sql in plain),
        "pods": pods,
    }


def start_scheduler(stack: Any, executor: str, tree: str | None, previous_job: int) -> int:
    """Start ``airflow scheduler`` with this executor (and this package directory first on its path), and
    wait until its job's loop is running: its SchedulerJob heartbeats a second time."""
    from support.stack import wait_until

    saved = dict(stack.env)
    stack.env["AIRFLOW__CORE__EXECUTOR"] = executor
    if tree:
        stack.env["PYTHONPATH"] = os.pathsep.join(filter(None, [tree, saved.get("PYTHONPATH")]))
    try:
        stack.start("scheduler")
    finally:
        stack.env.clear()
        stack.env.update(saved)

    def job() -> tuple[int, Any] | None:
        rows = stack.query(
            "SELECT id, latest_heartbeat FROM job WHERE job_type = 'SchedulerJob' AND state = 'running' "
            "AND id > ? ORDER BY id DESC",
            (previous_job,),
        )
        return rows[0] if rows else None

    def check_alive() -> None:
        proc = stack.procs["scheduler"]
        if proc.poll() is not None:
            raise RuntimeError(f"the scheduler exited with {proc.returncode}\n{stack.log_tail('scheduler')}")

    def running() -> tuple[int, Any] | None:
        check_alive()
        return job()

    first = wait_until(running, timeout=180, what="the scheduler's job to run")

    def beat_again() -> bool:
        current = running()
        return current is not None and current[1] != first[1]

    wait_until(beat_again, timeout=120, what="the scheduler's second heartbeat")
    return int(first[0])


def stop_and_clear(stack: Any, run_id: str, watch: PodWatch) -> None:
    """Stop the scheduler, mark what is left of the run failed (so no later scheduler adopts it) and
    delete the pods, waiting until the namespace has none."""
    from support.stack import wait_until

    stack.kill("scheduler", signal.SIGTERM, wait=60)
    stack.query(
        "UPDATE task_instance SET state = 'failed' WHERE dag_id = ? AND run_id = ? "
        "AND (state IS NULL OR state NOT IN ('success', 'failed', 'skipped', 'upstream_failed', 'removed'))",
        (DAG_ID, run_id),
    )
    stack.query(
        "UPDATE dag_run SET state = 'failed' WHERE dag_id = ? AND run_id = ? AND state NOT IN "
        "('success', 'failed')",
        (DAG_ID, run_id),
    )
    stack.query("UPDATE job SET state = 'success' WHERE job_type = 'SchedulerJob' AND state = 'running'")
    watch.core.delete_collection_namespaced_pod("default", grace_period_seconds=0)
    wait_until(
        lambda: not watch.core.list_namespaced_pod("default").items,
        timeout=120,
        what="every pod of the run to be deleted",
    )


def measure_one(
    stack: Any,
    watch: PodWatch,
    run_id: str,
    tasks: int,
    pgid: int,
    cpu_start: float,
    load_start: float,
    pg_log: tuple[Path, int] | None = None,
) -> dict[str, Any]:
    """Wait until every task of a triggered run has its pod and every pod has run; the run's figures.
    ``pg_log``: PostgreSQL's statement log and its size at the trigger, to profile the database's part."""
    from support.stack import wait_until

    def all_launched() -> bool:
        pods = watch.of_run(run_id)
        return len({p["task"] for p in pods}) >= tasks

    wait_until(all_launched, timeout=900, what=f"a pod for each of the {tasks} tasks", interval=0.1)
    cpu = group_cpu_seconds(pgid) - cpu_start
    load_end = os.getloadavg()[0]
    profile = None
    if pg_log is not None:
        with pg_log[0].open("rb") as log:
            log.seek(pg_log[1])
            profile = fence_profile(log.read().decode(errors="replace"), len(watch.of_run(run_id)))
    wait_until(
        lambda: all(p["running"] is not None for p in watch.of_run(run_id)),
        timeout=300,
        what="every pod of the run to have run",
    )
    rows = stack.query(
        "SELECT task_id, queued_dttm FROM task_instance WHERE dag_id = ? AND run_id = ?", (DAG_ID, run_id)
    )
    queued = {task_id: when.timestamp() for task_id, when in rows if when is not None}
    firsts: dict[str, dict[str, Any]] = {}
    for pod in sorted(watch.of_run(run_id), key=lambda p: p["added"]):
        firsts.setdefault(pod["task"][1], pod)
    to_created = [firsts[t]["added"] - queued[t] for t in firsts if t in queued]
    to_running = [firsts[t]["running"] - queued[t] for t in firsts if t in queued]
    span = max(p["added"] for p in firsts.values()) - min(queued.values())
    return {
        "run_id": run_id,
        "tasks": len(firsts),
        "queued_rows": len(queued),
        "pods": len(watch.of_run(run_id)),
        "a_pod_name": min(name for name, p in watch.pods.items() if p["task"][0] == run_id),
        "pods_per_s": len(firsts) / span,
        "span_s": span,
        "queued_spread_s": max(queued.values()) - min(queued.values()),
        "to_created_p50": pct(to_created, 0.5),
        "to_created_p95": pct(to_created, 0.95),
        "to_running_p50": pct(to_running, 0.5),
        "to_running_p95": pct(to_running, 0.95),
        "cpu_s": cpu,
        "load": (load_start, load_end),
        "database": profile,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from support.postgres import PostgresServer
    from support.stack import AirflowStack

    variants = [("after", OURS, None), ("before", OURS, args.before), ("upstream", UPSTREAM, None)]
    if not args.before:
        variants = [v for v in variants if v[0] != "before"]
    if args.only:
        variants = [v for v in variants if v[0] in args.only.split(",")]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in variants}
    started = time.time()
    # The run's files (the database cluster, AIRFLOW_HOME) under a folder of its own, which PostgreSQL's
    # unprivileged user must be able to enter.
    base = tempfile.mkdtemp(prefix="launch-bench-")
    os.chmod(base, 0o755)
    with (
        contextlib.ExitStack() as cleanup,
        PostgresServer(base_dir=base) as pg,
        AirflowStack(
            base_dir=base,
            processes=("api-server", "dag-processor"),
            database_url=pg.url,
            dags_folder=DAGS,
            dag_ids=[DAG_ID],
            parallelism=max(512, 2 * args.tasks),
            start_timeout=240,
            keep=args.keep,
            config={
                # Every ready task is queued in one scheduler loop: the executor, not Airflow, paces the pods.
                ("scheduler", "max_tis_per_query"): str(max(512, 2 * args.tasks)),
                ("core", "max_active_tasks_per_dag"): str(max(512, 2 * args.tasks)),
                # The default pool's size when `airflow db migrate` creates it (128 by default).
                ("core", "default_pool_task_slot_count"): str(max(512, 2 * args.tasks)),
                ("kubernetes_executor", "worker_pods_creation_batch_size"): str(args.batch_size),
                # Airflow's defaults, not the stack's short ones (made for the failover tests): a loaded
                # machine must not make a scheduler take itself for dead and reset its tasks.
                ("scheduler", "scheduler_health_check_threshold"): "30",
                ("scheduler", "orphaned_tasks_check_interval"): "300",
                ("scheduler", "task_queued_timeout"): "600",
            },
            env={"JOBWATCH_BENCH_TASKS": str(args.tasks)},
            sandbox_args=[
                "--simulate-pods",
                "--simulated-default-seconds",
                str(args.pod_seconds),
                "--history-window",
                "100000",
            ],
        ) as stack,
    ):
        if not args.keep:
            cleanup.callback(shutil.rmtree, base, True)
        else:
            print(f"AIRFLOW_HOME kept: {stack.home}", flush=True)
        pg_log = pg.dir / "postgres.log"
        if args.log_statements:
            pg.query("ALTER SYSTEM SET log_min_duration_statement = 0")
            pg.query("ALTER SYSTEM SET log_line_prefix = '%%m [%%p] '")  # %% for psycopg2's placeholders
            pg.query("SELECT pg_reload_conf()")
        watch = PodWatch(stack.kubeconfig)
        watch.start()
        watch.ready.wait(30)
        job = 0
        for n in range(args.rounds):
            # Each round starts with the next variant, so that none is always the first after start-up.
            for name, executor, tree in variants[n % len(variants) :] + variants[: n % len(variants)]:
                print(f"round {n + 1}: {name} ...", flush=True)
                job = start_scheduler(stack, executor, tree, job)
                pgid = stack.procs["scheduler"].pid  # its own session and process group
                load_start, cpu_start = os.getloadavg()[0], group_cpu_seconds(pgid)
                log_at = pg_log.stat().st_size if pg_log.exists() else 0
                run_id = stack.trigger_dag(DAG_ID)
                try:
                    result = measure_one(
                        stack,
                        watch,
                        run_id,
                        args.tasks,
                        pgid,
                        cpu_start,
                        load_start,
                        (pg_log, log_at) if args.log_statements else None,
                    )
                finally:
                    stop_and_clear(stack, run_id, watch)
                results[name].append(result)
                print(json.dumps(result), flush=True)
        watch.stop.set()
    return {
        "results": results,
        "tasks": args.tasks,
        "rounds": args.rounds,
        "batch_size": args.batch_size,
        "pod_seconds": args.pod_seconds,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "end": time.strftime("%H:%M UTC"),
        "commit": git_commit(),
        "before": args.before_label or args.before,
    }


def _median_spread(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return format(med, fmt)
    return f"{format(med, fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def render_profile(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The statement log's table (``--log-statements``): the launch reads per run, medians of the rounds."""
    rows = {name: [r["database"] for r in runs if r.get("database")] for name, runs in results.items()}
    if not any(rows.values()):
        return []

    def med(values: list[float]) -> str:
        return f"{statistics.median(values):.1f}" if values else "-"

    lines = [
        "",
        "From PostgreSQL's statement log (`--log-statements`, every statement logged with its duration), "
        "between the trigger and the last pod, median of the rounds. Launch reads = JobWatchExecutor's reads "
        "of the task instances' launch columns: `FOR SHARE SKIP LOCKED` (the fence, one per heartbeat with a "
        "create due, and its plain second read when a row was skipped) and plain (the fence before it; and, "
        "in both, whether a task ran, read for the pods that ended):",
        "",
        "| executor | statements / pod | locked reads | task instances per locked read | plain reads "
        "| task instances per plain read | ms in launch reads | ms per launch read |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, profiles in rows.items():
        if not profiles:
            continue
        reads = [p["locked_reads"] + p["plain_reads"] for p in profiles]
        spent = [p["locked_ms"] + p["plain_ms"] for p in profiles]
        lines.append(
            f"| {LABELS[name]} | {med([p['statements'] / p['pods'] for p in profiles])} "
            f"| {med([p['locked_reads'] for p in profiles])} "
            f"| {med([p['locked_keys'] / p['locked_reads'] for p in profiles if p['locked_reads']])} "
            f"| {med([p['plain_reads'] for p in profiles])} "
            f"| {med([p['plain_keys'] / p['plain_reads'] for p in profiles if p['plain_reads']])} "
            f"| {med(spent)} | {med([ms / n for ms, n in zip(spent, reads, strict=True) if n])} |"
        )
    return lines


def render(result: dict[str, Any]) -> str:
    results = result["results"]
    lines = [
        SECTION,
        "",
        f"`python bench/bench_launch_scheduler.py --tasks {result['tasks']} --rounds {result['rounds']} "
        f"--before <checkout of {result['before']}>` ({result['when']} to {result['end']}, commit "
        f"{result['commit']}).",
        "",
        f"A real `airflow scheduler` on PostgreSQL, one DAG run of {result['tasks']} independent tasks queued in "
        "one scheduler loop, worker pods simulated by the sandbox (each runs "
        f"{result['pod_seconds']:g} s), `worker_pods_creation_batch_size` = {result['batch_size']} for both "
        "executors. Pods / s = the tasks over the time from the first task queued to the last pod created; "
        "queued = the task instance's `queued_dttm`, created and running = when a watch of the pods received "
        "the pod and its `Running` phase. Scheduler CPU = its process group (watcher, upstream's Manager) "
        f"from the trigger to the last pod. Median of {result['rounds']} rounds (min-max), the variants "
        "alternating (each round starting with the next), each a fresh scheduler.",
        "",
        "| executor | pods created / s | queued -> created p50 (s) | p95 (s) | queued -> running p50 (s) "
        "| p95 (s) | scheduler CPU (s) | pods per task | load average, start - end of each run |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, rows in results.items():
        if not rows:
            continue
        loads = "; ".join(f"{a:.1f} - {b:.1f}" for a, b in (r["load"] for r in rows))
        pods_per_task = max(r["pods"] / r["tasks"] for r in rows)
        lines.append(
            f"| {LABELS[name]} | {_median_spread([r['pods_per_s'] for r in rows], '.1f')} "
            f"| {_median_spread([r['to_created_p50'] for r in rows], '.2f')} "
            f"| {_median_spread([r['to_created_p95'] for r in rows], '.2f')} "
            f"| {_median_spread([r['to_running_p50'] for r in rows], '.2f')} "
            f"| {_median_spread([r['to_running_p95'] for r in rows], '.2f')} "
            f"| {_median_spread([r['cpu_s'] for r in rows], '.1f')} | {pods_per_task:g} | {loads} |"
        )
    lines += render_profile(results)
    after = [r["pods_per_s"] for r in results.get("after", [])]
    before = [r["pods_per_s"] for r in results.get("before", [])]
    if after and before:
        change = statistics.median(after) / statistics.median(before) - 1
        verdict = "met" if change >= -0.10 else "not met"
        lines += [
            "",
            f"Launch rate, after / before: {change:+.1%} (medians). The fence may cost at most 10% of the "
            f"launch rate: {verdict} by the medians.",
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=200, help="tasks queued at once (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each executor (default 3)")
    parser.add_argument("--before", help="a directory holding the previous version's airflow_jobwatch")
    parser.add_argument("--before-label", help="how the table names the previous version (a commit)")
    parser.add_argument("--only", help="comma-separated variants to run: after,before,upstream")
    parser.add_argument("--batch-size", type=int, default=16, help="worker_pods_creation_batch_size")
    parser.add_argument("--pod-seconds", type=float, default=2.0, help="how long each simulated pod runs")
    parser.add_argument(
        "--log-statements",
        action="store_true",
        help="log every SQL statement (PostgreSQL) and count the launch reads per run; slows the database",
    )
    parser.add_argument("--keep", action="store_true", help="keep AIRFLOW_HOME (logs) and print its path")
    parser.add_argument("--no-write", action="store_true", help="print the table, write no fragment")
    parser.add_argument("--json", help="also write the raw figures to this file")
    parser.add_argument("--render", help="write the section from a file --json wrote, without running")
    args = parser.parse_args()
    if args.tasks < 1 or args.rounds < 1 or args.batch_size < 1:
        parser.error("--tasks, --rounds and --batch-size must be >= 1")
    if args.before and not (Path(args.before) / "airflow_jobwatch").is_dir():
        parser.error(f"--before {args.before!r} holds no airflow_jobwatch package directory")
    result = json.loads(Path(args.render).read_text()) if args.render else run(args)
    text = render(result)
    print(text)
    if args.json and not args.render:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if not args.no_write:
        write_section(FRAGMENT, text, SECTION)
        print(f"wrote {assemble()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
