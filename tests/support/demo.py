"""``make demo``: the whole path, end to end, on the embedded sandbox, with 410s forced.

1. Starts the sandbox with a history window of 1 (any watch that resumes from an older
   resourceVersion gets ``410 Gone``), no bookmarks, and an image registry that fails
   (``registry.invalid/...``), plus real Airflow processes (api-server, scheduler with
   JobWatchExecutor, dag-processor, triggerer) on SQLite: :class:`~support.stack.AirflowStack`.
2. While the DAGs run, a chaos thread drops every open watch every few seconds, so each watcher
   reconnects, is told 410, relists and reconciles, over and over.
3. Runs ``executor_basics`` (tasks in worker pods: success, failure, non-zero exit, retry, timeout,
   unpullable image) and ``deferrable_jobs`` (KubernetesJobOperator tasks deferred to JobTrigger).
4. Prints a table of tasks, their pods, final states and the expected ones, and how many relists,
   watcher restarts and 410s happened. Exits 0 only if every task ended as expected.

``PYTHONPATH=tests python -m support.demo --help`` (from the repository's root) for options.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

# What each task must end as. A failure is expected where the task is built to fail; the point of the
# demo is that every one of them ends, in the right state, despite the 410s and dropped watches.
EXPECTED: dict[str, dict[str, str]] = {
    "executor_basics": {
        "succeed": "success",
        "fail": "failed",
        "exit_nonzero": "failed",
        "retry_then_succeed": "success",
        "time_out": "failed",
        "unpullable_image": "failed",
    },
    "deferrable_jobs": {
        "quick": "success",
        "long": "success",
        "fan_out": "success",
        "fails": "failed",
        "big_result": "success",
        "bad_image": "failed",
    },
}

# Seconds between two "drop every open watch" faults. Short enough that every watcher is cut several
# times during a DAG run; long enough that a watch gets going in between.
CHAOS_INTERVAL_SECONDS = 4.0


def _pods_by_task(pods: Iterable[dict[str, Any]]) -> dict[tuple[str, str, str], set[str]]:
    """Map (dag_id, task_id, "worker" or "job") to the names of the pods that ran it.

    Worker pods (the executor's, one per try and one more for the resumption of a deferred task) carry
    ``dag_id``/``task_id`` annotations; the pods of a KubernetesJobOperator's Job carry the Job
    controller's ``batch.kubernetes.io/job-name`` label and the operator's ``dag_id``/``task_id``
    labels.
    """
    out: dict[tuple[str, str, str], set[str]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        ann = meta.get("annotations") or {}
        labels = meta.get("labels") or {}
        dag_id = ann.get("dag_id") or labels.get("dag_id")
        task_id = ann.get("task_id") or labels.get("task_id")
        kind = "job" if "batch.kubernetes.io/job-name" in labels or "job-name" in labels else "worker"
        if dag_id and task_id:
            out.setdefault((dag_id, task_id, kind), set()).add(meta.get("name", "?"))
    return out


class _Chaos(threading.Thread):
    """Drops every open watch at a fixed interval until stopped (unless ``drop`` is False), and notes
    the pods it sees on the way, since finished worker pods are deleted before the run ends."""

    def __init__(self, admin: Any, interval: float, *, drop: bool) -> None:
        super().__init__(name="demo-chaos", daemon=True)
        self.admin = admin
        self.interval = interval
        self.drop = drop
        self.drops = 0
        self.pods: dict[tuple[str, str, str], set[str]] = {}
        self._stop_event = threading.Event()

    def _sample_pods(self) -> None:
        for key, names in _pods_by_task(self.admin.objects("pods")).items():
            self.pods.setdefault(key, set()).update(names)

    def run(self) -> None:
        # Pods are sampled every second; watches are dropped every `interval` seconds.
        tick = 0
        while not self._stop_event.wait(1.0):
            tick += 1
            try:
                self._sample_pods()
                if self.drop and tick % max(1, round(self.interval)) == 0:
                    self.admin.fault("drop_watches")
                    self.drops += 1
            except Exception as err:  # the sandbox may be busy; the next round retries
                print(f"chaos: {err}", file=sys.stderr)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*header), line, *(fmt.format(*map(str, r)) for r in rows)])


def container_lines(task_log: str, limit: int = 4) -> list[str]:
    """The Job's container output as KubernetesJobOperator wrote it to a task log (JSON lines):
    decoded text prefixed ``[pod] [container]``, as upstream's operator writes it."""
    found: list[str] = []
    for raw in task_log.splitlines():
        try:
            record = json.loads(raw)
            text = str(record.get("event", "")) if isinstance(record, dict) else raw
        except ValueError:
            text = raw
        if "] [base] " in text:
            found.append(text.strip())
    return found[:limit]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m support.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-chaos", action="store_true", help="do not drop watches during the run")
    parser.add_argument("--timeout", type=float, default=420.0, help="seconds allowed for the DAG runs")
    parser.add_argument("--keep", action="store_true", help="keep the temporary AIRFLOW_HOME for inspection")
    parser.add_argument(
        "--dag", action="append", choices=sorted(EXPECTED), help="run only this DAG (repeatable)"
    )
    args = parser.parse_args(argv)
    dag_ids = args.dag or list(EXPECTED)

    from support.stack import AirflowStack

    print("Starting the sandbox (history window 1, no bookmarks) and Airflow (api-server, scheduler with")
    print("JobWatchExecutor, dag-processor, triggerer) ... this takes about a minute.", flush=True)
    started = time.monotonic()
    with AirflowStack(
        dag_ids=dag_ids,
        triggerer=True,
        keep=args.keep,
        sandbox_args=[
            "--history-window",
            "1",
            # No bookmarks: a watch's resourceVersion goes stale as soon as anything else changes, so
            # with a history window of 1 nearly every reconnect is answered 410 Expired.
            "--bookmark-interval",
            "0",
            "--fail-images",
            r"registry\.invalid/",
        ],
    ) as stack:
        print(f"Ready after {time.monotonic() - started:.0f} s; AIRFLOW_HOME={stack.home}", flush=True)
        stack.admin.reset_counters()
        chaos = _Chaos(stack.admin, CHAOS_INTERVAL_SECONDS, drop=not args.no_chaos)
        chaos.start()
        run_started = time.monotonic()
        runs = {dag_id: stack.trigger_dag(dag_id) for dag_id in dag_ids}
        final: dict[str, str] = {}
        try:
            for dag_id, run_id in runs.items():
                remaining = max(10.0, args.timeout - (time.monotonic() - run_started))
                final[dag_id] = stack.wait_for_run(dag_id, run_id, timeout=remaining)
        finally:
            chaos.stop()
        elapsed = time.monotonic() - run_started

        counters = stack.admin.counters()
        status = stack.executor_status()
        chaos._sample_pods()
        pods = chaos.pods
        rows: list[list[str]] = []
        ok = True
        long_job_log = (
            container_lines(stack.task_log("deferrable_jobs", runs["deferrable_jobs"], "long", 1))
            if "deferrable_jobs" in runs
            else []
        )
        for dag_id, run_id in runs.items():
            states = stack.task_states(dag_id, run_id)
            for task_id, expected in EXPECTED[dag_id].items():
                got = (states.get(task_id) or {}).get("state") or "-"
                tries = (states.get(task_id) or {}).get("try_number", "-")
                good = got == expected
                ok &= good
                workers = len(pods.get((dag_id, task_id, "worker"), ()))
                job_pods = ", ".join(sorted(pods.get((dag_id, task_id, "job"), ()))) or "-"
                rows.append(
                    [
                        dag_id,
                        task_id,
                        str(workers),
                        job_pods,
                        str(tries),
                        got,
                        expected,
                        "ok" if good else "WRONG",
                    ]
                )

    print()
    print(_table(rows, ["dag", "task", "worker pods", "Job pods", "tries", "final state", "expected", ""]))
    print()
    expired = sum(v for k, v in counters.items() if k.startswith("expired watch "))
    print(f"DAG runs finished in {elapsed:.0f} s: " + ", ".join(f"{d}={s}" for d, s in final.items()))
    print(
        f"watch faults: {chaos.drops} drops of every open watch; watches opened on the sandbox: "
        f"{sum(v for k, v in counters.items() if k.startswith('watch '))}, "
        f"of which answered 410 Expired: {expired}"
    )
    print(
        f"JobWatchExecutor watcher: relists={status.get('relists', '?')} "
        f"restarts={status.get('watcher_restarts', '?')}"
    )
    if long_job_log:
        print("deferrable_jobs.long task log, the Job's output (decoded, prefixed [pod] [container]):")
        for line in long_job_log:
            print(f"  {line}")
    print("RESULT:", "every task ended as expected" if ok else "some tasks did NOT end as expected")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
