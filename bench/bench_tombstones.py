"""What the triggerer keeps of a deleted Job (its tombstone), in bytes per entry.

    .venv/bin/python bench/bench_tombstones.py

One Job with one pod runs to completion on the sandbox (labelled and annotated as the operator makes
it); its final Job and pod are then kept 1,000 times over (each under its own name, uid and
resourceVersion), three ways, and tracemalloc counts what the kept copies hold once the parsed JSON they
came from is freed:

* the cache's copies as dicts (the Job and pod as the informers store them: what a tombstone held before
  it kept only what a decision reads);
* a tombstone of a Job no trigger waits for (its Job and pods reduced to what a decision reads, packed);
* a tombstone of a Job a trigger waits for (its whole Job, since the event carries it; pods reduced).

Prints a table; the figures are written by hand to the section "Tombstones of deleted Jobs" of
docs/benchmarks.md and to the docstring of ``TOMBSTONE_MAX_ENTRIES``.
"""

from __future__ import annotations

import gc
import json
import os
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable
from typing import Any

from kubernetes import client, config

from airflow_jobwatch.kube.engine.projection import project_job, project_pod
from airflow_jobwatch.kube.engine.store import Packer
from airflow_jobwatch.triggers.tombstones import _slim_job, _Tombstone
from airflow_jobwatch_testing.sandbox.thread import SandboxThread

N = 1000
LABELS = {
    "dag_id": "bench",
    "task_id": "job",
    "run_id": "manual__2026-12-06T20_00_00",
    "try_number": "1",
    "kubernetes_job_operator": "True",
    "airflow_kpo_in_cluster": "False",
    "airflow_version": "3.3.0",
}
ANNOTATIONS = {
    "dag_id": "bench",
    "task_id": "job",
    "run_id": "manual__2026-12-06T20:00:00+00:00",
    "try_number": "1",
}
MANIFEST: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "bench", "labels": LABELS, "annotations": ANNOTATIONS},
    "spec": {
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": 3600,
        "template": {
            "metadata": {"labels": LABELS, "annotations": ANNOTATIONS},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "base", "image": "busybox:1.36", "command": ["sh", "-c", "echo '{\"v\": 1}'"]}
                ],
            },
        },
    },
}


def finished_job() -> tuple[dict[str, Any], dict[str, Any]]:
    with SandboxThread() as sb:
        path = os.path.join(tempfile.mkdtemp(), "kubeconfig")
        sb.write_kubeconfig(path)
        client.BatchV1Api(config.new_client_from_config(path)).create_namespaced_job("default", MANIFEST)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            job = sb.get_object("jobs", "default", "bench") or {}
            pods = sb.objects("pods", "default")
            conditions = (job.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Complete" for c in conditions) and pods:
                if pods[0]["status"].get("phase") == "Succeeded":
                    return job, pods[0]
            time.sleep(0.1)
    raise SystemExit("the Job did not complete within 30 s")


def _distinct(i: int, job: dict[str, Any], pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Entry ``i``: the Job and pod under their own names, uids and resourceVersions, as distinct Jobs
    are (the packing's preset dictionary, the first entry, must not flatter copies of itself)."""
    job_uid, pod_uid = str(uuid.UUID(int=2 * i + 1)), str(uuid.UUID(int=2 * i + 2))
    job["metadata"].update(name=f"bench-{i:05d}", uid=job_uid, resourceVersion=str(1000 + i))
    pod["metadata"].update(name=f"bench-{i:05d}-x7k2p", uid=pod_uid, resourceVersion=str(5000 + i))
    for key in ("controller-uid", "batch.kubernetes.io/controller-uid"):
        if key in pod["metadata"].get("labels", {}):
            pod["metadata"]["labels"][key] = job_uid
    for ref in pod["metadata"].get("ownerReferences", []):
        ref.update(uid=job_uid, name=f"bench-{i:05d}")
    return job, pod


def per_entry(
    job: dict[str, Any], pod: dict[str, Any], keep: Callable[[dict[str, Any], dict[str, Any]], Any]
) -> float:
    texts = json.dumps(job), json.dumps(pod)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    parsed = [_distinct(i, json.loads(texts[0]), json.loads(texts[1])) for i in range(N)]
    kept = [keep(j, p) for j, p in parsed]
    del parsed
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    assert len(kept) == N
    return sum(stat.size_diff for stat in after.compare_to(before, "filename")) / N


# One packer per kind for all entries, as Tombstones keeps them (the first object packed is the preset
# dictionary of every later one).
JOBS, PODS = Packer(), Packer()


def tombstone(job: dict[str, Any], pod: dict[str, Any], *, whole: bool) -> _Tombstone:
    tomb = _Tombstone(
        job=JOBS.pack(job if whole else _slim_job(job)),
        job_uid=job["metadata"]["uid"],
        pods={},
        at=0.0,
        observed=True,
    )
    tomb.learn(pod["metadata"]["uid"], pod, PODS)
    return tomb


def main() -> None:
    job, pod = finished_job()
    rows = [
        ("the cache's copies, as dicts (before)", lambda j, p: (project_job(j), [project_pod(p)])),
        ("tombstone, no trigger waits", lambda j, p: tombstone(j, p, whole=False)),
        ("tombstone, a trigger waits (whole Job)", lambda j, p: tombstone(j, p, whole=True)),
    ]
    print(f"Job JSON {len(json.dumps(job))} B, pod JSON {len(json.dumps(pod))} B; {N} entries each")
    print(f"{'kept':<42} {'KiB per entry':>14}")
    for label, keep in rows:
        print(f"{label:<42} {per_entry(job, pod, keep) / 1024:>14.2f}")


if __name__ == "__main__":
    main()
