"""A log storm in a real triggerer: the loop's longest stall, the triggerer's peak memory, and how long
tasks with and without logs take from their Job's end to their own.

    .venv/bin/python bench/bench_trigger_log_storm.py             # 8 storm tasks beside 8 quiet ones
    .venv/bin/python bench/bench_trigger_log_storm.py --label main --no-write   # e.g. another checkout

One DAG run (the end-to-end test's ``trigger_log_storm``, ``tests/e2e/dags_trigger_logs/``) starts
``--count`` deferrable ``get_logs=True`` tasks whose pods each print 200,000 empty lines (the worst
input for the triggerer: the most log records per byte), and as many ``get_logs=False`` tasks whose
Jobs end 6 s after they start, while the first ones' logs are written. The stack is the end-to-end
tests' (``tests/support/stack.py``): scheduler, triggerer, dag-processor, api-server, the sandbox.

Reported:

* the loop's longest stall: Airflow's own watchdog of the triggerer's event loop (``block_watchdog``,
  which sleeps 0.1 s and logs when it woke late) with ``[triggerer] blocked_main_thread_warning_threshold
  = 0.15``, so every stall past 50 ms is logged; the figure is the longest minus the 0.1 s sleep;
* "event loop appears deadlocked" lines (the supervisor's watchdog, 30 s without a message);
* the triggerer's peak memory: the peak RSS (``VmHWM``) of its async subprocess, which runs the triggers;
* Job end to task end, p50 / max, per kind: the task instance's ``end_date`` minus the Job's terminal
  condition as this script's watch of the Jobs received it.

No test asserts on these figures. They go to docs/benchmarks/trigger.md (this script's section).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for folder in ("bench", "tests"):  # the end-to-end benchmark's helpers, the tests' stack
    sys.path.insert(0, str(REPO / folder))
from bench_e2e_trigger import JobWatch, git_commit, machine, pct, wait_for_run  # noqa: E402
from bench_executor import write_section  # noqa: E402
from run_all import assemble  # noqa: E402

# The end-to-end test's log storm (tests/e2e/test_trigger_logs.py), JOBWATCH_STORM_COUNT pairs of tasks.
DAG_ID = "trigger_log_storm"
DAGS = REPO / "tests" / "e2e" / "dags_trigger_logs"
FRAGMENT = REPO / "docs" / "benchmarks" / "trigger.md"
SECTION = "## Trigger: a log storm in the triggerer"
BLOCKED = re.compile(r"async thread was blocked for ([0-9.]+) seconds")
DEADLOCKED = "event loop appears deadlocked"
WATCHDOG_SLEEP = 0.1


def peak_rss_mib(pid: int) -> dict[int, float]:
    """Peak RSS (VmHWM) of ``pid`` and each of its descendants, in MiB."""
    import psutil

    out = {}
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:
            continue
        match = re.search(r"VmHWM:\s+(\d+) kB", status)
        if match:
            out[proc.pid] = int(match.group(1)) / 1024
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from support.stack import AirflowStack, wait_until

    load = [os.getloadavg()[0]]
    with AirflowStack(
        triggerer=True,
        dags_folder=DAGS,
        dag_ids=[DAG_ID],
        keep=args.keep,
        config={("triggerer", "blocked_main_thread_warning_threshold"): str(WATCHDOG_SLEEP + 0.05)},
        env={"JOBWATCH_STORM_COUNT": str(args.count)},
    ) as stack:
        watcher = JobWatch(stack.kubeconfig, dag_id=DAG_ID)
        watcher.start()
        watcher.ready.wait(30)
        started = time.time()
        run_id = stack.trigger_dag(DAG_ID)

        wait_for_run(stack, DAG_ID, run_id, timeout=args.timeout, load=load, interval=1)
        wall = time.time() - started
        rows = stack.query(
            "SELECT task_id, state, end_date FROM task_instance WHERE dag_id = ? AND run_id = ?",
            (DAG_ID, run_id),
        )
        wait_until(lambda: len(watcher.ended) >= len(rows), timeout=30, what="every Job's end")
        watcher.stop.set()
        rss = peak_rss_mib(stack.procs["triggerer"].pid)
        log = (stack.home / "proc-logs" / "triggerer.log").read_text(errors="replace")
    stalls = [float(s) - WATCHDOG_SLEEP for s in BLOCKED.findall(log)]
    latency: dict[str, list[float]] = {"storm": [], "quiet": []}
    wrong = []
    for task_id, state, end_date in rows:
        if state != "success":
            wrong.append(f"{task_id}={state}")
        if task_id in watcher.ended and end_date is not None:
            latency[task_id.split("_")[0]].append(_timestamp(end_date) - watcher.ended[task_id]["seen"])
    return {
        "label": args.label,
        "count": args.count,
        "stalls": stalls,
        "deadlocked": log.count(DEADLOCKED),
        "rss": max(rss.values()) if rss else None,
        "latency": latency,
        "wrong": wrong,
        "wall": wall,
        "machine": machine(load),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "commit": git_commit(),
    }


def _timestamp(value: Any) -> float:
    """A task instance's ``end_date`` (a datetime, or SQLite's text in UTC) as a Unix time."""
    import datetime

    if isinstance(value, str):
        value = datetime.datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return float(value.timestamp())


def fmt(values: list[float]) -> str:
    return f"{pct(values, 0.5):.1f} / {max(values):.1f} s" if values else "n/a"


def row(r: dict[str, Any]) -> str:
    stall = f"{max(r['stalls']):.2f} s ({len(r['stalls'])} past 50 ms)" if r["stalls"] else "< 0.05 s"
    return (
        f"| {r['label']} | {stall} | {r['deadlocked']} | {r['rss']:.0f} MiB | {fmt(r['latency']['storm'])} "
        f"| {fmt(r['latency']['quiet'])} | {len(r['wrong'])} |"
    )


def render(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            SECTION,
            "",
            f"`python bench/bench_trigger_log_storm.py --count {r['count']}` ({r['when']}, commit "
            f"{r['commit']}; {r['machine']}).",
            "",
            f"One DAG run: {r['count']} deferrable `get_logs=True` tasks whose pods each print 200,000 empty "
            f"lines, beside {r['count']} `get_logs=False` tasks whose Jobs end 6 s after they start, while "
            "the first ones' logs are written. Real scheduler, triggerer, dag-processor and api-server on the sandbox. "
            "Longest stall: Airflow's own watchdog of the triggerer's loop (every stall past 50 ms logged). "
            "Peak memory: the triggerer's async subprocess (VmHWM). Job end to task end: p50 / max.",
            "",
            '| code | loop\'s longest stall | "event loop appears deadlocked" | triggerer peak RSS '
            "| `get_logs=True`, Job end to task end | `get_logs=False`, Job end to task end | wrong state |",
            "|---|---:|---:|---:|---:|---:|---:|",
            row(r),
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--count", type=int, default=8, help="storm tasks, and as many quiet ones (default 8)"
    )
    parser.add_argument("--label", default="airflow-jobwatch", help="the code's name in the table")
    parser.add_argument("--timeout", type=float, default=900, help="seconds allowed for the DAG run")
    parser.add_argument("--keep", action="store_true", help="keep AIRFLOW_HOME (logs) and print its path")
    parser.add_argument("--no-write", action="store_true", help="print the table, write no fragment")
    args = parser.parse_args()
    if args.count < 1:
        parser.error(f"--count must be >= 1, got {args.count}")
    result = run(args)
    text = render(result)
    print(text)
    if result["wrong"]:
        print(f"wrong state: {result['wrong']}")
    if not args.no_write:
        write_section(FRAGMENT, text, SECTION)
        print(f"wrote {assemble()}")


if __name__ == "__main__":
    main()
