"""JobWatchExecutor: runs each Airflow task in a Kubernetes pod and never loses track of it.

Drop-in for the cncf.kubernetes KubernetesExecutor (``[core] executor =
airflow_jobwatch.executors.JobWatchExecutor``): same ``[kubernetes_executor]`` options where the
meaning is the same, same pod labels and annotations, same ``executor_config`` (``pod_override``,
``pod_template_file``). What differs is the watching side (see :mod:`.watcher` and docs/executor.md):
a 410, a dropped watch, a killed or wedged watcher process or an API outage never loses a task's
end, and every task instance gets exactly one terminal report.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from airflow.configuration import conf
from airflow.executors.base_executor import BaseExecutor

from airflow_jobwatch import config as jobwatch_config
from airflow_jobwatch import metrics
from airflow_jobwatch.compat import executor_cli_commands, executor_conf, kube_config
from airflow_jobwatch.executors.pods import (
    DONE_LABEL,
    JOBWATCH_LABELS,
    UPSTREAM_LABELS,
    WORKER_LABEL,
    build_worker_pod,
    key_from_annotations,
    label_scheme,
    launch_id_of,
    new_launch_id,
    new_pod_name,
)
from airflow_jobwatch.executors.record import PendingCreate, TaskRecord, TaskRecords
from airflow_jobwatch.executors.watcher import PodResult, WatcherSupervisor
from airflow_jobwatch.kube.backoff import Backoff, parse_retry_after

if TYPE_CHECKING:
    from airflow.executors import workloads
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.providers.cncf.kubernetes.kube_config import KubeConfig
    from kubernetes.client import CoreV1Api
    from kubernetes.client import models as k8s

    from airflow_jobwatch.kube.client import ClusterConfig
    from airflow_jobwatch.kube.informer import InformerConfig

SECTION = "jobwatch"
K8S_SECTION = "kubernetes_executor"

# Pod creation retries (403 quota, 409 conflict, 429, 5xx, connection errors): first delay, and
# the bound of the exponential backoff. A task waiting here stays queued; the scheduler's
# [scheduler] task_queued_timeout (600 s by default) is the final bound: it revokes the task.
CREATE_BACKOFF_INITIAL_SECONDS = 1.0
CREATE_BACKOFF_MAX_SECONDS = 60.0
# Timeout of each synchronous API call the scheduler loop makes (create, delete, patch, get): the
# loop must never hang on a black-holed connection. (connect, read) seconds.
API_REQUEST_TIMEOUT = (10.0, 30.0)
# Pod creates in flight at once (threads), unless worker_pods_creation_batch_size is larger. A create
# takes one API round trip (~10-50 ms on a healthy server); 8 in parallel keep up with a scheduler that
# queues hundreds of tasks per second, without looking like a burst to API priority and fairness.
DEFAULT_CREATE_CONCURRENCY = 8
# Tail of a running pod's log shown in the UI (upstream's default for running_pod_log_lines).
RUNNING_POD_LOG_LINES = 100
# [kubernetes_executor] options of upstream's KubernetesExecutor that this executor does not honour: their
# upstream default (as configuration text) and why. One that is set to something else is named in one
# warning at start() (docs/executor.md, "Configuration").
NOT_HONOURED_OPTIONS: dict[str, tuple[str, str]] = {
    "task_publish_max_retries": (
        "0",
        "pod creation errors (403 quota, 409, 429, 5xx) are always retried with backoff while the task "
        "stays queued, until [scheduler] task_queued_timeout",
    ),
    "async_pod_creation": ("False", "pods are always created concurrently, by a thread pool"),
    "pod_creation_max_concurrency": ("0", "[jobwatch] pod_creation_concurrency bounds the creates in flight"),
    "pod_launch_failure_retries": (
        "1",
        "a pod that fails before the task starts is reported failed with its reason; the task's retries apply",
    ),
    "pod_launch_failure_excluded_container_reasons": ("Error", "pod launch failures are not retried"),
    "logs_task_metadata": ("False", "log lines always name the task instance"),
}

# The status file is rewritten at most this often.
STATUS_FILE_INTERVAL_SECONDS = 1.0
# Terminal reports kept for the status file (the demo prints them as a table); older ones are dropped.
STATUS_REPORTS_KEPT = 500
# A gone scheduler's finished pod is cleaned up only once it finished longer ago than the time a live
# scheduler may take to adopt that scheduler's task instances: [scheduler] scheduler_health_check_threshold
# (until it counts as dead) + orphaned_tasks_check_interval (until the next adoption round) + this margin,
# for clock skew between the nodes (the pod's finishedAt) and the scheduler, and loop lag. Before that,
# its task instance may still be queued/running in the database, waiting for an adopter that must find
# the pod to report its end (issue 18 item 5); deleting it would get the task reset and run again.
COMPLETED_POD_GRACE_MARGIN_SECONDS = 60.0
# Issue 21: a worker pod disrupted before any of its containers started cannot have run the task; it is
# launched again for the same try (up to [jobwatch] disruption_relaunches times). The reasons that name a
# disruption, as classify_pod reports them: the pod's status.reason (kubelet eviction, preemption, node
# shutdown or loss) or its DisruptionTarget condition's reason. A local list until kube/states.py's
# disruption rules (written in parallel) are merged. A pod deleted by someone is not among them: that may
# be a user stopping the task.
DISRUPTION_REASONS = frozenset(
    {
        "Evicted",
        "Preempting",
        "NodeShutdown",
        "NodeLost",
        "PreemptionByScheduler",
        "PreemptionByKubeScheduler",
        "EvictionByEvictionAPI",
        "DeletionByTaintManager",
        "DeletionByPodGC",
        "TerminationByKubelet",
        "DisruptionTarget",
    }
)
# Backoff between such relaunches: a preempting scheduler or a node under pressure needs a moment; the
# delay doubles (with jitter) up to the maximum.
RELAUNCH_BACKOFF_INITIAL_SECONDS = 2.0
RELAUNCH_BACKOFF_MAX_SECONDS = 60.0


def _getfloat(section: str, key: str, default: float, source: Any = None) -> float:
    """A float option; ``source`` is a team's ``ExecutorConf`` (Airflow 3.2+ multi-team) or the global conf.

    ``ExecutorConf`` has no ``getfloat``, hence ``get`` and a conversion with a clear error.
    """
    value = (source or conf).get(section, key, fallback=None)
    if value is None or str(value).strip() == "":
        return default
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"[{section}] {key} must be a number of seconds, got {value!r}") from None


def informer_config_from_conf(source: Any = None) -> InformerConfig:
    """Build the watch engine's configuration from the ``[jobwatch]`` section (of a team, if given)."""
    return jobwatch_config.informer_config(source=source)


def cluster_config_from_conf(source: Any = None) -> ClusterConfig:
    """The ``[kubernetes_executor]`` client options (in_cluster, config_file, cluster_context, verify_ssl,
    ssl_ca_cert, TCP keepalive, retries, request timeout), as :mod:`airflow_jobwatch.connections` reads
    them for every process that builds a client (the scheduler's and the watcher's)."""
    from airflow_jobwatch.connections import cluster_config_from_executor_conf

    return cluster_config_from_executor_conf(source)


def _explain(err: Any, *, verb: str, resource: str, namespace: str | None) -> str:
    """An API error for a log line or a task's failure: the explained 401/403 (what to grant), else
    status, reason and the server's message. Never the response headers the exception would print."""
    from airflow_jobwatch.kube.errors import access_denied_from_exception

    denied = access_denied_from_exception(err, verb=verb, resource=resource, namespace=namespace)
    if denied is not None:
        return denied.message()
    status = getattr(err, "status", None)
    if status is None:
        return f"{type(err).__name__}: {err}"
    return f"{status} {getattr(err, 'reason', '')}: {_api_message(err)}"


class _Conflict(Exception):
    """A create answered 409 AlreadyExists; ``verdict`` is what the existing pod turned out to be:
    ``ours`` (an earlier attempt's), ``someone_else`` or ``retry`` (could not tell)."""

    def __init__(self, verdict: str, error: str) -> None:
        super().__init__(f"{verdict}: {error}")
        self.verdict = verdict
        self.error = error


class JobWatchExecutor(BaseExecutor):
    """Executor that runs each task instance in its own Kubernetes pod.

    Options: ``[kubernetes_executor]`` (namespace, multi_namespace_mode(+_namespace_list),
    pod_template_file, worker_container_repository/tag, in_cluster, config_file, cluster_context,
    delete_worker_pods, delete_worker_pods_on_failure,
    worker_pod_pending_fatal_container_state_reasons, worker_pods_creation_batch_size) and
    ``[jobwatch]`` (watch timeouts, backoff, health, status file). See docs/executor.md.
    """

    supports_ad_hoc_ti_run: bool = True
    # The scheduler gives each hand-over to QUEUED a fresh external_executor_id, in the same database write
    # (Airflow 3.3+; older versions ignore this): the launch id that an adopter reads back.
    pre_assigns_external_executor_id = True
    supports_multi_team: bool = True
    is_local: bool = False
    is_production: bool = True
    serve_logs: bool = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)

        # Airflow 3.2+ multi-team: BaseExecutor sets self.conf to an ExecutorConf of this executor's
        # team, which reads AIRFLOW__<TEAM>___KUBERNETES_EXECUTOR__... / [<team>=kubernetes_executor]
        # before the global options. Every option is read through it, as upstream's executor does.
        # (Airflow 3.1: the global conf; see airflow_jobwatch.compat.)
        self.conf = executor_conf(self)
        self.kube_config: KubeConfig = kube_config(self.conf)
        if getattr(self, "team_name", None):
            # A team's [core] parallelism (upstream does the same; without a team the constructor's wins).
            self.parallelism = self.kube_config.parallelism
        # Exactly upstream's list (its KubeConfig reads the option): unset -> the provider's default
        # (CreateContainerConfigError, ErrImagePull, CreateContainerError, ImageInspectError,
        # InvalidImageName); set to an empty value -> no fail-fast at all.
        self.fatal_waiting_reasons: frozenset[str] = frozenset(
            r for r in self.kube_config.worker_pod_pending_fatal_container_state_reasons if r
        )
        self.scheduler_job_id: str | None = None
        self.supervisor: WatcherSupervisor | None = None
        self._core_v1: CoreV1Api | None = None
        # Everything known about each key's current launch, and the index of the pods still watched: every
        # path below is a transition of these records, and ``running`` follows from them (_settle).
        self.records = TaskRecords()
        self._create_paused_until = 0.0  # after a 429 Retry-After
        self._cleanup: list[tuple[str, str, bool]] = []  # (ns, name, delete?) retried until done
        self._next_completed_cleanup = 0.0  # first sync() cleans up at once, as upstream does
        self._completed_search: Future[list[dict[str, Any]]] | None = None
        # Creates in flight in the creator threads: key -> (create, namespace, name, future).
        self._inflight: dict[TaskInstanceKey, tuple[PendingCreate, str, str, Future[Any]]] = {}
        self._create_pool: ThreadPoolExecutor | None = None
        # Cleanups (delete / label done) in flight: (ns, name) -> (op, future).
        self._cleanup_inflight: dict[tuple[str, str], tuple[tuple[str, str, bool], Future[Any]]] = {}
        self._create_concurrency = max(
            1, int(_getfloat(SECTION, "pod_creation_concurrency", DEFAULT_CREATE_CONCURRENCY, self.conf))
        )
        self._counters: dict[str, int] = {
            "pods_launched": 0,
            "create_retries": 0,
            "create_failures": 0,
            "success": 0,
            "failed": 0,
            "adopted": 0,
            "completed_pods_cleaned": 0,
            "stale_pods_cleaned": 0,  # pods of an earlier launch of a relaunched key: cleaned, not reported
            "left_for_adoption": 0,  # pods that ended while end() ran: left as they are for the next scheduler
            "disruption_relaunches": 0,  # pods disrupted before they started, launched again for the same try
        }
        self._disruption_relaunches = int(
            jobwatch_config.get_float("disruption_relaunches", minimum=0, source=self.conf)
        )
        self._reports: deque[dict[str, Any]] = deque(maxlen=STATUS_REPORTS_KEPT)
        self._status_file = jobwatch_config.get_str("executor_status_file", source=self.conf)
        # Which labels mark our pods: upstream's (default; adoptable across a switch) or our own (to run
        # beside the upstream KubernetesExecutor in one scheduler). See docs/executor.md, "Hybrid".
        self.labels = label_scheme(jobwatch_config.get_str("worker_pod_labels", source=self.conf))
        self._status_written_at = 0.0
        self._restarts_reported = 0  # watcher restarts already sent as a metric
        self._last_result_at: float | None = None  # when the watcher last reported a pod change
        self._quota_waiting = 0  # tasks whose create waits for ResourceQuota room (the gauge's last value)

    # ------------------------------------------------------------------------------------------
    # Kubernetes client (lazy: the API server builds executors only to call get_task_log)
    # ------------------------------------------------------------------------------------------

    @property
    def _request_timeout(self) -> Any:
        """``kube_client_request_args["_request_timeout"]`` if configured, else API_REQUEST_TIMEOUT."""
        configured = self.kube_config.kube_client_request_args.get("_request_timeout")
        return configured if configured is not None else API_REQUEST_TIMEOUT

    @property
    def _create_args(self) -> dict[str, Any]:
        """What upstream passes to create_namespaced_pod: kube_client_request_args, with our timeout."""
        return {**self.kube_config.kube_client_request_args, "_request_timeout": self._request_timeout}

    @property
    def core_v1(self) -> CoreV1Api:
        if self._core_v1 is None:
            factory = self._client_factory("client_factory")
            if factory is not None:  # upstream's meaning: it replaces the client construction entirely
                self._core_v1 = factory()
                return self._core_v1
            from kubernetes.client import CoreV1Api

            from airflow_jobwatch.kube.client import sync_api_client

            self._core_v1 = CoreV1Api(sync_api_client(cluster_config_from_conf(self.conf)))
        return self._core_v1

    def _client_factory(self, option: str) -> Any:
        """The callable named by ``[kubernetes_executor] <option>`` (an import path), or None."""
        path = (self.conf.get(K8S_SECTION, option, fallback=None) or "").strip()
        if not path:
            return None
        from airflow.exceptions import AirflowConfigException

        from airflow_jobwatch.executors.watcher.messages import import_callable

        try:
            return import_callable(path)
        except ImportError as err:
            raise AirflowConfigException(
                f"[{K8S_SECTION}] {option} = {path!r} cannot be imported ({err}); it must be the import "
                f"path of a zero-argument callable returning a Kubernetes CoreV1Api client"
            ) from None

    @property
    def running_pod_log_lines(self) -> int:
        """``[kubernetes_executor] running_pod_log_lines``: the tail of a running pod's log shown in the UI."""
        value = self.conf.get(K8S_SECTION, "running_pod_log_lines", fallback=None)
        try:
            lines = int(value) if value not in (None, "") else RUNNING_POD_LOG_LINES
        except ValueError:
            lines = 0
        if lines <= 0:
            raise ValueError(
                f"[{K8S_SECTION}] running_pod_log_lines must be a whole number greater than 0, got {value!r}"
            )
        return lines

    def _check_upstream_options(self) -> None:
        """At start: one warning naming every upstream ``[kubernetes_executor]`` option that is set but not
        honoured here, with the reason; and the client factories upstream's executor takes checked."""
        unhonoured = []
        for option, (default, why) in NOT_HONOURED_OPTIONS.items():
            value = self.conf.get(K8S_SECTION, option, fallback=None)
            if value is not None and str(value).strip().lower() != default.lower():
                unhonoured.append(f"{option} = {value} ({why})")
        if unhonoured:
            self.log.warning(
                "These [%s] options are set but not honoured by JobWatchExecutor (docs/executor.md): %s",
                K8S_SECTION,
                "; ".join(unhonoured),
            )
        sync_factory = self._client_factory("client_factory")
        async_factory = self._client_factory("async_client_factory")
        if sync_factory is not None and async_factory is None:
            from airflow.exceptions import AirflowConfigException

            raise AirflowConfigException(
                f"[{K8S_SECTION}] client_factory is set, so async_client_factory must be set too: "
                f"JobWatchExecutor's watcher watches pods with kubernetes_asyncio, and a client built "
                f"from [{K8S_SECTION}] would not carry your factory's credentials. Set it to the import "
                f"path of a callable returning a kubernetes_asyncio.client.CoreV1Api."
            )

    def _read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self.core_v1.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=self._request_timeout
            )
        except ApiException as err:
            if err.status == HTTPStatus.NOT_FOUND:
                return None
            raise
        pod: dict[str, Any] = json.loads(resp.data)
        return pod

    def _namespaces(self) -> list[str | None]:
        kc = self.kube_config
        if kc.multi_namespace_mode:
            if kc.multi_namespace_mode_namespace_list:
                return [ns.strip() for ns in kc.multi_namespace_mode_namespace_list if ns.strip()]
            return [None]
        return [kc.kube_namespace or "default"]

    # ------------------------------------------------------------------------------------------
    # BaseExecutor
    # ------------------------------------------------------------------------------------------

    def start(self) -> None:
        from airflow.exceptions import AirflowConfigException

        from airflow_jobwatch.kube.client import ClusterConfigError

        self._check_upstream_options()
        try:
            # As upstream's start() (get_kube_client): an unusable kubeconfig or in-cluster environment
            # stops the scheduler here, with the reason, instead of crash-looping the watcher for ever.
            cluster = cluster_config_from_conf(self.conf)
            _ = self.core_v1
        except ClusterConfigError as err:
            raise AirflowConfigException(
                f"JobWatchExecutor cannot start: the Kubernetes client cannot be configured from "
                f"[kubernetes_executor]: {err}"
            ) from None
        self.scheduler_job_id = str(self.job_id)
        self.log.info(
            "Starting JobWatchExecutor (scheduler job %s, namespaces %s)",
            self.scheduler_job_id,
            self._namespaces(),
        )
        self.supervisor = WatcherSupervisor(
            cluster=cluster,
            namespaces=self._namespaces(),
            label_selector=self.labels.selector(self.scheduler_job_id),
            informer_config=informer_config_from_conf(self.conf),
            fatal_waiting_reasons=self.fatal_waiting_reasons,
            unresponsive_after=jobwatch_config.get_float(
                "watcher_unresponsive_after_seconds", source=self.conf
            ),
            restart_backoff_initial=jobwatch_config.get_float("backoff_initial_seconds", source=self.conf),
            restart_backoff_max=jobwatch_config.get_float("backoff_max_seconds", source=self.conf),
            name=f"jobwatch-executor-{self.scheduler_job_id}",
            async_client_factory=(self.conf.get(K8S_SECTION, "async_client_factory", fallback=None) or None),
        )
        self.supervisor.start()

    def _process_workloads(self, workload_items: Sequence[workloads.All]) -> None:
        """Accept workloads: each takes an executor slot now; its pod is created in :meth:`sync`.

        Creation is deferred so that API errors (quota, 429, 5xx, outage) only delay a pod, with backoff,
        and never lose the workload or block the scheduler loop on a retry.
        """
        from airflow.executors.workloads import ExecuteTask

        for w in workload_items:
            if not isinstance(w, ExecuteTask):
                raise RuntimeError(f"{type(self).__name__} cannot run workloads of type {type(w).__name__}")
            key = w.ti.key
            del self.queued_tasks[key]
            # The scheduler names each hand-over to QUEUED with a fresh external_executor_id (this executor
            # opts in to the pre-assigned id): the pod carries it, so an adopter can tell the current launch
            # from an earlier one by what the database holds. Older Airflow: an id of our own.
            launch_id = getattr(w.ti, "external_executor_id", None) or new_launch_id()
            previous = self.records.queue(key, w, launch_id)
            self._settle(key)
            if previous is not None:
                # The key keeps its try_number across deferral and resumption, reschedule-mode sensors and
                # some clears: the earlier launch's pod (if any) stays watched, is cleaned up when it ends,
                # and its end is not reported.
                self.log.info(
                    "%s is launched again (launch %s) before its earlier launch %s ended; the earlier "
                    "launch's pod will be cleaned up when it ends and its end will not be reported",
                    key,
                    launch_id,
                    previous,
                )

    def _settle(self, key: TaskInstanceKey) -> None:
        """``running`` follows from the records: the one place where a key takes or frees its slot."""
        if key in self.records:
            self.running.add(key)
        else:
            self.running.discard(key)

    def sync(self) -> None:
        """One scheduler heartbeat: watcher results first (they free slots), then cleanup, then creates."""
        if self.supervisor is None:
            return
        for result in self.supervisor.poll():
            self._last_result_at = time.monotonic()
            self._on_result(result)
        restarts = self.supervisor.counters.restarts
        metrics.watcher_restarts(restarts - self._restarts_reported)
        self._restarts_reported = restarts
        now = time.monotonic()
        if now >= self._next_completed_cleanup and self._completed_search is None:
            interval = _getfloat("scheduler", "orphaned_tasks_check_interval", 300.0)
            self._next_completed_cleanup = now + interval
            # The metadata-database query and the LIST run in the API threads, off the scheduler loop.
            self._completed_search = self._pool().submit(self._find_completed_pods)
        if self._completed_search is not None and self._completed_search.done():
            search, self._completed_search = self._completed_search, None
            if search.cancelled():
                pass
            elif search.exception() is None:
                self._queue_completed_cleanup(search.result())
            else:
                self.log.warning(
                    "Could not list finished worker pods of gone schedulers: %s", search.exception()
                )
        self._retry_cleanup()
        self._launch_pending()
        waiting = sum(
            1 for r in self.records.pending() if r.create is not None and r.create.waiting_for_quota
        )
        if waiting != self._quota_waiting:
            self._quota_waiting = waiting
            metrics.tasks_waiting_for_quota(waiting)
        self._write_status()

    @staticmethod
    def get_cli_commands() -> list[Any]:
        """``airflow jobwatch``: on Airflow 3.1 only (3.2+ registers it from provider info; see compat)."""
        return executor_cli_commands()

    def end(self) -> None:
        """Stop the watcher and the API threads; never raises. Every pod is left for the next scheduler.

        The scheduler calls this after its loop has exited: it never reads the event buffer again. So a
        pod whose end the watcher delivers now is neither reported (nobody would read the event) nor
        cleaned up (deleting it or labelling it done would hide it from the next scheduler's adoption,
        which would then reset the task and run it again with no failure recorded). It keeps its
        labels, and adoption reports it as a pod that finished while no scheduler watched it. The
        clean-ups of pods whose end was reported earlier are still sent; queued creates and clean-ups
        that did not start are dropped (a task instance without a pod is reset by the next scheduler).
        """
        if self.supervisor is None:
            return
        self.log.info("Shutting down JobWatchExecutor")
        try:
            ended = [r for r in self.supervisor.stop() if r.terminal]
            if ended:
                self._counters["left_for_adoption"] += len(ended)
                self.log.info(
                    "%d pod(s) ended while the executor shut down; left unreported and as they are for the "
                    "next scheduler's adoption: %s",
                    len(ended),
                    ", ".join(f"{r.namespace}/{r.name} ({r.phase})" for r in ended),
                )
            self._retry_cleanup()
            self._stop_creates(wait=True)  # waits for the calls already running; queued ones are cancelled
            self._retry_cleanup(submit=False)  # reads their answers (what failed is left to the adopter)
        except Exception:
            # Nothing here may stop the scheduler's shutdown (it ends its other executors after this one).
            self.log.exception("Error while shutting down JobWatchExecutor; its pods are left for adoption")
        finally:
            try:
                self._write_status(force=True)
            except Exception:
                self.log.exception("Could not write the executor status file at shutdown")
            self.supervisor = None

    def terminate(self) -> None:
        """SIGTERM on the scheduler: stop the watcher at once (pods are left for adoption)."""
        self._stop_creates(wait=False)
        if self.supervisor is not None:
            self.supervisor.stop(timeout=1.0)
            self.supervisor = None

    def _stop_creates(self, *, wait: bool) -> None:
        """Stop the API threads; with ``wait``, the answers of creates already sent are handled."""
        if self._create_pool is None:
            return
        self._create_pool.shutdown(wait=wait, cancel_futures=True)
        self._create_pool = None
        if wait:
            self._collect_creates()

    # ------------------------------------------------------------------------------------------
    # Launching
    # ------------------------------------------------------------------------------------------

    def _launch_pending(self) -> None:
        """Hand pending workloads' creates to the creator threads; handle the answers that came back.

        The creates themselves run in a small thread pool (``[jobwatch] pod_creation_concurrency``), so a
        slow API server (or a create that takes its whole 30 s timeout) never holds the scheduler loop:
        ``sync()`` only builds pods, submits them and reads finished answers.
        """
        keep_going = self._collect_creates()
        now = time.monotonic()
        pending = self.records.pending()
        if not keep_going or now < self._create_paused_until or not pending:
            return
        cap = max(1, self.kube_config.worker_pods_creation_batch_size, self._create_concurrency)
        in_flight = len(self._inflight) + sum(1 for r in pending if r.create is not None and r.create.build)
        for record in pending:
            launch = record.create
            if launch is None or record.key in self._inflight or launch.not_before > now:
                continue
            building = launch.build is not None
            if in_flight >= cap and not building:
                continue
            if self._start_create(record, launch) and not building:
                in_flight += 1

    def _start_create(self, record: TaskRecord, launch: PendingCreate) -> bool:
        """Build the pod (once), make sure its namespace is watched, track it, submit its create."""
        assert self.scheduler_job_id is not None and self.supervisor is not None
        key = record.key
        if launch.pod is None or launch.body is None:
            # Building a pod (template, PodGenerator.construct_pod, pod_mutation_hook, serialization) costs
            # tens of milliseconds: done in the API threads too, so that a burst of open slots does not
            # stretch one heartbeat. The create is submitted from the heartbeat after the build is done.
            if launch.build is None:
                launch.build = self._pool().submit(self._build, key, record.workload, record.launch_id)
                return True
            if not launch.build.done():
                return True
            build, launch.build = launch.build, None
            err = build.exception()
            if err is not None:
                self._fail_launch(key, f"could not build the worker pod: {type(err).__name__}: {err}")
                return False
            launch.pod, launch.body = build.result()
        pod = launch.pod
        namespace, name = pod.metadata.namespace, pod.metadata.name
        if not self._ensure_watched(key, namespace):
            return False
        body = launch.body
        # Tracked from the moment the create is sent, not when it is answered: if the answer is lost
        # (a timeout on a create the server carried out), the pod's events are still reported, and a
        # short task that ends before the retry is not dropped as "not ours".
        self.supervisor.track(namespace, name, key, confirmed=False)
        self.records.create_sent(key, (namespace, name))
        future = self._pool().submit(self._create_call, key, namespace, name, body)
        self._inflight[key] = (launch, namespace, name, future)
        return True

    def _create_call(self, key: TaskInstanceKey, namespace: str, name: str, body: dict[str, Any]) -> Any:
        """One create, in an API thread. A 409 is looked into here too (a GET, maybe a PATCH), so that
        neither ever runs on the scheduler loop; what it found is raised as a :class:`_Conflict`."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self.core_v1.create_namespaced_pod(namespace, body, **self._create_args)
        except ApiException as err:
            if err.status != HTTPStatus.CONFLICT:
                raise
            error = f"{err.status} {err.reason}: {_api_message(err)}"
        raise self._resolve_conflict(key, namespace, name, error)

    def _build(
        self, key: TaskInstanceKey, workload: workloads.ExecuteTask, launch_id: str
    ) -> tuple[k8s.V1Pod, dict[str, Any]]:
        assert self.scheduler_job_id is not None
        pod = build_worker_pod(
            workload,
            kube_config=self.kube_config,
            scheduler_job_id=self.scheduler_job_id,
            pod_name=new_pod_name(key),
            labels=self.labels,
            launch_id=launch_id,
        )
        return pod, self.core_v1.api_client.sanitize_for_serialization(pod)

    def _collect_creates(self) -> bool:
        """Handle the creates that were answered. Returns False if creation must pause this loop."""
        keep_going = True
        for key, (launch, namespace, name, future) in list(self._inflight.items()):
            if not future.done():
                continue
            del self._inflight[key]
            if future.cancelled():
                # Never sent (the API threads were shut down by end()): the task instance stays queued in
                # the database and the next scheduler finds no pod for it (reset, launched again).
                assert self.supervisor is not None
                self.supervisor.untrack(namespace, name)
                self.records.create_not_sent((namespace, name))
                continue
            record = self.records.get(key)
            if record is None or record.create is not launch:
                # Revoked, or already seen by the watch (launched, maybe even reported) meanwhile.
                if launch.revoked and future.exception() is None:
                    self._cleanup.append((namespace, name, True))
                continue
            keep_going = self._finish_create(key, launch, namespace, name, future.exception()) and keep_going
        return keep_going

    def _finish_create(
        self,
        key: TaskInstanceKey,
        launch: PendingCreate,
        namespace: str,
        name: str,
        error: BaseException | None,
    ) -> bool:
        """The answer to one create. Returns False if pod creation must pause (429, API unreachable)."""
        from kubernetes.client.exceptions import ApiException

        assert self.supervisor is not None
        if error is None:
            self._launched(key, namespace, name)
            return True
        err = error
        if isinstance(err, _Conflict):
            metrics.pod_create_error(HTTPStatus.CONFLICT)
            return self._on_conflict(key, launch, namespace, name, err)
        if isinstance(err, ApiException):
            status = err.status or 0
            metrics.pod_create_error(status)
            message = _api_message(err)
            retry_after = _retry_after(err)
            transient = (
                (status == HTTPStatus.FORBIDDEN and "exceeded quota" in message)
                or status == HTTPStatus.TOO_MANY_REQUESTS
                or status >= 500
                or status == 0
            )
            if not transient:
                self.supervisor.untrack(namespace, name)
                self.records.create_not_sent((namespace, name))
                self._fail_launch(
                    key,
                    f"the API server rejected the worker pod {namespace}/{name}: "
                    + _explain(err, verb="create", resource="pods", namespace=namespace),
                )
                return True
            self._retry_launch(key, launch, f"{status} {err.reason}: {message}", retry_after)
            if status == HTTPStatus.TOO_MANY_REQUESTS or retry_after is not None:
                self._create_paused_until = max(self._create_paused_until, launch.not_before)
                return False
            return True
        # connection refused/reset, timeouts, TLS: the API is unreachable
        metrics.pod_create_error(0)
        self._retry_launch(key, launch, f"{type(err).__name__}: {err}", None)
        return False  # the next create would fail the same way; wait for the backoff

    def _resolve_conflict(self, key: TaskInstanceKey, namespace: str, name: str, error: str) -> _Conflict:
        """What a 409 AlreadyExists is (runs in an API thread): an earlier attempt of ours, or someone else's pod.

        Ours (its annotations name this very try) -> created, relabelled here if another scheduler's label
        is on it. Someone else's -> the next attempt takes a new name. Unknown (the GET or the PATCH
        failed, or the pod has just gone) -> retried later with backoff.
        """
        assert self.scheduler_job_id is not None
        try:
            pod = self._read_pod(namespace, name)
        except Exception as err:
            return _Conflict("retry", f"{error}; reading the existing pod failed: {err}")
        if pod is None:
            return _Conflict("retry", f"{error}; the existing pod is gone now")
        meta = pod.get("metadata") or {}
        if key_from_annotations(meta.get("annotations") or {}) != key:
            return _Conflict("someone_else", error)
        from airflow.providers.cncf.kubernetes.pod_generator import make_safe_label_value

        mine = make_safe_label_value(self.scheduler_job_id)
        if (meta.get("labels") or {}).get(self.labels.worker) != mine:
            try:
                self.core_v1.patch_namespaced_pod(
                    name,
                    namespace,
                    {"metadata": {"labels": {self.labels.worker: mine}}},
                    _request_timeout=self._request_timeout,
                )
            except Exception as err:
                return _Conflict("retry", f"{error}; relabelling our pod failed: {err}")
        return _Conflict("ours", error)

    def _on_conflict(
        self, key: TaskInstanceKey, launch: PendingCreate, namespace: str, name: str, conflict: _Conflict
    ) -> bool:
        """Act on what :meth:`_resolve_conflict` found (on the scheduler loop, without an API call)."""
        assert self.supervisor is not None
        if conflict.verdict == "ours":
            # An earlier attempt did create it (its answer was lost): that is a success.
            self._launched(key, namespace, name)
            return True
        if conflict.verdict == "retry":
            self._retry_launch(key, launch, conflict.error, None)
            return True
        self.supervisor.untrack(namespace, name)
        self.records.create_not_sent((namespace, name))
        launch.pod = launch.body = None  # rebuilt with a new name on the next attempt
        launch.not_before = 0.0
        self._counters["create_retries"] += 1
        self.log.warning(
            "Pod %s/%s already exists and is not the pod of %s (%s); creating it under a new name",
            namespace,
            name,
            key,
            conflict.error,
        )
        return True

    def _ensure_watched(self, key: TaskInstanceKey, namespace: str) -> bool:
        """Make sure a pod in ``namespace`` will be watched, or fail the task at once saying why.

        A ``pod_override`` may put a pod outside the configured namespaces. With an explicit
        ``multi_namespace_mode_namespace_list`` that namespace is forbidden (the deployment declared
        where workers may run, and RBAC is usually granted there only); otherwise the namespace gets
        its own watcher, so the pod's end is never missed.
        """
        assert self.supervisor is not None
        if self.supervisor.watches(namespace):
            return True
        kc = self.kube_config
        if kc.multi_namespace_mode and kc.multi_namespace_mode_namespace_list:
            listed = ", ".join(str(n) for n in self._namespaces())
            self._fail_launch(
                key,
                f"the task's pod_override puts its pod in namespace {namespace!r}, which is not in "
                f"[kubernetes_executor] multi_namespace_mode_namespace_list ({listed}); the executor "
                "watches only those. Add the namespace to the list, or remove it from pod_override.",
            )
            return False
        self.supervisor.add_namespace(namespace)
        return True

    def _launched(self, key: TaskInstanceKey, namespace: str, name: str) -> None:
        assert self.supervisor is not None
        record = self.records.get(key)
        launch = record.create if record is not None else None
        metrics.pod_created(launch_seconds=time.monotonic() - launch.accepted_at if launch else 0.0)
        self.records.created(key, (namespace, name))
        self.supervisor.track(namespace, name, key)
        self._counters["pods_launched"] += 1
        self.log.info("Created worker pod %s/%s for %s", namespace, name, key)

    def _retry_launch(
        self, key: TaskInstanceKey, launch: PendingCreate, error: str, retry_after: float | None
    ) -> None:
        if launch.backoff is None:
            # No reset: a task's create keeps backing off until it succeeds or the scheduler's
            # task_queued_timeout revokes it. Retry-After is honoured up to the Backoff's cap (5 min).
            launch.backoff = Backoff(
                initial_seconds=CREATE_BACKOFF_INITIAL_SECONDS,
                max_seconds=CREATE_BACKOFF_MAX_SECONDS,
                reset_after_seconds=float("inf"),
            )
        now = time.monotonic()
        delay = launch.backoff.failure(now, retry_after=retry_after)
        launch.attempts += 1
        launch.not_before = now + delay
        launch.last_error = error
        self._counters["create_retries"] += 1
        why = _retry_reason(error)
        launch.waiting_for_quota = why.startswith("exceeded quota")
        # One line per task and per change of reason (issue 21): a quota that stays full for ten minutes
        # would otherwise log every attempt of every waiting task. Each attempt is still logged at DEBUG.
        changed = why != launch.retry_reason
        launch.retry_reason = why
        (self.log.warning if changed else self.log.debug)(
            "Could not create the worker pod of %s (attempt %d): %s. The task stays queued; retrying in %.1f s%s",
            key,
            launch.attempts,
            error,
            delay,
            " (further attempts failing the same way are logged at DEBUG)" if changed else "",
        )

    def _fail_launch(self, key: TaskInstanceKey, reason: str) -> None:
        record = self.records.end(key)
        self._counters["create_failures"] += 1
        self.log.error("Failing %s: %s", key, reason)
        self._append_task_log(record.workload if record else None, key, reason)
        self.fail(key, reason)
        self._settle(key)
        self._report(key, pod=None, state="failed", reason="PodCreationFailed", gap=False)

    def _report(
        self, key: TaskInstanceKey, *, pod: str | None, state: str, reason: str | None, gap: bool
    ) -> None:
        """Record a task's outcome for the status file's ``reports`` (task -> pod -> state/reason)."""
        self._reports.append(
            {
                "dag_id": key.dag_id,
                "task_id": key.task_id,
                "run_id": key.run_id,
                "map_index": key.map_index,
                "try_number": key.try_number,
                "pod": pod,
                "state": state,
                "reason": reason,
                "found_after_watcher_gap": gap,
            }
        )

    # ------------------------------------------------------------------------------------------
    # Results
    # ------------------------------------------------------------------------------------------

    def _on_result(self, result: PodResult) -> None:
        key = cast("TaskInstanceKey", result.key)
        ref = (result.namespace, result.name)
        if not self.records.is_current(key, ref):
            if result.terminal:
                self._stale_pod_ended(key, result)
            return
        record = self.records.get(key)
        assert record is not None
        if record.create is not None:
            # The create's answer was lost (or has not come yet), but the pod exists: it is launched.
            self._launched(key, result.namespace, result.name)
        if result.adopted:
            # Another scheduler adopted the pod (it took this one for dead): the task is that scheduler's
            # now. As upstream's ADOPTED state: free the slot, report nothing. The record goes with it, so
            # that the task can be adopted back if that scheduler dies.
            self.records.end(key, ref)
            self._settle(key)
            self.log.warning("Task %s: pod %s/%s was %s", key, result.namespace, result.name, result.message)
            return
        if not result.terminal:
            if result.phase == "running":
                self.records.seen_running(key, ref)
                # The launch id as the event's info: the scheduler stores it as the task instance's
                # external_executor_id, which is how an adopter tells the current launch's pod.
                self.running_state(key, record.launch_id)
            return
        where = f"pod {result.namespace}/{result.name}"
        # (An adopted pod has no workload here to launch again: it fails as before.)
        disrupted = self._disrupted_before_start(record, result) if record.workload is not None else None
        if disrupted is not None and self._relaunch_after_disruption(record, result, disrupted):
            return
        self.records.end(key, ref)
        history = record.disruptions
        if result.phase == "succeeded":
            # execute_workload exits 0 whatever the task did; the task recorded its own state through
            # the execution API. SUCCESS here means "the worker finished"; if the task instance is
            # still queued/running the scheduler treats it as killed externally (docs/executor.md).
            self._counters["success"] += 1
            self.success(key, f"{where} succeeded")
            failed = False
        else:
            self._counters["failed"] += 1
            reason = result.reason or "Failed"
            info = f"{where} failed: {reason}: {result.message}".rstrip(": ")
            if disrupted is not None:
                info = (
                    f"the worker pod was disrupted before any of its containers started {len(history)} "
                    f"times, more than [jobwatch] disruption_relaunches = {self._disruption_relaunches} "
                    f"allows: " + "; ".join(history)
                )
            elif result.disruption:
                # The cluster ended it: say so first, in the task's words, then the details.
                info = f"{where} was {result.disruption}; the task did not end by itself. {reason}: {result.message}"
                metrics.pod_disrupted(reason)
            self.log.warning("Task %s: %s", key, info)
            self._append_task_log(record.workload, key, info)
            self.fail(key, info)
            failed = True
        self._settle(key)
        metrics.terminal_report("failed" if failed else "success", after_watcher_gap=result.gap)
        self._report(
            key,
            pod=f"{result.namespace}/{result.name}",
            state="failed" if failed else "success",
            reason=result.reason,
            gap=result.gap,
        )
        self._clean_up_finished(result)

    def _disrupted_before_start(self, record: TaskRecord, result: PodResult) -> str | None:
        """What disrupted a failed pod none of whose containers ever started, or None.

        A pod this executor saw running has started, whatever its final status says (a final status can
        lack every start mark: ContainerStatusUnknown with no ``startedAt``, or a pod GC write after the
        kubelet's last updates were lost).
        """
        if record.seen_running:
            return None
        if result.phase != "failed" or result.started is not False or result.gap:
            return None
        if result.reason not in DISRUPTION_REASONS:
            return None
        return f"pod {result.namespace}/{result.name}: {result.reason}: {result.message}".rstrip(": .")

    def _relaunch_after_disruption(self, record: TaskRecord, result: PodResult, disruption: str) -> bool:
        """Launch the record's task again for the same try after its pod was disrupted before it started.

        Such a pod cannot have run the task (its worker never started, so it never told Airflow's
        execution API that it runs): nothing is reported, the task stays queued and keeps its slot, and
        a new pod is created after a backoff; the disrupted pod is deleted. Returns False past
        ``[jobwatch] disruption_relaunches``: the task then fails with a message naming every disruption.
        """
        key = record.key
        if len(record.disruptions) + 1 > self._disruption_relaunches:
            record.disruptions.append(disruption)
            return False
        backoff = record.relaunch_backoff or Backoff(
            initial_seconds=RELAUNCH_BACKOFF_INITIAL_SECONDS,
            max_seconds=RELAUNCH_BACKOFF_MAX_SECONDS,
            reset_after_seconds=float("inf"),
        )
        now = time.monotonic()
        delay = backoff.failure(now)
        self.records.relaunch(key, (result.namespace, result.name), disruption, backoff, now + delay)
        count = len(record.disruptions)
        self._counters["disruption_relaunches"] += 1
        metrics.disruption_relaunch(result.reason or "Disrupted")
        message = (
            f"{disruption}. No container of the pod had started, so the task never ran: launching it again "
            f"for the same try in {delay:.1f} s (relaunch {count} of at most "
            f"{self._disruption_relaunches}, [jobwatch] disruption_relaunches)"
        )
        self.log.warning("Task %s: %s", key, message)
        self._append_task_log(record.workload, key, message, level="warning")
        self._report(
            key, pod=f"{result.namespace}/{result.name}", state="relaunched", reason=result.reason, gap=False
        )
        self._clean_up_finished(result, delete=True)
        return True

    def _stale_pod_ended(self, key: TaskInstanceKey, result: PodResult) -> None:
        """A pod of an earlier launch of ``key`` ended: clean it up as any finished pod, report nothing.

        Reporting it would hand the scheduler an end that belongs to no launch it waits for: with the
        task instance queued again (same try), Airflow's ``process_executor_events`` would fail it as
        "finished although the task says it's queued", and the key would leave ``running`` while its
        current pod still launches.
        """
        ref = (result.namespace, result.name)
        owner = self.records.stale_ended(ref)
        current = self.records.get(key)
        self._counters["stale_pods_cleaned"] += 1
        metrics.stale_launch_pod()
        self.log.info(
            "Pod %s/%s of an earlier launch (%s) of %s ended (%s%s); not reported, as the current launch "
            "of that key is %s. Cleaning it up.",
            *ref,
            owner[1] if owner else "unknown",
            key,
            result.phase,
            f", {result.reason}" if result.reason else "",
            current.launch_id if current is not None else "none here (revoked, finished or not adopted)",
        )
        self._clean_up_finished(result)

    def _clean_up_finished(self, result: PodResult, *, delete: bool = False) -> None:
        """Delete a finished pod or label it done, per ``delete_worker_pods*`` (as upstream does).
        ``delete``: deleted whatever those say (a pod a relaunch leaves behind)."""
        if result.gap or result.reason == "Deleted":
            return  # nothing left to clean up
        if delete:
            self._cleanup.append((result.namespace, result.name, True))
            return
        failed = result.phase != "succeeded"
        kc = self.kube_config
        # A pod that "failed" while Kubernetes still has it Pending (ErrImagePull...) is deleted in
        # any case: left alone it could still start, and run a try Airflow already gave up on.
        pending_failure = failed and result.reason in self.fatal_waiting_reasons
        delete = pending_failure or (
            kc.delete_worker_pods and (not failed or kc.delete_worker_pods_on_failure)
        )
        self._cleanup.append((result.namespace, result.name, delete))

    def _retry_cleanup(self, *, submit: bool = True) -> None:
        """Delete (or label done) the pods whose report is out, from the API threads; retry what failed.

        Like the creates, these calls run in the thread pool: hundreds of pods ending at once would
        otherwise cost the scheduler loop one API round trip each. 404 means done already.
        """
        from kubernetes.client.exceptions import ApiException

        for ref, (op, future) in list(self._cleanup_inflight.items()):
            if not future.done():
                continue
            del self._cleanup_inflight[ref]
            if future.cancelled():
                # Never sent (end() shut the API threads down): left to the next scheduler.
                self._cleanup.append(op)
                continue
            err = future.exception()
            if err is None or (isinstance(err, ApiException) and err.status == HTTPStatus.NOT_FOUND):
                continue
            self.log.debug("Cleaning up pod %s/%s failed (%s); retrying next loop", *ref, err)
            self._cleanup.append(op)
        if not self._cleanup or not submit:
            return
        pool = self._pool()
        remaining: list[tuple[str, str, bool]] = []
        for op in self._cleanup:
            namespace, name, delete = op
            if (namespace, name) in self._cleanup_inflight:
                remaining.append(op)
                continue
            self._cleanup_inflight[(namespace, name)] = (
                op,
                pool.submit(self._cleanup_call, namespace, name, delete),
            )
        self._cleanup = remaining

    def _cleanup_call(self, namespace: str, name: str, delete: bool) -> None:
        from kubernetes.client import V1DeleteOptions

        if delete:
            self.core_v1.delete_namespaced_pod(
                name,
                namespace,
                body=V1DeleteOptions(**self.kube_config.delete_option_kwargs),
                **self._create_args,
            )
        else:
            self.core_v1.patch_namespaced_pod(
                name,
                namespace,
                {"metadata": {"labels": {DONE_LABEL: "True"}}},
                _request_timeout=self._request_timeout,
            )

    def _pool(self) -> ThreadPoolExecutor:
        """The API threads (pod creates and cleanups), started on first use."""
        if self._create_pool is None:
            self._create_pool = ThreadPoolExecutor(
                max_workers=self._create_concurrency, thread_name_prefix="jobwatch-pod-api"
            )
        return self._create_pool

    def _append_task_log(
        self,
        workload: workloads.ExecuteTask | None,
        key: TaskInstanceKey,
        message: str,
        *,
        level: str = "error",
    ) -> None:
        """Write the executor's reason into the task's log file, where the user looks first.

        The worker process could not write it (it was evicted, never started, or its pod vanished).
        Only possible when ``[logging] base_log_folder`` is shared with the workers (a local or shared
        volume, as in the sandbox); with remote logging the reason is in the scheduler log and in the
        "state mismatch" audit-log event the scheduler records with our message.
        """
        if workload is None or not workload.log_path:
            return
        try:
            base = Path(conf.get("logging", "base_log_folder"))
            path = base / workload.log_path
            path.parent.mkdir(parents=True, exist_ok=True)
            line = {
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z",
                "level": level,
                "event": f"JobWatchExecutor: {message}",
                "logger": "airflow_jobwatch.executors",
            }
            with path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(line) + "\n")
        except OSError as err:
            self.log.debug("Could not append the failure reason to the task log of %s: %s", key, err)

    # ------------------------------------------------------------------------------------------
    # Adoption, revocation, logs
    # ------------------------------------------------------------------------------------------

    def _list_pods(self, label_selector: str, field_selector: str | None = None) -> list[dict[str, Any]]:
        pods: list[dict[str, Any]] = []
        extra: dict[str, Any] = {"field_selector": field_selector} if field_selector else {}
        # Configured namespaces, plus those a pod_override added while running.
        namespaces = self.supervisor.namespaces() if self.supervisor is not None else self._namespaces()
        for ns in namespaces:
            if ns is None:
                resp = self.core_v1.list_pod_for_all_namespaces(
                    label_selector=label_selector,
                    **extra,
                    _preload_content=False,
                    _request_timeout=self._request_timeout,
                )
            else:
                resp = self.core_v1.list_namespaced_pod(
                    ns,
                    label_selector=label_selector,
                    **extra,
                    _preload_content=False,
                    _request_timeout=self._request_timeout,
                )
            pods.extend(json.loads(resp.data).get("items") or [])
        return pods

    def _alive_other_scheduler_job_ids(self) -> set[str]:
        """Ids of the other scheduler jobs that are running and heartbeating (none if the DB can't say)."""
        try:
            from datetime import UTC, datetime, timedelta

            from airflow.jobs.job import Job
            from airflow.utils.session import create_session
            from airflow.utils.state import JobState
            from sqlalchemy import select

            threshold = conf.getint("scheduler", "scheduler_health_check_threshold", fallback=30)
            cutoff = datetime.now(UTC) - timedelta(seconds=threshold)
            # Not the scheduler's scoped session: this may run inside its adoption transaction.
            with create_session(scoped=False) as session:
                return {
                    str(jid)
                    for jid in session.scalars(
                        select(Job.id).where(
                            Job.job_type == "SchedulerJob",
                            Job.state == JobState.RUNNING,
                            Job.latest_heartbeat >= cutoff,
                        )
                    )
                    if str(jid) != self.scheduler_job_id
                }
        except Exception as err:
            self.log.debug("Could not read the alive scheduler jobs (%s); excluding only this one", err)
            return set()

    def _cleanup_completed_pods(self) -> None:
        """Find and clean up at once (adoption calls this); ``sync()`` does the search in a thread."""
        try:
            pods = self._find_completed_pods()
        except Exception as err:
            self.log.warning("Could not list finished worker pods of gone schedulers: %s", err)
            return
        self._queue_completed_cleanup(pods)

    def _find_completed_pods(self) -> list[dict[str, Any]]:
        """Clean up the Succeeded worker pods that schedulers which are gone left behind.

        Upstream's ``_adopt_completed_pods``, with the same selection: ``Succeeded`` pods with
        ``kubernetes_executor=True``, not marked done, whose ``airflow-worker`` is neither this
        scheduler nor a live one (so HA schedulers do not fight over each other's pods). Upstream
        relabels them so that its watcher deletes them; here they are deleted (or, with
        ``delete_worker_pods = False``, labelled done) directly. Their task instances need no event:
        a Succeeded worker pod means the task already recorded its own end through the execution API
        (an orphaned one is handed to :meth:`try_adopt_task_instances` by the scheduler).
        Failed pods are kept for inspection, as upstream keeps them.
        """
        from airflow.providers.cncf.kubernetes.pod_generator import make_safe_label_value

        assert self.scheduler_job_id is not None
        excluded = sorted(
            {
                make_safe_label_value(j)
                for j in {self.scheduler_job_id, *self._alive_other_scheduler_job_ids()}
            }
        )
        scheme = self.labels
        selector = f"{scheme.executor}=True,{scheme.worker} notin ({','.join(excluded)}),{DONE_LABEL}!=True"
        return self._list_pods(selector, field_selector="status.phase=Succeeded")

    def _adoption_may_still_need(self, pod: dict[str, Any]) -> bool:
        """Whether a gone scheduler's finished pod may still be needed by a live scheduler's adoption.

        Its task instance may still be queued/running in the database (the worker exited without
        recording an end, or the scheduler died before reading it): then some live scheduler adopts it
        within ``scheduler_health_check_threshold`` + ``orphaned_tasks_check_interval`` of the dead
        scheduler's last heartbeat, which was no later than shortly after the pod finished. Until that
        has passed (plus ``COMPLETED_POD_GRACE_MARGIN_SECONDS``), the pod is left where the adopter
        looks for it. A pod with no completion time is not held back.
        """
        from datetime import UTC, datetime

        from airflow_jobwatch.cli.cleanup import completion_time

        finished = completion_time(pod)
        if finished is None:
            return False
        if finished.tzinfo is None:
            finished = finished.replace(tzinfo=UTC)
        grace = (
            _getfloat("scheduler", "scheduler_health_check_threshold", 30.0)
            + _getfloat("scheduler", "orphaned_tasks_check_interval", 300.0)
            + COMPLETED_POD_GRACE_MARGIN_SECONDS
        )
        return (datetime.now(UTC) - finished).total_seconds() < grace

    def _queue_completed_cleanup(self, pods: list[dict[str, Any]]) -> None:
        tracked = self.supervisor.tracked() if self.supervisor is not None else {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            ref = (meta.get("namespace", ""), meta.get("name", ""))
            if ref in tracked:
                continue  # adopted by us meanwhile: its report cleans it up
            if self._adoption_may_still_need(pod):
                continue  # a later round cleans it up, if no adopter has taken it by then
            self.log.info(
                "Cleaning up finished pod %s/%s of scheduler job %s, which is gone",
                *ref,
                (meta.get("labels") or {}).get(self.labels.worker),
            )
            self._counters["completed_pods_cleaned"] += 1
            self._cleanup.append((ref[0], ref[1], self.kube_config.delete_worker_pods))

    def try_adopt_task_instances(self, tis: Sequence[TaskInstance]) -> Sequence[TaskInstance]:
        """Adopt the worker pods of dead schedulers: relabel them and watch them as our own.

        Pods that finished while no scheduler watched them are reported at once (the task instance
        is still queued/running in the database, so its end was never reported).
        """
        from airflow.providers.cncf.kubernetes.pod_generator import make_safe_label_value

        from airflow_jobwatch.kube.states import classify_pod

        assert self.supervisor is not None and self.scheduler_job_id is not None
        by_key = {ti.key: ti for ti in tis if ti.queued_by_job_id}
        not_adopted = [ti for ti in tis if not ti.queued_by_job_id]
        my_label = make_safe_label_value(self.scheduler_job_id)
        other = JOBWATCH_LABELS if self.labels == UPSTREAM_LABELS else UPSTREAM_LABELS
        # Our labels now, then the other scheme's: a pod launched before a switch of executor (or of
        # worker_pod_labels) is adopted all the same and relabelled to ours.
        relabel: dict[str, str | None] = {
            self.labels.worker: my_label,
            self.labels.executor: "True",
            other.worker: None,
            other.executor: None,
        }
        searches = [
            (scheme, job_id)
            for job_id in {ti.queued_by_job_id for ti in by_key.values()}
            for scheme in (self.labels, other)
        ]
        candidates: dict[TaskInstanceKey, list[tuple[str, dict[str, Any]]]] = {}
        seen: set[tuple[str, str]] = set()
        for scheme, job_id in searches:
            try:
                pods = self._list_pods(scheme.selector(str(job_id)))
            except Exception as err:
                namespaces = self._namespaces()
                self.log.error(
                    "Could not list the worker pods of scheduler job %s for adoption: %s",
                    job_id,
                    _explain(
                        err,
                        verb="list",
                        resource="pods",
                        namespace=namespaces[0] if len(namespaces) == 1 else None,
                    ),
                )
                continue
            for pod in pods:
                meta = pod.get("metadata") or {}
                key = key_from_annotations(meta.get("annotations") or {})
                ns, name = meta["namespace"], meta["name"]
                if (ns, name) in seen:
                    continue
                seen.add((ns, name))
                if (key is None or key not in by_key) and scheme != self.labels:
                    continue  # not one of our task instances, and under the other labels: not ours
                if key is None or key not in by_key:
                    # A finished pod of a dead scheduler whose task instance is not orphaned (its end is
                    # already recorded): nobody else will ever clean it up.
                    finished = classify_pod(pod) if key is not None else None
                    # (Another live scheduler may be adopting its task instance right now: wait as above.)
                    if finished is not None and finished.terminal and not self._adoption_may_still_need(pod):
                        failed = finished.phase == "failed"
                        kc = self.kube_config
                        delete = kc.delete_worker_pods and (not failed or kc.delete_worker_pods_on_failure)
                        self._cleanup.append((ns, name, delete))
                    continue
                candidates.setdefault(key, []).append((str(job_id), pod))
        for key, pods_of_key in candidates.items():
            self._adopt_pods_of_key(key, pods_of_key, relabel, by_key)
        # Upstream cleans up the finished pods of gone schedulers here too (_adopt_completed_pods).
        self._cleanup_completed_pods()
        self._retry_cleanup()
        # Already adopted by a previous (retried) call: do not hand them back for reset.
        not_adopted.extend(ti for key, ti in by_key.items() if key not in self.running)
        return not_adopted

    def _adopt_pods_of_key(
        self,
        key: TaskInstanceKey,
        pods: list[tuple[str, dict[str, Any]]],
        relabel: dict[str, str | None],
        by_key: dict[TaskInstanceKey, TaskInstance],
    ) -> None:
        """Adopt a dead scheduler's pods of one orphaned task instance key: relabel, track, report ends.

        A key may have several pods: the dead scheduler launched it again (resumed after deferral, same
        try) while the pod of the earlier launch was still ending. Which one is current is what Airflow's
        database says: the task instance's ``external_executor_id`` names its current launch, and each pod
        carries its launch's id. The newest pod with that id is current; any other is an earlier launch's,
        adopted only to be cleaned up when it ends, and never reported. No pod with that id (the scheduler
        stopped before creating it): nothing is adopted as current, and the task instance is handed back
        to be reset. Without an id in the database (older Airflow, or a task queued before it was
        recorded), the newest pod is current. If this executor holds the key's current launch itself,
        every adopted pod is an earlier one. A pod that has already ended is handed to :meth:`_on_result`.
        """
        from airflow_jobwatch.kube.states import classify_pod

        assert self.supervisor is not None

        def created(item: tuple[str, dict[str, Any]]) -> tuple[str, str]:
            meta = item[1].get("metadata") or {}
            return (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))

        def launch_of(pod: dict[str, Any]) -> str:
            meta = pod.get("metadata") or {}
            return launch_id_of(meta.get("annotations") or {}, meta["namespace"], meta["name"])

        pods = sorted(pods, key=created)  # RFC 3339 UTC timestamps sort as strings; newest last
        expected = getattr(by_key[key], "external_executor_id", None) or None
        mine = self.records.get(key)
        if mine is not None and (expected is None or mine.launch_id == expected):
            current_name = None  # this executor holds the current launch itself
        else:
            if mine is not None:
                # This executor's launch is not the one the database names (the task was queued again
                # elsewhere): it is an earlier launch here; its pod is cleaned up when it ends.
                self.records.end(key)
                self._settle(key)
            matching = [
                p
                for _, p in pods
                if expected is None
                or launch_of(p) == expected
                # a pod whose running event stored "namespace/name" (launched by an earlier version)
                or f"{p['metadata']['namespace']}/{p['metadata']['name']}" == expected
            ]
            current_name = (matching[-1].get("metadata") or {}).get("name") if matching else None
            if current_name is None:
                self.log.warning(
                    "No pod of %s belongs to its current launch %s (the scheduler that queued it stopped "
                    "before creating it); its earlier launches' pods are cleaned up when they end and the "
                    "task instance is left to be reset",
                    key,
                    expected,
                )
        for job_id, pod in pods:
            meta = pod.get("metadata") or {}
            ns, name = meta["namespace"], meta["name"]
            annotations = meta.get("annotations") or {}
            try:
                self.core_v1.patch_namespaced_pod(
                    name,
                    ns,
                    {"metadata": {"labels": relabel}},
                    _request_timeout=self._request_timeout,
                )
            except Exception as err:
                self.log.warning("Could not adopt pod %s/%s: %s", ns, name, err)
                continue
            launch_id = launch_of(pod)
            current = name == current_name
            self.records.adopt(key, (ns, name), launch_id, current=current)
            self.supervisor.track(ns, name, key)
            if current:
                by_key.pop(key, None)
                self._settle(key)
                self._counters["adopted"] += 1
                self.log.info("Adopted pod %s/%s of %s from scheduler job %s", ns, name, key, job_id)
            else:
                self.log.info(
                    "Adopted pod %s/%s of an earlier launch of %s from scheduler job %s: it is cleaned up "
                    "when it ends, and its end is not reported",
                    ns,
                    name,
                    key,
                    job_id,
                )
            state = classify_pod(pod, fatal_waiting_reasons=self.fatal_waiting_reasons)
            if state.terminal:
                self.supervisor.untrack(ns, name)
                self._on_result(
                    PodResult(
                        key=key,
                        namespace=ns,
                        name=name,
                        phase=state.phase,
                        terminal=True,
                        reason=state.reason,
                        message=state.message,
                        exit_code=state.exit_code,
                        annotations=annotations,
                        observed_at=time.time(),
                    )
                )

    def revoke_task(self, *, ti: TaskInstance) -> None:
        """Stop a task (queued too long, or cleared): delete its pod; no event is reported."""
        key = ti.key
        self.queued_tasks.pop(key, None)
        record = self.records.end(key)  # a pod of this key still watched is now stale: cleaned, not reported
        self._settle(key)
        if record is None:
            return
        ref = record.pod
        launch = record.create
        if launch is not None:
            launch.revoked = True
        if ref is None and launch is not None and launch.ref is not None and self.supervisor is not None:
            # A create may have been sent (its answer lost): delete the pod in case it exists (404 is fine).
            if launch.ref in self.supervisor.tracked():
                ref = launch.ref
        if ref is None:
            return
        if self.supervisor is not None:
            self.supervisor.untrack(*ref)
        self.records.create_not_sent(ref)
        self._cleanup.append((ref[0], ref[1], True))
        try:
            self._retry_cleanup()
        except Exception:
            self.log.exception("Could not delete pod %s/%s of revoked %s", ref[0], ref[1], key)

    def get_task_log(self, ti: TaskInstance, try_number: int) -> tuple[list[str], list[str]]:
        """The tail of the worker pod's log while it exists (the UI asks while the task runs)."""
        from airflow.providers.cncf.kubernetes.pod_generator import PodGenerator

        messages: list[str] = []
        try:
            selector = PodGenerator.build_selector_for_k8s_executor_pod(  # type: ignore[no-untyped-call]
                dag_id=ti.dag_id,
                task_id=ti.task_id,
                try_number=try_number,
                map_index=ti.map_index,
                run_id=ti.run_id,
                airflow_worker=ti.queued_by_job_id,
            )
            if self.labels != UPSTREAM_LABELS:
                # Same selector, with our labels in place of upstream's worker/executor labels.
                selector = ",".join(
                    self.labels.worker
                    if part == WORKER_LABEL
                    else part.replace(f"{WORKER_LABEL}=", f"{self.labels.worker}=").replace(
                        "kubernetes_executor=True", f"{self.labels.executor}=True"
                    )
                    for part in selector.split(",")
                )
            pods = self._list_pods(selector)
            if not pods:
                return [f"No worker pod found for {ti.key} (selector {selector})"], []
            meta = pods[0]["metadata"]
            response = self.core_v1.read_namespaced_pod_log(
                meta["name"],
                meta["namespace"],
                container="base",
                tail_lines=self.running_pod_log_lines,
                _request_timeout=self._request_timeout,
                _preload_content=False,  # the raw bytes: the client's str() of them reads "b'...'"
            )
            text = response.data.decode("utf-8", errors="backslashreplace")
            messages.append(
                f"Log of pod {meta['namespace']}/{meta['name']} (last {self.running_pod_log_lines} lines)"
            )
            return messages, [text or ""]
        except Exception as err:
            messages.append(
                "Reading the worker pod's log failed: "
                + _explain(err, verb="get", resource="pods/log", namespace=None)
            )
            return messages, [""]

    # ------------------------------------------------------------------------------------------
    # Status
    # ------------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        sup = self.supervisor
        c = sup.counters if sup else None
        return {
            "scheduler_job_id": self.scheduler_job_id,
            "pid": os.getpid(),
            "updated_at": time.time(),
            "running": len(self.running),
            "pending_creation": len(self.records.pending()),
            "waiting_for_quota": self._quota_waiting,
            "tracked_pods": sum(1 for r in self.records if r.pod is not None),
            "seconds_since_last_event": (
                round(time.monotonic() - self._last_result_at, 1)
                if self._last_result_at is not None
                else None
            ),
            **self._counters,
            "watcher_restarts": c.restarts if c else 0,
            "relists": c.relists if c else 0,
            "watches": c.watches if c else 0,
            "gap_deleted": c.gap_deleted if c else 0,
            "adopted_away": c.adopted_away if c else 0,
            "watcher_healthy": c.healthy if c else False,
            "watcher_last_error": c.last_error if c else None,
            "watcher_access_denied": c.access_denied if c else None,
            "watchers": c.per_namespace if c else {},
            "reports": list(self._reports),
        }

    def _write_status(self, *, force: bool = False) -> None:
        if not self._status_file:
            return
        now = time.monotonic()
        if not force and now - self._status_written_at < STATUS_FILE_INTERVAL_SECONDS:
            return
        self._status_written_at = now
        path = Path(self._status_file)
        try:
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_text(json.dumps(self.status(), indent=2, default=str))
            os.replace(tmp, path)
        except OSError as err:
            self.log.debug("Could not write the executor status file %s: %s", path, err)


def _api_message(err: Any) -> str:
    try:
        body = json.loads(err.body) if err.body else {}
        return str(body.get("message") or err.reason or "")
    except (ValueError, TypeError, AttributeError):
        return str(err.body or err.reason or "")


_QUOTA = re.compile(r"exceeded quota: ([^,]+)")


def _retry_reason(error: str) -> str:
    """A retried create's reason without the details that change from attempt to attempt (pod name, usage):
    ``exceeded quota: <quota>`` for a ResourceQuota refusal, else the status or exception part."""
    quota = _QUOTA.search(error)
    if quota:
        return f"exceeded quota: {quota.group(1).strip()}"
    return error.split(":", 1)[0]


def _retry_after(err: Any) -> float | None:
    value = (err.headers or {}).get("Retry-After") if getattr(err, "headers", None) else None
    return parse_retry_after(value)


__all__ = ["JobWatchExecutor"]
