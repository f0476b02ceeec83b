"""Deferrable Jobs that end about a second after they start, under a real scheduler, triggerer and
LocalExecutor (PostgreSQL metadata database) on the sandbox: how long from the Job's end to the task's.

    .venv/bin/python bench/bench_e2e_trigger.py               # 20 tasks of each kind
    .venv/bin/python bench/bench_e2e_trigger.py --quick       # a smoke run: 6 of each kind

One DAG (``bench/dags_e2e_trigger/``) holds ``--count`` tasks of each kind, all started together by one DAG
run; every fifth Job exits 1 and fails its task:

* ``get_logs=False``: the trigger ends the task;
* ``get_logs=True`` (the default): the trigger writes the pods' logs into the task log and ends the task;
* ``get_logs=True`` with task callbacks: the task resumes on a worker (the callbacks run there), held by
  ``[jobwatch] resume_hold_seconds`` when the Job ended soon after the deferral.

The stack is the end-to-end tests' (``tests/support/stack.py``'s ``AirflowStack`` with
``support.postgres``): the same processes, configuration and sandbox, so what is measured is what the
tests run.

Reported per kind, p50 / p90 / max of the latency = the task instance's ``end_date`` (the metadata
database, microseconds) - the moment the Job's terminal condition (``Complete`` or ``Failed``) reached a
plain watch of the Jobs opened by this script (``time.time()`` on arrival). ``lastTransitionTime`` has
whole-second resolution, too coarse for second-scale figures; the watch's arrival is checked against it
(it must fall within the second it names, plus the delivery delay). Also reported: tasks in the wrong
state, tasks failed by the scheduler (its log's stale defer-exit message), tasks that ended on a later
try than the first, and worker starts: the executions of the task in a worker process, each of which
opens with a ``::group::Pre Execute`` line in the task's log file (``attempt=N.log``, every try's); a task
ended from the triggerer has one (the run that deferred), a resumed one two. The steps in between (when
the task deferred, when its trigger started, logged the Job's end and fired) come from the timestamps
of the task's log lines, the worker's and the triggerer's.

The scheduler queues index i of every kind before index i + 1 of any (``priority_weight``), so that each
wave of tasks that ``--parallelism`` lets start holds the same share of each kind.

No test asserts on these figures. Figures go to docs/benchmarks/e2e_trigger.md (this script's section;
the fragment's other sections are kept).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import random
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from importlib.metadata import version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# The end-to-end tests' stack (AirflowStack, PostgresServer), as bench_executor.py and bench_churn.py use
# tests/support's workloads: one stack for the tests and the benchmarks.
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
from bench_executor import write_section  # noqa: E402
from run_all import assemble  # noqa: E402

DAG_ID = "e2e_trigger_bench"
DAGS = REPO / "bench" / "dags_e2e_trigger"
FRAGMENT = REPO / "docs" / "benchmarks" / "e2e_trigger.md"
# This script's section of the fragment: replaced by each run; the fragment's other sections (what the
# figures say, written by hand) are kept.
SECTION = "## Deferred Jobs end to end: Job end to task end"
KINDS = {
    "logs_off": "`get_logs=False`, ended from the triggerer",
    "logs_on": "`get_logs=True` (default), ended from the triggerer with the pods' logs",
    "resume": "`get_logs=True` + task callbacks, resumes on a worker",
}
SHORT = {"logs_off": "`get_logs=False`", "logs_on": "`get_logs=True`", "resume": "resumes on a worker"}
STALE = re.compile(r"finished with state \w+, but the task instance's state attribute is queued")
# Lines of the task's log (JSON lines; the worker's file attempt=N.log, the triggerer's beside it) that
# mark the steps between the deferral and the task's end.
WORKER_START = "::group::Pre Execute"  # the first line of each task execution in a worker
DEFERRED = re.compile(r"^Pausing task as DEFERRED")
TRIGGER_STARTED = re.compile(r"^trigger \S+ \(ID \d+\) starting")
TRIGGER_SAW_END = re.compile(r"^Job \S+ ended")
TRIGGER_FIRED = re.compile(r"^Trigger fired event")
PARSE_MS = re.compile(r'"dag_file_parse_ms":\s*(\d+)')  # each worker start parses the DAG file
# The steps reported for each kind (p50 and max): from one mark of the task's timeline to another.
STEPS = {
    "Job end - deferral": ("deferred", "job_end"),
    "trigger start - deferral": ("deferred", "trigger_started"),
    "trigger saw the end - Job end": ("job_end", "trigger_saw_end"),
    "trigger fired - trigger saw the end": ("trigger_saw_end", "trigger_fired"),
    "task end - trigger fired": ("trigger_fired", "task_end"),
    "a worker resumed it - trigger fired": ("trigger_fired", "resumed"),
    "task end - a worker resumed it": ("resumed", "task_end"),
}
PARSE_STEP = "the worker parsing the DAG file, each start"


class JobWatch(threading.Thread):
    """A plain watch of the namespace's Jobs (reconnecting from its last resourceVersion): the wall-clock
    moment each Job's terminal condition first arrives, and the condition's ``lastTransitionTime``."""

    def __init__(self, kubeconfig: Path, namespace: str = "default", dag_id: str = DAG_ID) -> None:
        super().__init__(daemon=True, name="job-watch")
        from kubernetes import client, config

        self.api = client.BatchV1Api(config.new_client_from_config(str(kubeconfig)))
        # What is listed and watched: the namespace's Jobs here; a subclass may watch another kind (its
        # own _note reads the objects).
        self.list_objects: Callable[..., Any] = self.api.list_namespaced_job
        self.namespace = namespace
        self.dag_id = dag_id
        self.ended: dict[str, dict[str, Any]] = {}  # task_id -> {"seen", "ltt", "type"}
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.errors = 0

    def run(self) -> None:
        from kubernetes import watch

        rv = ""
        delay = 0.2
        while not self.stop.is_set():
            try:
                if not rv:
                    listed = self.list_objects(self.namespace)
                    for job in listed.items:
                        self._note(job.to_dict(), time.time())
                    rv = listed.metadata.resource_version
                    self.ready.set()
                w = watch.Watch()
                for event in w.stream(
                    self.list_objects,
                    self.namespace,
                    resource_version=rv,
                    timeout_seconds=30,
                    allow_watch_bookmarks=True,
                ):
                    arrived = time.time()
                    obj = event["raw_object"]
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if event["type"] == "ERROR":
                        rv = ""  # 410 Gone: list again
                        break
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._note(obj, arrived)
                    if self.stop.is_set():
                        return
                delay = 0.2
            except Exception:
                self.errors += 1
                # bounded backoff with jitter, then reconnect (or list again)
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 5.0)

    def _note(self, job: dict[str, Any], arrived: float) -> None:
        spec = job.get("spec") or {}
        template = spec.get("template") or {}
        labels = (template.get("metadata") or {}).get("labels") or {}
        task_id = labels.get("task_id")
        if labels.get("dag_id") != self.dag_id or not task_id or task_id in self.ended:
            return
        for cond in (job.get("status") or {}).get("conditions") or []:
            kind = cond.get("type")
            if kind in ("Complete", "Failed") and cond.get("status") == "True":
                ltt = cond.get("lastTransitionTime") or cond.get("last_transition_time")
                if isinstance(ltt, str):
                    ltt = datetime.datetime.fromisoformat(ltt.replace("Z", "+00:00"))
                self.ended[task_id] = {"seen": arrived, "ltt": ltt.timestamp() if ltt else None, "type": kind}
                return


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by the nearest-rank method."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def expected_state(task_id: str) -> str:
    return "failed" if int(task_id.rsplit("_", 1)[1]) % 5 == 4 else "success"


def _events(path: Path) -> list[tuple[float, str]]:
    """(wall-clock time, message) of each JSON line of a task log file."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
            when = datetime.datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00"))
        except (ValueError, KeyError, TypeError):
            continue
        out.append((when.timestamp(), str(record.get("event", ""))))
    return out


def _first(events: list[tuple[float, str]], pattern: re.Pattern[str]) -> float | None:
    return next((t for t, message in events if pattern.search(message)), None)


def timeline(log_dir: Path, task_id: str, try_number: int) -> dict[str, Any]:
    """When the task deferred, when its trigger started, saw the Job's end and fired (the triggerer's
    file), and how many times a worker ran it (the worker's file: one per execution)."""
    base = log_dir / f"task_id={task_id}"
    tries = {n: base / f"attempt={n}.log" for n in range(1, try_number + 1)}
    runs = {n: _events(path) if path.exists() else [] for n, path in tries.items()}
    worker = runs[try_number]
    trigger = sorted(e for p in base.glob(f"attempt={try_number}.log.trigger.*.log") for e in _events(p))
    worker_starts = [t for t, message in worker if message.startswith(WORKER_START)]
    parse_ms = [
        int(ms)
        for path in tries.values()
        if path.exists()
        for ms in PARSE_MS.findall(path.read_text(errors="replace"))
    ]
    return {
        "parse_seconds": [ms / 1000 for ms in parse_ms],
        # every try's file: a try the scheduler reset also ran in a worker
        "worker_starts": sum(
            1 for r in runs.values() for _, message in r if message.startswith(WORKER_START)
        ),
        "deferred": _first(worker, DEFERRED),
        "resumed": worker_starts[-1] if len(worker_starts) > 1 else None,
        "trigger_started": _first(trigger, TRIGGER_STARTED),
        "trigger_saw_end": _first(trigger, TRIGGER_SAW_END),
        "trigger_fired": _first(trigger, TRIGGER_FIRED),
    }


def summarise(
    rows: Iterable[tuple[Any, ...]], ended: dict[str, dict[str, Any]], log_dir: Path
) -> dict[str, dict[str, Any]]:
    """Per kind: latencies (all, and by the Job's outcome), the steps' durations, worker starts and the
    tasks in the wrong state or with no end time."""
    out: dict[str, dict[str, Any]] = {}
    by_task = {r[0]: r for r in rows}
    for kind in KINDS:
        tasks = sorted(t for t in by_task if t.startswith(kind + "_"))
        lat: dict[str, list[float]] = {"all": [], "success": [], "failed": []}
        steps: dict[str, list[float]] = {step: [] for step in [*STEPS, PARSE_STEP]}
        wrong, missing, retried = [], [], []
        per_task: list[dict[str, Any]] = []
        starts: Counter[int] = Counter()
        for t in tasks:
            _task_id, state, try_number, end_date = by_task[t]
            if state != expected_state(t):
                wrong.append(f"{t}={state}")
            if (try_number or 1) > 1:
                retried.append(f"{t}: try {try_number}")
            marks = timeline(log_dir, t, try_number or 1)
            marks.update(task_id=t, state=state, try_number=try_number)
            per_task.append(marks)
            starts[marks["worker_starts"]] += 1
            if t not in ended or end_date is None:
                missing.append(t)
                continue
            marks["job_end"] = ended[t]["seen"]
            marks["task_end"] = end_date.timestamp()
            seconds = marks["task_end"] - marks["job_end"]
            lat["all"].append(seconds)
            lat[expected_state(t)].append(seconds)
            steps[PARSE_STEP].extend(marks["parse_seconds"])
            for step, (a, b) in STEPS.items():
                if marks.get(a) is not None and marks.get(b) is not None:
                    steps[step].append(marks[b] - marks[a])
        out[kind] = {
            "tasks": len(tasks),
            "lat": lat,
            "steps": steps,
            "wrong": wrong,
            "missing": missing,
            "retried": retried,
            "starts": starts,
            "per_task": per_task,
        }
    return out


def fmt_lat(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{pct(values, 0.5):.1f} / {pct(values, 0.9):.1f} / {max(values):.1f} s"


def fmt_starts(counts: Counter[int]) -> str:
    return ", ".join(f"{n} task{'s' if c != 1 else ''} x {k}" for k, c in sorted(counts.items()) for n in [c])


def machine(load: list[float]) -> str:
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"apache-airflow {version('apache-airflow')}, load average (1 min) "
        f"{min(load):.1f}-{max(load):.1f} during the run"
    )


def render(result: dict[str, Any]) -> str:
    s = result["summary"]
    lines = [
        SECTION,
        "",
        f"`python bench/bench_e2e_trigger.py --count {result['count']}` ({result['when']}, commit "
        f"{result['commit']}; {result['machine']}).",
        "",
        f"One DAG run starts {result['count']} deferrable `KubernetesJobOperator` tasks of each kind "
        "together; each Job runs `sleep 1` and exits 0, every fifth exits 1 (its task fails). Real "
        "scheduler, triggerer, dag-processor and api-server, LocalExecutor, PostgreSQL; the Jobs run on "
        "the sandbox (its Job controller and kubelet). Job end to task end = the task instance's "
        "`end_date` - the moment a plain watch of the Jobs received the Job's terminal condition. Worker "
        "starts = executions of the task in a worker process, from its log.",
        "",
        "| kind | tasks | Job end to task end, p50 / p90 / max | succeeding Jobs p50 | failing Jobs p50 "
        "| worker starts (tasks x starts) | wrong state | on a later try |",
        "|---|---:|---|---:|---:|---|---:|---:|",
    ]
    for kind, title in KINDS.items():
        k = s[kind]
        p50s = [f"{pct(k['lat'][o], 0.5):.1f} s" if k["lat"][o] else "n/a" for o in ("success", "failed")]
        lines.append(
            f"| {title} | {k['tasks']} | {fmt_lat(k['lat']['all'])} | {p50s[0]} | {p50s[1]} "
            f"| {fmt_starts(k['starts'])} | {len(k['wrong'])} | {len(k['retried'])} |"
        )
    lines += [
        "",
        f"Tasks failed by the scheduler (its stale defer-exit message): {result['stale']}. "
        f"Run wall time (trigger to DAG run end): {result['wall']:.0f} s; LocalExecutor parallelism "
        f"{result['parallelism']}.",
        "",
        "Where the time goes, p50 (max) in seconds, from the timestamps of the task log's lines (the "
        "worker's file and the triggerer's beside it) and the two ends above:",
        "",
        "| step | " + " | ".join(SHORT.values()) + " |",
        "|---|" + "---:|" * len(KINDS),
    ]
    for step in [*STEPS, PARSE_STEP]:
        cells = []
        for kind in KINDS:
            values = s[kind]["steps"][step]
            cells.append(f"{pct(values, 0.5):.1f} ({max(values):.1f})" if values else "-")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    if result["drift"]:
        low, high = result["drift"]
        lines += [
            "",
            f"The Job-end reference: this script's watch received each Job's terminal condition {low:.2f} "
            f"to {high:.2f} s after the whole second its `lastTransitionTime` names.",
        ]
    return "\n".join(lines) + "\n"


def git_commit() -> str:
    import subprocess

    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def wait_for_run(
    stack: Any, dag_id: str, run_id: str, *, timeout: float, load: list[float], interval: float
) -> None:
    """Wait for the DAG run to end, noting the machine's load average (1 min) at each poll."""
    from support.stack import wait_until

    def done() -> bool:
        load.append(os.getloadavg()[0])
        return stack.run_state(dag_id, run_id) in ("success", "failed")

    wait_until(done, timeout=timeout, what="the benchmark's DAG run to finish", interval=interval)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from support.postgres import PostgresServer
    from support.stack import AirflowStack, wait_until

    load = [os.getloadavg()[0]]
    with (
        PostgresServer() as pg,
        AirflowStack(
            database_url=pg.url,
            executor="LocalExecutor",
            triggerer=True,
            dags_folder=DAGS,
            dag_ids=[DAG_ID],
            parallelism=args.parallelism,
            start_timeout=240,
            keep=args.keep,
            config={
                # Many operators in one file: parsing it in each task process is slow on a loaded machine.
                ("core", "dagbag_import_timeout"): "120",
                # Airflow's defaults, not the stack's short ones (made for the failover tests): with
                # 6 s, a scheduler whose own heartbeat stalls past it under this load takes itself for
                # dead and resets its queued and running tasks as orphans, a new try each.
                ("scheduler", "scheduler_health_check_threshold"): "30",
                ("scheduler", "orphaned_tasks_check_interval"): "300",
                ("scheduler", "task_queued_timeout"): "600",
            },
            env={"JOBWATCH_BENCH_COUNT": str(args.count)},
            sandbox_args=["--bookmark-interval", "1"],
        ) as stack,
    ):
        if args.keep:
            print(f"AIRFLOW_HOME kept: {stack.home}", flush=True)
        watcher = JobWatch(stack.kubeconfig)
        watcher.start()
        watcher.ready.wait(30)
        started = time.time()
        run_id = stack.trigger_dag(DAG_ID)
        print(f"triggered {run_id} ({3 * args.count} tasks)", flush=True)

        wait_for_run(stack, DAG_ID, run_id, timeout=args.timeout, load=load, interval=2)
        wall = time.time() - started
        rows = stack.query(
            "SELECT task_id, state, try_number, end_date FROM task_instance WHERE dag_id = ? AND run_id = ?",
            (DAG_ID, run_id),
        )
        # Every Job ended before its task: the watch has them all, unless it lagged; wait a little.
        wait_until(
            lambda: len(watcher.ended) >= len(rows), timeout=30, what="the watch to see every Job's end"
        )
        watcher.stop.set()
        scheduler_log = (stack.home / "proc-logs" / "scheduler.log").read_text(errors="replace")
        stale = sum(1 for line in scheduler_log.splitlines() if STALE.search(line) and DAG_ID in line)
        drift = [
            e["seen"] - e["ltt"] for e in watcher.ended.values() if e["ltt"] is not None
        ]  # arrival - the whole second named: within [0, 1 s + delivery)
        summary = summarise(
            rows, watcher.ended, stack.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}"
        )
    return {
        "count": args.count,
        "parallelism": args.parallelism,
        "summary": summary,
        "stale": stale,
        "wall": wall,
        "drift": (min(drift), max(drift)) if drift else None,
        "watch_errors": watcher.errors,
        "machine": machine(load),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "commit": git_commit(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=20, help="tasks of each kind (default 20)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: --count 6")
    parser.add_argument(
        "--parallelism", type=int, default=32, help="LocalExecutor's worker processes ([core] parallelism)"
    )
    parser.add_argument("--timeout", type=float, default=1200, help="seconds allowed for the DAG run")
    parser.add_argument("--keep", action="store_true", help="keep AIRFLOW_HOME (logs) and print its path")
    parser.add_argument("--no-write", action="store_true", help="print the table, write no fragment")
    parser.add_argument("--json", help="also write the raw figures to this file")
    args = parser.parse_args()
    if args.quick:
        args.count = 6
    if args.count < 1 or args.parallelism < 1:
        parser.error(f"--count and --parallelism must be >= 1, got {args.count} and {args.parallelism}")
    result = run(args)
    text = render(result)
    print(text)
    print(
        f"watch arrival - lastTransitionTime (s): {result['drift']}; watch errors: {result['watch_errors']}"
    )
    for kind in KINDS:
        k = result["summary"][kind]
        if k["wrong"] or k["missing"] or k["retried"]:
            print(f"{kind}: wrong state {k['wrong']}; no end time {k['missing']}; later try {k['retried']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, default=str, indent=1))
    if not args.no_write:
        write_section(FRAGMENT, text, SECTION)
        print(f"wrote {assemble()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
