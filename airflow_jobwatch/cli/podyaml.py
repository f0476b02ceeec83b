"""The worker pod JobWatchExecutor would create for a task, as YAML (``airflow jobwatch generate-pod-yaml``).

Built by the executor's own :func:`~airflow_jobwatch.executors.pods.build_worker_pod` from the task's
``executor_config`` and the ``[kubernetes_executor]`` settings (pod template, image, namespace), so what
is printed is what would be sent, except for the run-specific values: a placeholder run id, a new pod
name, and no execution-API token in the command (the real one is minted per try by the scheduler).
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from airflow_jobwatch.pod_template import pod_template_problem

PLACEHOLDER_RUN_ID = "manual__generate-pod-yaml"
PLACEHOLDER_SCHEDULER_JOB_ID = "worker-config"  # upstream's generate-dag-yaml uses the same value


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send what is written to stdout to stderr, at the file-descriptor level too: Airflow's CLI log
    handlers keep the stdout stream they were given (on Airflow 3.2 they log there, e.g. alembic's
    "setup plugin" lines when parsing imports it), and stdout is for the YAML only."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def worker_pod(dag_id: str, task_id: str, *, subdir: str | None = None, map_index: int = -1) -> Any:
    """The ``V1Pod`` for one task of a DAG parsed from ``subdir`` (a file or a folder; default
    ``[core] dags_folder``). Parsing only: no metadata database is needed."""
    from airflow.providers.cncf.kubernetes.kube_config import KubeConfig
    from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import create_unique_id
    from airflow.providers.common.compat.sdk import conf

    from airflow_jobwatch.compat import BundleInfo, ExecuteTask, TaskInstanceDTO, dag_bag_class
    from airflow_jobwatch.executors.pods import build_worker_pod

    folder = subdir or conf.get("core", "dags_folder")
    # Parsing logs ("Filling up the DagBag") and DAG files' prints go to stderr: stdout is for the YAML.
    with _stdout_to_stderr():
        bag = dag_bag_class()(dag_folder=folder)
    dag = bag.dags.get(dag_id)
    if dag is None:
        errors = "".join(
            f"\n  {path}: {err.strip().splitlines()[-1]}" for path, err in bag.import_errors.items()
        )
        raise SystemExit(
            f"No DAG {dag_id!r} in {folder} (found: {', '.join(sorted(bag.dags)) or 'none'}){errors}"
        )
    if task_id not in dag.task_dict:
        raise SystemExit(
            f"DAG {dag_id!r} has no task {task_id!r}; its tasks are: {', '.join(sorted(dag.task_dict))}"
        )
    task = dag.task_dict[task_id]
    ti = TaskInstanceDTO(
        id=uuid.uuid4(),
        task_id=task_id,
        dag_id=dag_id,
        run_id=PLACEHOLDER_RUN_ID,
        try_number=1,
        map_index=map_index,
        dag_version_id=uuid.uuid4(),
        pool_slots=getattr(task, "pool_slots", 1) or 1,
        priority_weight=1,
        queue=getattr(task, "queue", "default") or "default",
        executor_config=getattr(task, "executor_config", None) or None,
    )
    workload = ExecuteTask(
        ti=ti,
        dag_rel_path=Path(Path(dag.fileloc).name)
        if Path(folder).is_file()
        else Path(dag.fileloc).relative_to(folder),
        bundle_info=BundleInfo(name="dags-folder"),
        token="",
        log_path=f"dag_id={dag_id}/run_id={PLACEHOLDER_RUN_ID}/task_id={task_id}/attempt=1.log",
    )
    kube_config = KubeConfig()
    for template in (
        kube_config.pod_template_file,
        (getattr(task, "executor_config", None) or {}).get("pod_template_file"),
    ):
        problem = pod_template_problem(template)
        if problem:
            raise ValueError(problem)
    return build_worker_pod(
        workload,
        kube_config=kube_config,
        scheduler_job_id=PLACEHOLDER_SCHEDULER_JOB_ID,
        pod_name=create_unique_id(dag_id, task_id),
    )


def worker_pod_yaml(dag_id: str, task_id: str, *, subdir: str | None = None, map_index: int = -1) -> str:
    """:func:`worker_pod` as YAML (what the executor would send to the API server)."""
    from kubernetes.client import ApiClient

    pod = worker_pod(dag_id, task_id, subdir=subdir, map_index=map_index)
    body = ApiClient().sanitize_for_serialization(pod)
    return yaml.safe_dump(body, sort_keys=False)
