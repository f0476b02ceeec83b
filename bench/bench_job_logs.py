"""Peak memory of a worker that writes a large Job log to its task log: upstream's KubernetesJobOperator
and ours, side by side, on the same sandbox, each in a fresh Python process.

    .venv/bin/python bench/bench_job_logs.py [--mb 100]

The Job's container prints ``--mb`` MB (lines of 1000 bytes, 1 MB every 0.2 s). The operator runs with
``wait_until_job_complete=True, get_logs=True`` in the worker; the task log goes to a file, as in a
real worker. Printed per variant: the worker's peak RSS before ``execute`` and after, the lines that
reached the task log and the wall time. (The sandbox keeps 4 MiB of each container's log, like a kubelet
that rotates; a reader that falls behind by more loses the oldest lines, so "lines" can be below the
total for either variant: the figure to read is the memory.)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = r"""
import datetime, json, logging, resource, sys, time
from dataclasses import dataclass, field
variant, kubeconfig, lines, resultfile = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if variant == "upstream":
    from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator
else:
    from airflow_jobwatch.operators.job import KubernetesJobOperator

@dataclass
class TI:
    dag_id: str = "bench"
    task_id: str = "logs"
    map_index: int = -1
    try_number: int = 1
    start_date: datetime.datetime = field(default_factory=lambda: datetime.datetime.now(datetime.UTC))
    def xcom_push(self, key, value): pass

class Dag:
    dag_id = "bench"

op = KubernetesJobOperator(
    task_id="logs", image="busybox:1.36", namespace="default", kubernetes_conn_id=None,
    config_file=kubeconfig, backoff_limit=0, wait_until_job_complete=True, get_logs=True,
    job_poll_interval=1, on_finish_action="keep_pod",
    # 1000 lines (1 MB) every 0.2 s: slow enough for a follower to keep up with the sandbox's 4 MiB
    # per-container buffer, so the whole log really passes through a reader that follows it.
    cmds=["sh", "-c", f"for c in $(seq 1 {lines // 1000}); do seq -f '%01000g' $(( (c-1)*1000+1 )) $((c*1000)); sleep 0.2; done"],
)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.monotonic()
op.execute({"ti": TI(), "run_id": f"bench-{variant}", "dag": Dag()})
elapsed = time.monotonic() - t0
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with open(resultfile, "w") as out:
    json.dump({"variant": variant, "rss_before_mb": before / 1024, "rss_after_mb": after / 1024, "seconds": elapsed}, out)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="size of the Job's log in MB")
    args = parser.parse_args()
    from airflow_jobwatch_testing.sandbox.process import SandboxProcess

    lines = args.mb * 1000
    workdir = Path(tempfile.mkdtemp(prefix="bench-job-logs-"))
    rows = []
    with SandboxProcess(workdir / "kubeconfig", log=workdir / "sandbox.log") as sandbox:
        for variant in ("upstream", "ours"):
            logfile, resultfile = workdir / f"{variant}.log", workdir / f"{variant}.json"
            with open(logfile, "w") as task_log:  # the operators log to stdout: the task log
                out = subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        WORKER,
                        variant,
                        str(sandbox.kubeconfig),
                        str(lines),
                        str(resultfile),
                    ],
                    stdout=task_log,
                    stderr=subprocess.PIPE,
                    text=True,
                    timeout=1800,
                )
            if out.returncode != 0:
                print(out.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"{variant} failed")
            row = json.loads(resultfile.read_text())
            with open(logfile, errors="replace") as task_log:
                row["lines"] = sum(1 for line in task_log if "[base]" in line and len(line) > 1000)
            rows.append(row)
    print(
        f"{'variant':10} {'RSS before':>11} {'peak RSS':>9} {'growth':>8} {'lines':>8} {'seconds':>8}   (log: {args.mb} MB, {lines} lines)"
    )
    for r in rows:
        growth = r["rss_after_mb"] - r["rss_before_mb"]
        print(
            f"{r['variant']:10} {r['rss_before_mb']:9.0f}MB {r['rss_after_mb']:7.0f}MB {growth:6.0f}MB "
            f"{r['lines']:8d} {r['seconds']:8.1f}"
        )


if __name__ == "__main__":
    t0 = time.monotonic()
    main()
    print(f"total {time.monotonic() - t0:.0f} s")
