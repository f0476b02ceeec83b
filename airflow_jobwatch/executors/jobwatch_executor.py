"""JobWatchExecutor: runs each Airflow task in a Kubernetes pod and never loses track of it.

Drop-in for the cncf.kubernetes KubernetesExecutor (``[core] executor =
airflow_jobwatch.executors.JobWatchExecutor``): same ``[kubernetes_executor]`` options where the
meaning is the same, same pod labels and annotations, same ``executor_config`` (``pod_override``,
``pod_template_file``). What differs is the watching side (see :mod:`.watcher` and docs/executor.md):
a 410, a dropped watch, a killed or wedged watcher process or an API outage never loses a task's
end, and every task instance gets exactly one terminal report.

This module is the facade the scheduler calls (start, sync, end, revoke, adoption, logs, status). The
parts behind it: :mod:`.record` (one record per task instance key: every path is one of its
transitions), :mod:`.launching` (the launch queue: pod creates), :mod:`.results` (watcher results into
scheduler events, relaunches), :mod:`.adoption` (adopting gone schedulers' pods, cleaning up theirs), and
:mod:`.base` (the shared state, client and cleanup).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_jobwatch import config as jobwatch_config
from airflow_jobwatch import metrics
from airflow_jobwatch.compat import executor_cli_commands
from airflow_jobwatch.executors.adoption import Adoption
from airflow_jobwatch.executors.base import (
    K8S_SECTION,
    cluster_config_from_conf,
    explain,
    getfloat,
    informer_config_from_conf,
)
from airflow_jobwatch.executors.launching import LaunchQueue
from airflow_jobwatch.executors.podbuild import WorkerPodBuilder
from airflow_jobwatch.executors.pods import (
    UPSTREAM_LABELS,
    WORKER_LABEL,
    new_launch_id,
)
from airflow_jobwatch.executors.watcher import WatcherSupervisor

if TYPE_CHECKING:
    from airflow.executors import workloads
    from airflow.models.taskinstance import TaskInstance

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
    "logs_task_metadata": ("False", "log lines always name the task instance"),
}


# The status file is rewritten at most this often.
STATUS_FILE_INTERVAL_SECONDS = 1.0


class JobWatchExecutor(LaunchQueue, Adoption):
    """Executor that runs each task instance in its own Kubernetes pod.

    Options: ``[kubernetes_executor]`` (namespace, multi_namespace_mode(+_namespace_list),
    pod_template_file, worker_container_repository/tag, in_cluster, config_file, cluster_context,
    delete_worker_pods, delete_worker_pods_on_failure,
    worker_pod_pending_fatal_container_state_reasons, worker_pods_creation_batch_size) and
    ``[jobwatch]`` (watch timeouts, backoff, health, status file). See docs/executor.md.
    """

    supports_ad_hoc_ti_run: bool = True
    # The scheduler gives each hand-over to QUEUED a fresh external_executor_id, in the same database write
    # (Airflow 3.2.2+; older versions ignore this, and the executor reports its own id instead): the launch
    # id that an adopter reads back.
    pre_assigns_external_executor_id = True
    supports_multi_team: bool = True
    is_local: bool = False
    is_production: bool = True
    serve_logs: bool = False

    # ------------------------------------------------------------------------------------------
    # BaseExecutor
    # ------------------------------------------------------------------------------------------

    def start(self) -> None:
        from airflow.exceptions import AirflowConfigException

        from airflow_jobwatch.executors.startup import check_executor_configuration
        from airflow_jobwatch.kube.cluster.client import ClusterConfigError

        self._check_upstream_options()
        check_executor_configuration(self.kube_config, source=self.conf, log=self.log)  # what stops a start
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
        self._pod_builder = WorkerPodBuilder(
            kube_config=self.kube_config,
            scheduler_job_id=self.scheduler_job_id,
            labels=self.labels,
            serialize=self.core_v1.api_client.sanitize_for_serialization,
        )
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
            # from an earlier one by what the database holds. Airflow that does not pre-assign it (3.1, 3.2.0,
            # 3.2.1): an id of our own, reported at once as a queued event, whose info the scheduler stores as
            # the task instance's external_executor_id; so the database names this launch, not the one before.
            pre_assigned = getattr(w.ti, "external_executor_id", None)
            launch_id = pre_assigned or self._adopted_launch_ids.pop(key, None) or new_launch_id()
            previous = self.records.queue(key, w, launch_id)
            self._settle(key)
            if not pre_assigned:
                self._unreported_launches[key] = launch_id
                self._report_launch_ids()
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

    def sync(self) -> None:
        """One scheduler heartbeat: watcher results first (they free slots), then cleanup, then creates."""
        if self.supervisor is None:
            return
        results = list(self.supervisor.poll())
        self._read_queued_on_try(results)
        for result in results:
            self._last_result_at = time.monotonic()
            self._on_result(result)
        restarts = self.supervisor.counters.restarts
        metrics.watcher_restarts(restarts - self._restarts_reported)
        self._restarts_reported = restarts
        now = time.monotonic()
        if now >= self._next_completed_cleanup and self._completed_search is None:
            interval = getfloat("scheduler", "orphaned_tasks_check_interval", 300.0)
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
        self._retry_unresolved()
        self._report_launch_ids()
        self._launch_pending()
        waiting = self.records.waiting_for_quota()
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
                + explain(err, verb="get", resource="pods/log", namespace=None)
            )
            return messages, [""]

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
            "pending_creation": self.records.pending_count(),
            "waiting_for_quota": self._quota_waiting,
            "unresolved_adoptions": len(self._unresolved),  # adopted, pods not yet all listed
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


__all__ = ["JobWatchExecutor", "cluster_config_from_conf", "informer_config_from_conf"]
