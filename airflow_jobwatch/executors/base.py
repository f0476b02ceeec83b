"""The state and helpers shared by the parts of JobWatchExecutor: records, client, reports, cleanup."""

from __future__ import annotations

import json
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from airflow.configuration import conf
from airflow.executors.base_executor import BaseExecutor

from airflow_jobwatch import config as jobwatch_config
from airflow_jobwatch import metrics
from airflow_jobwatch.compat import executor_conf, kube_config
from airflow_jobwatch.executors.pods import (
    DONE_LABEL,
    label_scheme,
)
from airflow_jobwatch.executors.record import PendingCreate, TaskRecords
from airflow_jobwatch.executors.stopping import (
    STOP_ATTEMPTS,
    STOP_BACKOFF_INITIAL_SECONDS,
    STOP_BACKOFF_MAX_SECONDS,
    StopRefused,
    stop_pod,
)
from airflow_jobwatch.executors.watcher import PodResult, WatcherSupervisor
from airflow_jobwatch.kube.engine.backoff import Backoff

if TYPE_CHECKING:
    from airflow.executors import workloads
    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.providers.cncf.kubernetes.kube_config import KubeConfig
    from kubernetes.client import CoreV1Api

    from airflow_jobwatch.executors.podbuild import WorkerPodBuilder
    from airflow_jobwatch.kube.cluster.client import ClusterConfig
    from airflow_jobwatch.kube.engine.informer import InformerConfig

SECTION = "jobwatch"

K8S_SECTION = "kubernetes_executor"

# Timeout of each synchronous API call the scheduler loop makes (create, delete, patch, get): the
# loop must never hang on a black-holed connection. (connect, read) seconds.
API_REQUEST_TIMEOUT = (10.0, 30.0)

# Tail of a running pod's log shown in the UI (upstream's default for running_pod_log_lines).
RUNNING_POD_LOG_LINES = 100

# Terminal reports kept for the status file (the demo prints them as a table); older ones are dropped.
STATUS_REPORTS_KEPT = 500

# What is done to a pod the executor cleans up: deleted (True), labelled done (False), or stopped (STOP: a
# replaced pod that could still start; see executors/stopping.py).
STOP: Literal["stop"] = "stop"
CleanupOp = tuple[str, str, bool | Literal["stop"]]  # (namespace, name, what)

# A delete or a "done" label that fails is tried again after a backoff (equal jitter, doubling from 1 s to
# 60 s), never every loop; after CLEANUP_ATTEMPTS failures (2 to 4 minutes) it is given up with a warning
# that names the pod, since a refusal that lasts that long (a missing right, an admission policy) will not
# change by itself.
CLEANUP_BACKOFF_INITIAL_SECONDS = 1.0
CLEANUP_BACKOFF_MAX_SECONDS = 60.0
CLEANUP_ATTEMPTS = 10


def getfloat(section: str, key: str, default: float, source: Any = None) -> float:
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


def explain(err: Any, *, verb: str, resource: str, namespace: str | None) -> str:
    """An API error for a log line or a task's failure: the explained 401/403 (what to grant), else
    status, reason and the server's message. Never the response headers the exception would print."""
    from airflow_jobwatch.kube.cluster.errors import access_denied_from_exception

    denied = access_denied_from_exception(err, verb=verb, resource=resource, namespace=namespace)
    if denied is not None:
        return denied.message()
    status = getattr(err, "status", None)
    if status is None:
        return f"{type(err).__name__}: {err}"
    return f"{status} {getattr(err, 'reason', '')}: {api_message(err)}"


def api_message(err: Any) -> str:
    try:
        body = json.loads(err.body) if err.body else {}
        return str(body.get("message") or err.reason or "")
    except (ValueError, TypeError, AttributeError):
        return str(err.body or err.reason or "")


class ExecutorBase(BaseExecutor):
    """What every part of :class:`~airflow_jobwatch.executors.JobWatchExecutor` shares: its state (the
    per-key records, the cleanup queue, the API threads), the Kubernetes client, and the helpers that
    report an outcome and clean a pod up. The parts: :mod:`.launching` (creates), :mod:`.results`
    (watcher results, relaunch), :mod:`.adoption` (adoption and the cleanup of gone schedulers' pods).
    """

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
        # Task instances taken over from a gone scheduler whose pods could not all be listed (a failed LIST,
        # a namespace that could not be listed): adopted (never handed back for reset, never launched) and
        # looked for again with backoff. key -> what adoption knew of it (see adoption.py).
        self._unresolved: dict[TaskInstanceKey, Any] = {}
        self._cleanup: list[CleanupOp] = []  # retried until done
        # Stops that failed for want of an answer: (ns, name) -> (their backoff, when to try again).
        self._cleanup_retries: dict[tuple[str, str], tuple[Backoff, float]] = {}
        self._stop_refusal_logged = False
        self._next_completed_cleanup = 0.0  # first sync() cleans up at once, as upstream does
        self._completed_search: Future[list[dict[str, Any]]] | None = None
        # Creates in flight in the creator threads: key -> (create, namespace, name, future).
        self._inflight: dict[TaskInstanceKey, tuple[PendingCreate, str, str, Future[Any]]] = {}
        self._create_pool: ThreadPoolExecutor | None = None
        # Keys whose launch has a pod build running or finished but not yet submitted as a create.
        self._building: set[TaskInstanceKey] = set()
        # Launch ids not yet reported as a queued event (Airflow without pre-assigned ids) because the key
        # had an event waiting in the buffer: reported once the scheduler has read it, and no pod is
        # created for such a launch before its id is reported.
        self._unreported_launches: dict[TaskInstanceKey, str] = {}
        # Launch ids that an adopted QUEUED task instance's row names, for a workload that carries none.
        self._adopted_launch_ids: dict[TaskInstanceKey, str] = {}
        # Made at start(), once the scheduler job id is known.
        self._pod_builder: WorkerPodBuilder | None = None
        # Cleanups (delete / label done / stop) in flight: (ns, name) -> (op, future).
        self._cleanup_inflight: dict[tuple[str, str], tuple[CleanupOp, Future[Any]]] = {}
        # Pod creates in flight at once (threads), unless worker_pods_creation_batch_size is larger. A create
        # takes one API round trip (~10-50 ms on a healthy server); the default 8 in parallel keep up with a
        # scheduler that queues hundreds of tasks per second, without looking like a burst to API priority
        # and fairness. A whole number >= 1, checked here when the scheduler starts.
        try:
            self._create_concurrency = jobwatch_config.get_int("pod_creation_concurrency", source=self.conf)
        except jobwatch_config.JobwatchConfigError as err:
            from airflow.exceptions import AirflowConfigException

            # the scheduler shows this to a user: Airflow's own exception, not the provider's class name
            raise AirflowConfigException(f"JobWatchExecutor cannot start: {err}") from None
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
            "launches_dropped": 0,  # pending launches this scheduler no longer held in the database
        }
        self._disruption_relaunches = int(
            jobwatch_config.get_float("disruption_relaunches", minimum=0, source=self.conf)
        )
        # Upstream's requeue of a pod that failed before its task ran, with upstream's meaning and defaults:
        # at most this many requeues per try (-1: no limit, 0: off), never for these container reasons.
        self._launch_failure_retries = _launch_failure_retries(self.conf)
        self._launch_failure_excluded = frozenset(
            r.strip()
            for r in (
                self.conf.get(K8S_SECTION, "pod_launch_failure_excluded_container_reasons", fallback="Error")
                or ""
            ).split(",")
            if r.strip()
        )
        # The task instances still QUEUED on their try, read once per sync() for the pods that ended.
        self._queued_on_try: dict[Any, bool | str | None] = {}
        self._counters["launch_failure_requeues"] = 0
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

            from airflow_jobwatch.kube.cluster.client import sync_api_client

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

    def _list_pods(
        self,
        label_selector: str,
        field_selector: str | None = None,
        namespaces: list[str | None] | None = None,
    ) -> list[dict[str, Any]]:
        """The pods matching the selectors in ``namespaces`` (None: across all namespaces); by default the
        configured namespaces plus those a pod_override added while running. Raises if any list fails."""
        pods: list[dict[str, Any]] = []
        extra: dict[str, Any] = {"field_selector": field_selector} if field_selector else {}
        if namespaces is None:
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

    def _pool(self) -> ThreadPoolExecutor:
        """The API threads (pod creates and cleanups), started on first use."""
        if self._create_pool is None:
            self._create_pool = ThreadPoolExecutor(
                max_workers=self._create_concurrency, thread_name_prefix="jobwatch-pod-api"
            )
        return self._create_pool

    # ------------------------------------------------------------------------------------------
    # Records and outcomes
    # ------------------------------------------------------------------------------------------

    def _settle(self, key: TaskInstanceKey) -> None:
        """``running`` follows from the records: the one place where a key takes or frees its slot."""
        if key in self.records:
            self.running.add(key)
        else:
            self.running.discard(key)

    def _launched(self, key: TaskInstanceKey, namespace: str, name: str) -> None:
        assert self.supervisor is not None
        record = self.records.get(key)
        launch = record.create if record is not None else None
        metrics.pod_created(launch_seconds=time.monotonic() - launch.accepted_at if launch else 0.0)
        self.records.created(key, (namespace, name))
        self.supervisor.track(namespace, name, key)
        self._counters["pods_launched"] += 1
        self.log.info("Created worker pod %s/%s for %s", namespace, name, key)

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
    # Cleanup of finished pods
    # ------------------------------------------------------------------------------------------

    def _clean_up_finished(self, result: PodResult) -> None:
        """Delete a finished pod or label it done, per ``delete_worker_pods*`` (as upstream does)."""
        delete = self._deletes(result)
        if delete is not None:
            self._cleanup.append((result.namespace, result.name, delete))

    def _deletes(self, result: PodResult) -> bool | None:
        """Whether a finished pod is deleted (True) or labelled done (False); None: nothing left of it."""
        if result.gap or result.reason == "Deleted":
            return None
        return self._may_start(result) or (
            self.kube_config.delete_worker_pods
            and (result.phase == "succeeded" or self.kube_config.delete_worker_pods_on_failure)
        )

    def _deletes_failed_pods(self) -> bool:
        """Whether ``delete_worker_pods*`` delete a pod that failed (else it is kept, labelled done)."""
        return bool(self.kube_config.delete_worker_pods and self.kube_config.delete_worker_pods_on_failure)

    def _may_start(self, result: PodResult) -> bool:
        """A pod that "failed" while Kubernetes still has it Pending (ErrImagePull...): left alone it could
        still start, and run a try Airflow already gave up on, so it is deleted in any case."""
        return result.phase != "succeeded" and result.reason in self.fatal_waiting_reasons

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
                self._cleanup_retries.pop(ref, None)
                continue
            retried = self._stop_failed(op, err) if op[2] == STOP else self._cleanup_failed(op, err)
            if retried is not None:
                self._cleanup.append(retried)
        # Pods a relaunch replaced, stopped once the launch's next pod exists if they could still start, and
        # kept until their record let them go (see TaskRecord.replaced).
        self._cleanup.extend((namespace, name, STOP) for namespace, name in self.records.stopping())
        self._cleanup.extend((namespace, name, True) for namespace, name in self.records.released())
        if not self._cleanup or not submit:
            return
        pool = self._pool()
        now = time.monotonic()
        remaining: list[CleanupOp] = []
        for op in self._cleanup:
            namespace, name, delete = op
            retry = self._cleanup_retries.get((namespace, name))
            if (namespace, name) in self._cleanup_inflight or (retry is not None and retry[1] > now):
                remaining.append(op)
                continue
            self._cleanup_inflight[(namespace, name)] = (
                op,
                pool.submit(self._cleanup_call, namespace, name, delete),
            )
        self._cleanup = remaining

    def _cleanup_backoff(self, ref: tuple[str, str], initial: float, maximum: float) -> tuple[Backoff, float]:
        """The backoff of ``ref``'s failed cleanup calls (one per pod, kept until a call succeeds), with this
        failure counted: it and the delay before the next try."""
        backoff, _ = self._cleanup_retries.get(ref) or (
            Backoff(initial_seconds=initial, max_seconds=maximum, reset_after_seconds=float("inf")),
            0.0,
        )
        return backoff, backoff.failure(time.monotonic())

    def _stop_failed(self, op: CleanupOp, err: BaseException) -> CleanupOp:
        """A stop got no answer: tried again after a backoff, and deleted after STOP_ATTEMPTS (a pod that
        could still start is not left running for want of a patch that goes through)."""
        ref = (op[0], op[1])
        backoff, delay = self._cleanup_backoff(ref, STOP_BACKOFF_INITIAL_SECONDS, STOP_BACKOFF_MAX_SECONDS)
        reason = explain(err, verb="patch", resource="pods", namespace=op[0])
        if backoff.attempts >= STOP_ATTEMPTS:
            self._cleanup_retries.pop(ref, None)
            self.log.warning(
                "Stopping pod %s/%s failed %d times (%s); deleting it instead", *ref, backoff.attempts, reason
            )
            return (op[0], op[1], True)
        self._cleanup_retries[ref] = (backoff, time.monotonic() + delay)
        self.log.debug("Stopping pod %s/%s failed (%s); retrying in %.1f s", *ref, reason, delay)
        return op

    def _cleanup_failed(self, op: CleanupOp, err: BaseException) -> CleanupOp | None:
        """A delete or a "done" label failed: tried again after a backoff, given up after CLEANUP_ATTEMPTS."""
        ref = (op[0], op[1])
        backoff, delay = self._cleanup_backoff(
            ref, CLEANUP_BACKOFF_INITIAL_SECONDS, CLEANUP_BACKOFF_MAX_SECONDS
        )
        what = "Deleting" if op[2] else "Labelling done"
        reason = explain(err, verb="delete" if op[2] else "patch", resource="pods", namespace=op[0])
        if backoff.attempts >= CLEANUP_ATTEMPTS:
            self._cleanup_retries.pop(ref, None)
            self.log.warning(
                "%s pod %s/%s failed %d times (%s); giving up: delete it with `kubectl delete pod -n %s %s`",
                what,
                *ref,
                backoff.attempts,
                reason,
                op[0],
                op[1],
            )
            return None
        self._cleanup_retries[ref] = (backoff, time.monotonic() + delay)
        self.log.debug("%s pod %s/%s failed (%s); retrying in %.1f s", what, *ref, reason, delay)
        return op

    def _cleanup_call(self, namespace: str, name: str, delete: bool | Literal["stop"]) -> None:
        from kubernetes.client import V1DeleteOptions

        if delete == STOP:
            try:
                stop_pod(self.core_v1, namespace, name, request_timeout=self._request_timeout)
                return
            except StopRefused as refused:
                # Refused for good (no `patch pods` right, a policy): deleted as it was before stops existed,
                # which frees its name (the window docs/executor.md describes). Said once per scheduler.
                log = self.log.debug if self._stop_refusal_logged else self.log.warning
                self._stop_refusal_logged = True
                log(
                    "Could not stop the replaced pod %s/%s, which could still start (%s); deleting it "
                    "instead, which frees its name. Grant the scheduler `patch` on pods to keep it.",
                    namespace,
                    name,
                    refused,
                )
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


def _launch_failure_retries(conf: Any) -> int:
    """``[kubernetes_executor] pod_launch_failure_retries``: an integer, -1 or more (upstream's default 1)."""
    from airflow.exceptions import AirflowConfigException

    raw = conf.get(K8S_SECTION, "pod_launch_failure_retries", fallback="1")
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = -2
    if value < -1:
        raise AirflowConfigException(
            f"[{K8S_SECTION}] pod_launch_failure_retries must be an integer: -1 (no limit), 0 (off) or a "
            f"number of requeues, got {raw!r}"
        )
    return value
