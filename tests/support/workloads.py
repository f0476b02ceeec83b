"""Synthetic ``ExecuteTask`` workloads, for driving an executor without a scheduler or a database.

The worker pod built from such a workload is a normal worker pod (labels, annotations, the
``execute_workload`` arguments), except that ``pod_override`` replaces the container's command with
``sh -c <command>``: the workload's arguments then become ``$0 $1 ...`` of that shell and are
ignored, so the pod does exactly what the test or benchmark asks (sleep, exit 3, ...) without an
Airflow API server. Used by tests/integration/executor and bench/bench_executor.py.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from airflow_jobwatch.compat import BundleInfo, ExecuteTask, TaskInstanceDTO


def make_workload(
    *,
    dag_id: str = "jobwatch_synthetic",
    task_id: str,
    run_id: str = "synthetic_run",
    try_number: int = 1,
    map_index: int = -1,
    command: str | None = None,
    image: str | None = None,
    namespace: str | None = None,
    priority_weight: int = 1,
    executor_config: dict[str, Any] | None = None,
) -> ExecuteTask:
    """An ``ExecuteTask`` whose worker pod runs ``sh -c command`` (if given) in ``image``."""
    from kubernetes.client import models as k8s

    config = dict(executor_config or {})
    if command is not None or image is not None or namespace is not None:
        container = k8s.V1Container(name="base")
        if command is not None:
            container.command = ["sh", "-c", command]
        if image is not None:
            container.image = image
        config["pod_override"] = k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(namespace=namespace) if namespace else None,
            spec=k8s.V1PodSpec(containers=[container]),
        )
    ti = TaskInstanceDTO(
        id=uuid.uuid4(),
        task_id=task_id,
        dag_id=dag_id,
        run_id=run_id,
        try_number=try_number,
        map_index=map_index,
        dag_version_id=uuid.uuid4(),
        pool_slots=1,
        priority_weight=priority_weight,
        queue="default",
        executor_config=config or None,
    )
    return ExecuteTask(
        ti=ti,
        dag_rel_path=Path("synthetic.py"),
        bundle_info=BundleInfo(name="dags-folder"),
        token="",
        log_path=f"dag_id={dag_id}/run_id={run_id}/task_id={task_id}/attempt={try_number}.log",
    )


def executor_kube_config(template: Path, monkeypatch: Any) -> Any:
    """The provider's ``KubeConfig`` as a scheduler reads it (through ``monkeypatch``'s environment):
    ``template`` as the worker pod template, namespace ``airflow-workers``, image ``repo/airflow:3.3.2``."""
    monkeypatch.setenv("AIRFLOW__KUBERNETES_EXECUTOR__POD_TEMPLATE_FILE", str(template))
    monkeypatch.setenv("AIRFLOW__KUBERNETES_EXECUTOR__NAMESPACE", "airflow-workers")
    monkeypatch.setenv("AIRFLOW__KUBERNETES_EXECUTOR__WORKER_CONTAINER_REPOSITORY", "repo/airflow")
    monkeypatch.setenv("AIRFLOW__KUBERNETES_EXECUTOR__WORKER_CONTAINER_TAG", "3.3.2")
    from airflow.providers.cncf.kubernetes.kube_config import KubeConfig

    return KubeConfig()
