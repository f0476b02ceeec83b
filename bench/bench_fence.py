"""What the fence costs: the launch rate with every task's row in PostgreSQL, before and after, beside upstream.

    .venv/bin/python bench/bench_fence.py --before /path/to/a/checkout/of/the/previous/version
    .venv/bin/python bench/bench_fence.py --tasks 600 --rounds 2

A throwaway PostgreSQL server (Debian's ``postgresql`` package) gets Airflow's schema (``airflow db
migrate``). Each run drives one executor as the scheduler does (``bench_executor.run_throughput``:
``queue_workload``, then ``heartbeat()`` every 0.2 s) with N tasks whose rows are QUEUED in that database,
queued by the run's scheduler job under pre-assigned launch ids, so the executors' own database checks run
for real: JobWatchExecutor's fence before each create (one ``FOR SHARE SKIP LOCKED`` read per heartbeat
for all its creates), upstream's ``_should_create_pod_for_job`` (one read per pod). Pods are simulated by
the sandbox (``--simulate-pods``), so the API server is not the bottleneck. ``--before`` runs
JobWatchExecutor a second time with the package from that directory (the previous version's fence: a plain
read, random pod names). Runs alternate, each in a fresh process; the figures are the median of
``--rounds``. Written to docs/benchmarks.md, section "The fence".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_executor import add_child_arguments, write_section
from run_all import assemble

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
MARKER = "## The fence: launch rate with the database check"
COLUMNS = [
    ("pods_per_s", "pods created / s"),
    ("burst_pods_per_s", "launch burst pods / s"),
    ("slot_to_pod_p50_s", "slot -> pod p50 (s)"),
    ("slot_to_pod_p99_s", "p99 (s)"),
    ("sync_p50_ms", "sync() p50 (ms)"),
    ("sync_p99_ms", "sync() p99 (ms)"),
    ("scheduler_cpu_ms_per_launch", "scheduler CPU / launch (ms)"),
]


def child(args: argparse.Namespace) -> None:
    from bench_executor import run_throughput
    from support.airflow_rows import bind_airflow_sessions

    from airflow_jobwatch_testing.sandbox.admin import AdminClient

    engine = bind_airflow_sessions(os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    row = run_throughput(
        args.child,
        tasks=args.tasks,
        parallelism=args.tasks // 2,
        admin=AdminClient.from_kubeconfig(args.kubeconfig, timeout=120),
        job_id=args.job_id,
        seconds=1.0,
        max_seconds=3.0,
        pod_shapes=3,
        database=engine,
    )
    Path(args.result_file).write_text(json.dumps(row))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--before", help="a directory holding the previous version's airflow_jobwatch package"
    )
    parser.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "fence.md"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    add_child_arguments(parser)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    results = measure(args)
    text = render(results, tasks=args.tasks, rounds=args.rounds)
    print(text)
    write_section(Path(args.out), text, MARKER)
    print(f"wrote {assemble()}")  # docs/benchmarks.md, from every benchmark's fragment


def measure(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Every run of every round, each executor in a fresh child process, on one sandbox and one database."""
    from bench_executor import _setup_env
    from support.postgres import PostgresServer

    from airflow_jobwatch_testing.sandbox.process import SandboxProcess

    runs = [("after", "jobwatch", None), ("upstream", "upstream-16", None)]
    if args.before:
        runs.insert(1, ("before", "jobwatch", args.before))
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in runs}
    with (
        tempfile.TemporaryDirectory(prefix="jobwatch-bench-fence-") as tmp,
        PostgresServer() as pg,
        SandboxProcess(
            Path(tmp) / "kubeconfig",
            log=Path(tmp) / "sandbox.log",
            args=["--simulate-pods", "--history-window", "100000"],
        ) as sandbox,
    ):
        home = Path(tmp)
        os.environ["AIRFLOW_HOME"] = str(home)
        _setup_env(home, sandbox.kubeconfig, args.tasks, database_url=pg.url)  # airflow db migrate
        job = 500
        for n in range(args.rounds):
            for name, variant, tree in runs:
                job += 1
                result_file = home / f"{name}-{n}.json"
                env = dict(os.environ)
                if tree:
                    env["PYTHONPATH"] = os.pathsep.join(filter(None, [tree, env.get("PYTHONPATH")]))
                print(f"fence: round {n + 1}, {name} ({variant}), {args.tasks} tasks ...", flush=True)
                command = [sys.executable, __file__, "--child", variant, "--tasks", str(args.tasks)]
                command += ["--kubeconfig", str(sandbox.kubeconfig), "--job-id", str(job)]
                subprocess.run([*command, "--result-file", str(result_file)], check=True, env=env)
                results[name].append(json.loads(result_file.read_text()))
                print(results[name][-1], flush=True)
    return results


def render(results: dict[str, list[dict[str, Any]]], *, tasks: int, rounds: int) -> str:
    labels = {
        "after": "JobWatchExecutor (fence: locked read, a name per launch)",
        "before": "JobWatchExecutor, previous version (plain read, random names)",
        "upstream": "upstream KubernetesExecutor, worker_pods_creation_batch_size=16",
    }
    head = "| executor | " + " | ".join(title for _, title in COLUMNS) + " |"
    lines = [
        MARKER,
        "",
        f"`bench/bench_fence.py --tasks {tasks} --rounds {rounds} --before <the previous version>`: {tasks} tasks at",
        f"parallelism {tasks // 2}, each task's row QUEUED in PostgreSQL under a pre-assigned launch id, so each",
        "executor's own database check runs for real (JobWatchExecutor: one `FOR SHARE SKIP LOCKED` read per",
        "heartbeat for all its creates, and names fixed per launch; the previous version: one plain read per",
        "heartbeat, random names; upstream: one read per pod in `_should_create_pod_for_job`). Pods are simulated",
        f"by the sandbox. Each run in a fresh process, the three alternating; median of {rounds} rounds.",
        "",
        head,
        "|" + "---|" * (len(COLUMNS) + 1),
    ]
    for name, rows in results.items():
        cells = []
        for field, _ in COLUMNS:
            values = [r[field] for r in rows if r.get(field) is not None]
            cells.append(f"{statistics.median(values):g}" if values else "-")
        lines.append(f"| {labels[name]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
