"""Benchmark of building a worker pod: what bounds the executors' launch rate on one scheduler.

Run: ``.venv/bin/python bench/bench_pod_build.py [--quick]``. Prints a table and writes
``docs/benchmarks/pod_build.md``.

Both executors build each worker pod with the provider's ``PodGenerator.construct_pod`` (template <
dynamic pod < ``pod_override``, then ``pod_mutation_hook``) and serialize it for the create. This
measures, in one process with Airflow imported as a scheduler has it:

* **upstream's build**: what the provider's executor does per pod before its create
  (``get_base_pod_from_template`` + ``construct_pod`` + ``sanitize_for_serialization``);
* **ours, full build**: ``build_worker_pod`` (the template parsed once per file version) + the same
  serialization;
* **ours, as the executor builds**: ``WorkerPodBuilder.body``, a full build per pod shape and the task's
  values written into a copy of it for every later task of that shape;
* where the time goes: the kubernetes client's model objects each copy their own client
  ``Configuration``, and each copy sets two loggers' levels (``Logger.setLevel`` clears every logger's
  cache under logging's global lock). The profile counts those calls per pod;
* both of ours from 1, 2, 4 and 8 threads at once: builds are CPU under the GIL, so threads add no throughput,
  and contend on logging's lock;
* the sandbox's own create rate (HTTP, simulated pods), to show it is not what bounds a launch.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import logging
import os
import pstats
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # support.workloads: the synthetic workloads (tests/support/)
sys.path.insert(0, str(REPO / "bench"))

OUT = REPO / "docs" / "benchmarks" / "pod_build.md"


def _setup(home: Path) -> Path:
    from bench_executor import pod_template_yaml

    template = home / "pod_template.yaml"
    template.write_text(pod_template_yaml())
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__KUBERNETES_EXECUTOR__POD_TEMPLATE_FILE": str(template),
            "AIRFLOW__KUBERNETES_EXECUTOR__NAMESPACE": "default",
        }
    )
    return template


def _builders(template: Path) -> tuple[Any, Any, Any]:
    import airflow.executors.base_executor  # noqa: F401  (what a scheduler has imported)
    from airflow.providers.cncf.kubernetes.executors.kubernetes_executor_utils import (
        get_base_pod_from_template,
    )
    from airflow.providers.cncf.kubernetes.kube_config import KubeConfig
    from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import create_unique_id
    from airflow.providers.cncf.kubernetes.pod_generator import PodGenerator, workload_to_command_args
    from kubernetes.client import ApiClient

    from airflow_jobwatch.executors.podbuild import WorkerPodBuilder
    from airflow_jobwatch.executors.pods import build_worker_pod

    kube_config = KubeConfig()
    api = ApiClient()

    def upstream(workload: Any, i: int) -> Any:
        ti = workload.ti
        pod = PodGenerator.construct_pod(
            namespace="default",
            scheduler_job_id="1",
            pod_id=create_unique_id(ti.dag_id, ti.task_id),
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            kube_image=kube_config.kube_image,
            try_number=ti.try_number,
            map_index=ti.map_index,
            date=None,
            run_id=ti.run_id,
            args=list(workload_to_command_args(workload)),
            # as upstream's execute_async: the task's executor_config override
            pod_override_object=PodGenerator.from_obj(ti.executor_config),
            base_worker_pod=get_base_pod_from_template(str(template), kube_config),
            with_mutation_hook=True,
        )
        return api.sanitize_for_serialization(pod)

    def ours(workload: Any, i: int) -> Any:
        pod = build_worker_pod(
            workload, kube_config=kube_config, scheduler_job_id="1", pod_name=f"bench-{i:06d}", launch_id="x"
        )
        return api.sanitize_for_serialization(pod)

    builder = WorkerPodBuilder(
        kube_config=kube_config, scheduler_job_id="1", labels=None, serialize=api.sanitize_for_serialization
    )

    def shaped(workload: Any, i: int) -> Any:
        return builder.body(workload, pod_name=f"bench-{i:06d}", launch_id="x")

    return upstream, ours, shaped


def _per_pod_ms(build: Any, workloads: list[Any], warmup: list[Any] | None = None) -> float:
    for i, w in enumerate(workloads[:10] if warmup is None else warmup):  # warm-up: imports, caches
        build(w, i)
    started = time.perf_counter()
    for i, w in enumerate(workloads):
        build(w, i)
    return (time.perf_counter() - started) / len(workloads) * 1000


def _profile_counts(build: Any, workloads: list[Any]) -> dict[str, float]:
    profiler = cProfile.Profile()
    profiler.enable()
    for i, w in enumerate(workloads):
        build(w, i)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = sum(tt for (_cc, _nc, tt, _ct, _callers) in stats.values())
    counts = {"config_copies": 0.0, "set_level": 0.0, "copy_share": 0.0, "clear_cache_share": 0.0}
    for (filename, _line, func), (_cc, ncalls, _tt, cumtime, _callers) in stats.items():
        if filename.endswith("kubernetes/client/configuration.py") and func == "__deepcopy__":
            counts["config_copies"] += ncalls
            counts["copy_share"] += cumtime
        elif filename.endswith("logging/__init__.py") and func == "setLevel":
            counts["set_level"] += ncalls
        elif filename.endswith("logging/__init__.py") and func == "_clear_cache":
            counts["clear_cache_share"] += cumtime
    n = len(workloads)
    return {
        "config_copies": counts["config_copies"] / n,
        "set_level": counts["set_level"] / n,
        "copy_share": counts["copy_share"] / total if total else 0.0,
        "clear_cache_share": counts["clear_cache_share"] / total if total else 0.0,
    }


def _threaded_rate(build: Any, workloads: list[Any], threads: int) -> float:
    with ThreadPoolExecutor(threads) as pool:
        started = time.perf_counter()
        list(pool.map(build, workloads, range(len(workloads))))
        return len(workloads) / (time.perf_counter() - started)


async def _create_rate(kubeconfig: Path, count: int, concurrency: int) -> float:
    from kubernetes_asyncio import client, config

    await config.load_kube_config(config_file=str(kubeconfig))
    async with client.ApiClient() as api:
        core = client.CoreV1Api(api)
        names = iter(range(count))

        async def worker() -> None:
            for i in names:
                body = {
                    "metadata": {"name": f"create-{concurrency}-{i:06d}"},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "base", "image": "busybox", "command": ["sleep", "60"]}],
                    },
                }
                await core.create_namespaced_pod("default", body, _preload_content=False)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return count / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="50 pods per measurement instead of 300")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    n = 50 if args.quick else 300
    home = Path(tempfile.mkdtemp(prefix="jobwatch-bench-pod-build-"))
    template = _setup(home)
    from support.workloads import make_workload

    upstream, ours, shaped = _builders(template)
    workloads = [
        make_workload(dag_id="bench_build", task_id=f"t{i:05d}", command="sleep 30") for i in range(n)
    ]
    # Every task its own pod_override (a command of its own): no two tasks share a pod shape.
    # Three disjoint sets (warm-up, timed, profiled), so that no task repeats another's shape.
    unique = [
        make_workload(dag_id="bench_build", task_id=f"u{i:05d}", command=f"sleep {30 + i / 10:.1f}")
        for i in range(n + 10 + max(20, n // 3))
    ]
    unique_warmup, unique_profiled, unique = unique[:10], unique[10 + n :], unique[10 : 10 + n]
    loggers = len(logging.Logger.manager.loggerDict)
    rows = []
    for name, build, tasks, warmup, profiled in (
        ("upstream (get_base_pod_from_template + construct_pod)", upstream, workloads, None, None),
        ("ours, full build (build_worker_pod)", ours, workloads, None, None),
        ("ours, as the executor builds: tasks share their pod shape", shaped, workloads, None, None),
        (
            "ours, as the executor builds: every task its own pod shape",
            shaped,
            unique,
            unique_warmup,
            unique_profiled,
        ),
    ):
        ms = _per_pod_ms(build, tasks, warmup)
        counts = _profile_counts(build, profiled or tasks[: max(20, n // 3)])
        rows.append((name, ms, counts))
        print(name, round(ms, 2), counts, flush=True)
    threaded = {t: _threaded_rate(ours, workloads, t) for t in (1, 2, 4, 8)}
    threaded_shaped = {t: _threaded_rate(shaped, workloads, t) for t in (1, 2, 4, 8)}
    print("threads", threaded, threaded_shaped, flush=True)

    from airflow_jobwatch_testing.sandbox.process import SandboxProcess

    creates = {}
    with SandboxProcess(home / "kubeconfig", log=home / "sandbox.log", args=["--simulate-pods"]) as sandbox:
        for concurrency in (1, 16):
            creates[concurrency] = asyncio.run(_create_rate(sandbox.kubeconfig, n * 5, concurrency))
    print("creates", creates, flush=True)

    lines = [
        "## Pod build: what bounds a scheduler's launch rate",
        "",
        f"`bench/bench_pod_build.py` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}). {n} synthetic "
        "task workloads (each with a `pod_override` setting its command, as the executor benchmark's), one "
        f"process with Airflow imported ({loggers} loggers registered), the benchmark's pod template. A full "
        "build is the provider's `PodGenerator.construct_pod` (template < dynamic pod < the task's "
        "`pod_override`, then `pod_mutation_hook`), serialized for the create; upstream also reads its "
        "template file per pod, ours once per file version. The executor makes a full build for the first "
        "task of each pod shape (template, override, image, namespace), two more to find the shape's "
        "per-task places, and for every later task of that shape writes the task's values into a copy "
        "(the same body, value for value; with a `pod_mutation_hook` installed every pod is a full build). "
        "The profile columns count, per pod, "
        "the kubernetes client's `Configuration.__deepcopy__` (each model object holds its own copy of the "
        "client configuration, and every deep copy of a model copies it) and `Logger.setLevel` (each "
        "configuration copy sets two loggers' levels, which clears every logger's cache under logging's "
        "global lock), and their share of the build's profiled time.",
        "",
        "| build | ms / pod (one thread) | pods / s | configuration copies / pod | setLevel / pod | configuration copying, share of build | logging cache clearing, share |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, ms, c in rows:
        lines.append(
            f"| {name} | {ms:.1f} | {1000 / ms:.0f} | {c['config_copies']:.0f} | {c['set_level']:.0f} | "
            f"{c['copy_share']:.0%} | {c['clear_cache_share']:.0%} |"
        )
    lines += [
        "",
        "The same builds from several threads at once (pods / s, all threads together; builds are CPU under "
        "the GIL, so threads add no throughput):",
        "",
        "| threads | " + " | ".join(str(t) for t in threaded) + " |",
        "|---|" + "---:|" * len(threaded),
        "| ours, full build | " + " | ".join(f"{r:.0f}" for r in threaded.values()) + " |",
        "| ours, as the executor builds | " + " | ".join(f"{r:.0f}" for r in threaded_shaped.values()) + " |",
        "",
        f"The sandbox's create rate (simulated pods, {n * 5} creates over HTTP with kubernetes_asyncio): "
        + ", ".join(f"{r:.0f} pods/s at concurrency {c}" for c, r in creates.items())
        + ". A full build per pod bounds a launch more than the API server does.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
