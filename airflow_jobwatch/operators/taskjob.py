"""The operator's Job: what one task try creates and waits for, where, and how its result is read.

:class:`TaskJob` is built by ``KubernetesJobOperator`` once its fields are rendered, and it is all that
the Job's calls (:mod:`~airflow_jobwatch.operators.request`), the in-worker wait
(:mod:`~airflow_jobwatch.operators.inworker`), the resume (:mod:`~airflow_jobwatch.operators.resume`)
and the log copy (:mod:`~airflow_jobwatch.operators.podlogs`) get: the rendered settings as values,
the Kubernetes clients behind a small interface (:class:`KubeApis`), and the two things only the
operator can do, as callables (stop a Job as its ``on_kill`` does; apply ``on_finish_action`` to
the pods). None of those modules imports the operator.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from airflow_jobwatch.triggers.job import JobTrigger, fatal_reasons

if TYPE_CHECKING:
    import datetime

    from kubernetes.client import models as k8s

__all__ = ["KubeApis", "TaskJob"]

#: Which containers' logs are copied: names, one name, ``True`` for all, or None.
LogNames = Iterable[str] | str | Literal[True] | None


class KubeApis(Protocol):
    """The Kubernetes clients the Job's calls go through (upstream's operator creates them on first use,
    from its connection, and keeps them)."""

    @property
    def client(self) -> Any: ...  # CoreV1Api
    @property
    def job_client(self) -> Any: ...  # BatchV1Api
    @property
    def hook(self) -> Any: ...  # KubernetesHook


def _nothing(_: Any) -> None:
    return None


@dataclass(eq=False)
class TaskJob:
    """One task try's Job: the operator's rendered settings, its clients and log, and what the wait
    learnt (the Job created; which logs the in-worker wait streamed)."""

    apis: KubeApis
    log: logging.Logger | Any
    task_id: str
    # where: the connection
    kubernetes_conn_id: str | None
    config_file: str | None
    cluster_context: str | None
    in_cluster: bool | None
    # the wait
    poll_interval: float
    fatal_waiting_reasons: Collection[str] | None
    api_failure_tolerance: float | None
    disruption_retries: int | None
    reattach_on_restart: bool
    # a kill (and a wait that ends while the Job runs): upstream's on_kill arguments
    on_kill_propagation_policy: str
    termination_grace_period: int | None
    delete_pods_on_kill: bool
    # the result
    do_xcom_push: bool
    base_container_name: str
    xcom_path: str
    unwrap_single: bool
    xcom_sidecar_container_security_context: Any
    # the logs
    get_logs: bool
    container_logs: LogNames
    init_container_logs: LogNames
    #: The labels upstream puts on the pods of this task try (empty without a task context).
    try_labels: dict[str, str] = field(default_factory=dict)
    #: Called with the Job once it is created or adopted (the operator keeps it for ``on_kill``).
    created: Callable[[k8s.V1Job], None] = _nothing
    #: Stops a Job the way the operator's ``on_kill`` does (the task ends while its Job still runs).
    stop: Callable[[k8s.V1Job], None] = _nothing
    #: Applies ``on_finish_action`` to the Job's pods once the task has ended.
    finish_pods: Callable[[list[k8s.V1Pod]], None] = _nothing
    #: The Job created or adopted, once it is.
    job: k8s.V1Job | None = None
    #: What the in-worker wait's log followers did: the requested containers of each pod they saw,
    #: and the (pod, container) logs they streamed. Empty when the task deferred or logs are off.
    logs_wanted: dict[str, list[str]] = field(default_factory=dict)
    logs_streamed: set[tuple[str, str]] = field(default_factory=set)

    @property
    def client(self) -> Any:
        return self.apis.client

    @property
    def job_client(self) -> Any:
        return self.apis.job_client

    @property
    def hook(self) -> Any:
        return self.apis.hook

    @property
    def fatal_reasons(self) -> Collection[str]:
        """The container waiting reasons that fail the Job at once (the trigger's own reading)."""
        return fatal_reasons(self.fatal_waiting_reasons)

    def record(self, job: k8s.V1Job) -> k8s.V1Job:
        """Keep ``job`` as this try's Job, and tell the operator."""
        self.job = job
        self.created(job)
        return job

    def trigger(
        self,
        name: str,
        namespace: str,
        uid: str | None,
        *,
        deadline: datetime.datetime | None = None,
        end_task: dict[str, Any] | None = None,
        deferred_at: float | None = None,
        mask_secrets: list[str] | None = None,
    ) -> JobTrigger:
        """The trigger for the Job. ``deadline`` only when deferred: in the worker, Airflow's own
        ``execution_timeout`` (SIGALRM) is the one deadline
        (see :func:`~airflow_jobwatch.operators.inworker.wait_in_worker`)."""
        return JobTrigger(
            name,
            namespace,
            kubernetes_conn_id=self.kubernetes_conn_id,
            config_file=self.config_file,
            cluster_context=self.cluster_context,
            in_cluster=self.in_cluster,
            timeout=deadline,
            poll_interval=self.poll_interval,
            fatal_waiting_reasons=self.fatal_waiting_reasons,
            api_failure_tolerance=self.api_failure_tolerance,
            job_uid=uid,
            # upstream's on_kill always deletes the Job; on_kill_action only governs the pods
            delete_on_kill=True,
            do_xcom_push=self.do_xcom_push,
            base_container_name=self.base_container_name,
            on_kill_propagation_policy=self.on_kill_propagation_policy,
            termination_grace_period=self.termination_grace_period,
            delete_pods_on_kill=self.delete_pods_on_kill,
            disruption_retries=self.disruption_retries,
            end_task=end_task,
            deferred_at=deferred_at,
            mask_secrets=mask_secrets,
        )
