"""JobTrigger: waits for a Kubernetes Job through the triggerer's shared per-namespace watch.

What it answers, compared with upstream's ``KubernetesJobTrigger`` (which GETs each Job every 10 s):

* **Requests.** Every JobTrigger of a namespace shares one Job informer and one pod informer
  (:mod:`airflow_jobwatch.triggers.registry`). A trigger that subscribes before its Job ends sends no
  GET of its Job: not while it waits, and not at the end, since the watch stores the Jobs triggers wait
  for whole. 500 deferred Jobs cost two watches, not 50 GETs a second. A trigger GETs its Job only
  when the watch cannot answer for it (see :meth:`JobTrigger._read_job`): once for a Job the synced
  cache has lacked for ``_MISSING_GRACE_SECONDS`` (deleted before the watch saw it, or a watch that
  lags), and once for a Job whose result was decided from a projected copy (it ended before its trigger
  subscribed: a triggerer restart).
* **Latency.** The trigger is called back from the watch event that makes its Job terminal.
* **Meaning.** Only ``kube/states.py`` decides what a Job is: a condition whose status is "False" is not
  final, a Failed Job with no reason is a failure, a suspended Job keeps waiting, a pod stuck on an
  unpullable image fails the Job at once instead of at the timeout.
* **Endings upstream never reaches.** A Job deleted while waiting ends as ``deleted`` (a Job that
  completed and was TTL-deleted at once still ends as ``success``: its DELETED event carries its
  conditions). A deadline ends the wait as ``timeout`` (the operator passes what is left of
  ``execution_timeout``). An API unreachable for longer than ``api_failure_tolerance`` ends it as
  ``error``, with the last API error, instead of waiting forever (DolphinScheduler #17330's bounded
  failure policy).
* **One result.** The first terminal result wins: the result is a future that is set once, by
  whichever of (watch event, deadline, API-failure tolerance) gets there first; the deadline handler
  looks at the cache once more before it declares a timeout, so a success already delivered is never
  overwritten, and a timeout already declared is never turned into a success.
* **Cleanup.** Leaving (triggerer restart, trigger moved, event fired) only unsubscribes. The Job is
  deleted (Foreground propagation) only from :meth:`JobTrigger.on_kill`, only if the operator asked
  for it, and only when the task instance has really left DEFERRED (a user's mark-failed/clear):
  Airflow 3.3 also calls ``on_kill`` on a triggerer that lost its trigger to another one (HA
  hand-over), and that other triggerer still waits for the Job.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import datetime
import random
import time
from collections.abc import AsyncIterator, Callable, Collection
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_jobwatch import metrics
from airflow_jobwatch.kube import client as kube_client
from airflow_jobwatch.kube.informer import InformerConfig
from airflow_jobwatch.kube.objects import ModelShapeUnsupported, model_dict_from_json, to_dict
from airflow_jobwatch.kube.result import JobResult, without_result_annotation
from airflow_jobwatch.kube.states import (
    DEFAULT_FATAL_WAITING_REASONS,
    FINAL_STATE_UNKNOWN,
    TERMINAL_PHASES,
    classify_job,
    vanished_job_state,
)
from airflow_jobwatch.triggers.ending import end_from_triggerer, hold_resume
from airflow_jobwatch.triggers.notes import REASON_DISRUPTION_RETRIES, WaitNotes, delete_job
from airflow_jobwatch.triggers.registry import (
    GET_MISSING,
    GET_PROJECTED,
    NamespaceWatch,
    Subscription,
    WatchKey,
    get_registry,
)

__all__ = ["JobTrigger", "informer_config_from_airflow"]

CLASSPATH = "airflow_jobwatch.triggers.job.JobTrigger"

#: Default of ``poll_interval``: how often a waiting trigger re-reads the cache and, if its Job is not
#: in it, asks the API server once. Nothing is sent while the Job is cached, so this only bounds how long
#: a missed event (which the informer's relist repairs anyway) can delay the result.
DEFAULT_POLL_INTERVAL_SECONDS = 30.0

#: How long the watch is given to deliver a Job that the synced cache lacks, twice: before the trigger
#: GETs it, and again after that GET answered 404, before its final state is reported unknown.
#:
#: * Before the GET: an operator defers right after its Job's create is answered, so the trigger
#:   usually subscribes before the shared watch has delivered the new Job (milliseconds later). GETting
#:   it at once would cost one request per Job; waiting costs nothing, and the Job's ADDED event,
#:   stored whole because the trigger now listens for it, ends the wait for it.
#: * After a 404: a Job that completes and is TTL-deleted within milliseconds can be gone from the
#:   server before its events have been read off the watch stream; its DELETED event carries its final
#:   conditions.
#:
#: Two seconds covers a busy triggerer loop without delaying a real deletion noticeably.
_MISSING_GRACE_SECONDS = 2.0

#: A Job's terminal condition and its pods' final states arrive on two different watches, so the Job's
#: event can overtake the pod event that the Job controller acted on. When the Job is terminal but one of
#: its cached pods is not, the trigger gives the pod watch this long to catch up, so that the payload's
#: pod summary (and the failing container's exit code in the message) is the final one. Bounded, because
#: a pod can really still be running when the Job has met its success criteria (parallelism >
#: completions): the result is then reported with the pod as it is.
_POD_SETTLE_SECONDS = 1.0

#: The event's ``status``: upstream's ``KubernetesJobTrigger`` vocabulary, kept so that code written
#: for upstream's events (``event["status"] == "error"``) reads ours the same way.
STATUS_SUCCESS = "success"
STATUS_ERROR = "error"

#: The event's ``outcome``: our finer reading of how the wait ended (``status`` is ``success`` only for
#: ``OUTCOME_SUCCESS``, ``error`` for every other outcome).
OUTCOME_SUCCESS = "success"
OUTCOME_FAILED = "failed"
OUTCOME_DELETED = "deleted"
OUTCOME_TIMEOUT = "timeout"
OUTCOME_ERROR = "error"
#: The Job vanished while the watch was away (a relist no longer listed it), or was gone before the
#: watch ever saw it, and neither its last state nor its pods' final states say how it ended: it may
#: have succeeded, failed or been deleted.
OUTCOME_UNKNOWN = "unknown"

#: Propagation policies ``on_kill`` may send (the API server's own list).
PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")


def _conf_float(option: str, fallback: float | None = None) -> float:
    from airflow_jobwatch import config as jobwatch_config

    return jobwatch_config.get_float(option)


def _on_kill_timeout() -> float:
    """``[triggerer] on_kill_timeout``: how long Airflow lets ``on_kill`` run (30 s by default)."""
    try:
        from airflow.configuration import conf

        return float(conf.getint("triggerer", "on_kill_timeout", fallback=30))
    except Exception:  # a worker with the task SDK only: the operator's own kill path has no such bound
        return 30.0


def informer_config_from_airflow(*, resync_interval_seconds: float | None = None) -> InformerConfig:
    """The ``[jobwatch]`` options as an :class:`InformerConfig` (read each time: env overrides apply)."""
    from airflow_jobwatch import config as jobwatch_config

    return jobwatch_config.informer_config(resync_interval_seconds=resync_interval_seconds)


def _parse_deadline(timeout: float | int | str | datetime.datetime | None) -> datetime.datetime | None:
    """Turn ``timeout`` (seconds from now, an aware datetime, or its ISO string) into a UTC deadline."""
    if timeout is None:
        return None
    if isinstance(timeout, bool):
        raise TypeError(f"timeout must be seconds, a datetime or an ISO 8601 string, got {timeout!r}")
    if isinstance(timeout, int | float):
        if timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds, got {timeout!r}")
        return datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=float(timeout))
    if isinstance(timeout, str):
        try:
            timeout = datetime.datetime.fromisoformat(timeout)
        except ValueError:
            raise ValueError(
                f"timeout {timeout!r} is not an ISO 8601 datetime; expected e.g. '2026-12-02T16:00:00+00:00'"
            ) from None
    if isinstance(timeout, datetime.datetime):
        if timeout.tzinfo is None:
            raise ValueError(f"timeout {timeout.isoformat()} has no time zone; pass an aware datetime (UTC)")
        return timeout.astimezone(datetime.UTC)
    raise TypeError(
        f"timeout must be seconds, a datetime or an ISO 8601 string, got {type(timeout).__name__}"
    )


def _uid(obj: dict[str, Any] | None) -> str | None:
    return ((obj or {}).get("metadata") or {}).get("uid")


class JobTrigger(BaseTrigger):
    """
    Wait for a Kubernetes Job to end, through the triggerer's shared watch of the Job's namespace.

    Yields exactly one :class:`~airflow.triggers.base.TriggerEvent`. Its payload has every key of
    upstream's ``KubernetesJobTrigger`` event, with the same meaning:

    * ``status``: ``success`` or ``error`` (upstream's two words; any ending but success is ``error``);
    * ``message``: a sentence for the task log;
    * ``name`` / ``namespace``: the Job's;
    * ``job``: the whole Job as ``kubernetes.client.V1Job.to_dict()`` gives it (None if it was never
      read), from the shared watch, or read by one GET when the watch held it projected (see
      :meth:`_with_whole_job`);
    * ``pod_names`` / ``pod_namespace``: the Job's pods (every pod, retried ones included);
    * ``xcom_result``: with ``do_xcom_push``, one string per succeeded pod (the base container's
      termination message, i.e. its ``/airflow/xcom/return.json``), else None;

    and adds:

    * ``outcome``: ``success``, ``failed``, ``deleted``, ``unknown``, ``timeout`` or ``error``
      (``unknown``: the Job vanished while the watch was reconnecting, or was gone before the watch
      saw it, and how it ended was not seen);
    * ``reason``: a short word (``Complete``, ``BackoffLimitExceeded``, ``DeadlineExceeded``,
      ``ErrImagePull``, ``Deleted``, ``FinalStateUnknown``, ``Timeout``, ``ApiUnreachable``...);
    * ``uid``: the Job's uid;
    * ``pods``: one ``{"name", "phase", "exit_code", "reason"}`` per pod;
    * ``disruptions``: one ``{"pod", "reason", "message", "started", "node", "detail"}`` per pod of the
      Job the cluster disrupted during the wait (preempted, evicted, node shutdown, ...), oldest first
      (see :mod:`airflow_jobwatch.triggers.notes`).

    A suspended Job (not yet admitted by Kueue, or preempted by it and suspended again) keeps the
    trigger waiting, and so does a Job whose pods the API refuses (a quota's 403): neither is a
    failure; the task log says what happens, once per change.

    :param job_name: name of the Job.
    :param namespace: namespace of the Job.
    :param kubernetes_conn_id: an Airflow Kubernetes connection; None to use ``config_file`` /
        ``cluster_context`` / ``in_cluster`` (or the default kubeconfig) directly.
    :param config_file: path to a kubeconfig file.
    :param cluster_context: kubeconfig context to use.
    :param in_cluster: use the pod's service account.
    :param timeout: seconds from now, or an absolute deadline (aware datetime or ISO 8601 string). The
        trigger serializes it as the absolute deadline, so a trigger moved to another triggerer keeps
        the same deadline. None waits without a deadline.
    :param poll_interval: safety-net period in seconds: how often the trigger re-reads the shared cache
        and, when its Job is missing from it, asks the API server directly. Defaults to 30.
    :param fatal_waiting_reasons: container waiting reasons that fail the Job at once (default
        ``kube.states.DEFAULT_FATAL_WAITING_REASONS`` without CreateContainerConfigError: ErrImagePull,
        ImagePullBackOff, ...).
    :param api_failure_tolerance: seconds the Kubernetes API may stay unreachable before the trigger
        ends with ``error``; default ``[jobwatch] api_failure_tolerance_seconds`` (300).
    :param job_uid: uid of the Job the operator created. A different Job re-created under the same
        name is then not mistaken for it.
    :param delete_on_kill: delete the Job when a user kills the deferred task.
    :param do_xcom_push: put the base container's termination message of each succeeded pod in the
        event's ``xcom_result``.
    :param base_container_name: the container whose termination message is the XCom result.
    :param on_kill_propagation_policy: how ``on_kill`` deletes the Job: ``Foreground`` (default),
        ``Background`` or ``Orphan``, as upstream's operator.
    :param termination_grace_period: grace period in seconds ``on_kill`` gives the Job's deletion
        (None: the server's default).
    :param delete_pods_on_kill: ``on_kill`` also deletes the Job's pods itself (upstream's
        ``on_kill_action="delete_pod"``); matters with ``Orphan``, which leaves them otherwise.
    :param disruption_retries: how many disruptions of the Job's pods the wait tolerates (the operator's
        ``podFailurePolicy`` keeps them from counting against ``backoffLimit``); one more ends the wait
        ``failed`` with reason ``DisruptionRetriesExceeded``, naming each, and deletes the Job with
        ``on_kill_propagation_policy`` and ``termination_grace_period``. None: no bound.
    :param end_task: set by the operator when everything it does after the wait can be done here: the
        trigger then ends the task itself (``TaskSuccessEvent`` / ``TaskFailedEvent``, with the ``job``
        and return-value XComs, the same log lines and ``on_finish_action`` on the pods) instead of
        resuming it on a worker. Keys: ``on_finish_action``, ``push_return``, ``xcom_path``,
        ``unwrap_single``, ``fail`` (a failure may end the task from here). None: always resume.
    :param deferred_at: when the task deferred (seconds since the epoch). A resume that fires sooner
        than ``[jobwatch] resume_hold_seconds`` after it is held until then.
    """

    def __init__(
        self,
        job_name: str,
        namespace: str,
        *,
        kubernetes_conn_id: str | None = None,
        config_file: str | None = None,
        cluster_context: str | None = None,
        in_cluster: bool | None = None,
        timeout: float | str | datetime.datetime | None = None,
        poll_interval: float | None = None,
        fatal_waiting_reasons: Collection[str] | None = None,
        api_failure_tolerance: float | None = None,
        job_uid: str | None = None,
        delete_on_kill: bool = False,
        do_xcom_push: bool = False,
        base_container_name: str = "base",
        on_kill_propagation_policy: str = "Foreground",
        termination_grace_period: int | None = None,
        delete_pods_on_kill: bool = False,
        disruption_retries: int | None = None,
        end_task: dict[str, Any] | None = None,
        deferred_at: float | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        if disruption_retries is not None and (
            not isinstance(disruption_retries, int)
            or isinstance(disruption_retries, bool)
            or disruption_retries < 0
        ):
            raise ValueError(f"disruption_retries must be an int >= 0 or None, got {disruption_retries!r}")
        if not job_name:
            raise ValueError("JobTrigger needs the Job's name (job_name), got an empty value")
        if not namespace:
            raise ValueError(f"JobTrigger for Job {job_name!r} needs its namespace, got an empty value")
        if poll_interval is not None and poll_interval <= 0:
            raise ValueError(f"poll_interval must be > 0 seconds, got {poll_interval!r}")
        if api_failure_tolerance is not None and api_failure_tolerance < 0:
            raise ValueError(f"api_failure_tolerance must be >= 0 seconds, got {api_failure_tolerance!r}")
        if on_kill_propagation_policy not in PROPAGATION_POLICIES:
            raise ValueError(
                f"on_kill_propagation_policy must be one of {', '.join(PROPAGATION_POLICIES)}, "
                f"got {on_kill_propagation_policy!r}"
            )
        if termination_grace_period is not None and termination_grace_period < 0:
            raise ValueError(
                f"termination_grace_period must be >= 0 seconds, got {termination_grace_period!r}"
            )
        self.job_name = job_name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.config_file = config_file
        self.cluster_context = cluster_context
        self.in_cluster = bool(in_cluster)
        self.deadline = _parse_deadline(timeout)
        self.poll_interval = float(poll_interval) if poll_interval is not None else None
        self.fatal_waiting_reasons = (
            sorted(fatal_waiting_reasons) if fatal_waiting_reasons is not None else None
        )
        self.api_failure_tolerance = api_failure_tolerance
        self.job_uid = job_uid
        self.delete_on_kill = delete_on_kill
        self._get_denied: str | None = None  # a 401/403 on the trigger's own GET of its Job
        self.do_xcom_push = do_xcom_push
        self.base_container_name = base_container_name
        self.on_kill_propagation_policy = on_kill_propagation_policy
        self.termination_grace_period = termination_grace_period
        self.delete_pods_on_kill = delete_pods_on_kill
        self.disruption_retries = disruption_retries
        self.end_task = dict(end_task) if end_task is not None else None
        self.deferred_at = float(deferred_at) if deferred_at is not None else None
        self._notes: WaitNotes | None = None

    @property
    def notes(self) -> WaitNotes:
        """What this wait noticed so far (disruptions, suspensions, refused pods)."""
        if self._notes is None:
            self._notes = WaitNotes(
                log=self.log,
                namespace=self.namespace,
                job_name=self.job_name,
                disruption_retries=self.disruption_retries,
            )
        return self._notes

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            CLASSPATH,
            {
                "job_name": self.job_name,
                "namespace": self.namespace,
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "config_file": self.config_file,
                "cluster_context": self.cluster_context,
                "in_cluster": self.in_cluster,
                "timeout": self.deadline.isoformat() if self.deadline else None,
                "poll_interval": self.poll_interval,
                "fatal_waiting_reasons": self.fatal_waiting_reasons,
                "api_failure_tolerance": self.api_failure_tolerance,
                "job_uid": self.job_uid,
                "delete_on_kill": self.delete_on_kill,
                "do_xcom_push": self.do_xcom_push,
                "base_container_name": self.base_container_name,
                "on_kill_propagation_policy": self.on_kill_propagation_policy,
                "termination_grace_period": self.termination_grace_period,
                "delete_pods_on_kill": self.delete_pods_on_kill,
                "disruption_retries": self.disruption_retries,
                "end_task": self.end_task,
                "deferred_at": self.deferred_at,
            },
        )

    # -- configuration ---------------------------------------------------------------------------------
    @property
    def _fatal_reasons(self) -> Collection[str]:
        if self.fatal_waiting_reasons is None:  # a missing Secret/ConfigMap may still come: wait, as upstream
            return DEFAULT_FATAL_WAITING_REASONS - {"CreateContainerConfigError"}
        return frozenset(self.fatal_waiting_reasons)

    def _tolerance(self) -> float:
        if self.api_failure_tolerance is not None:
            return float(self.api_failure_tolerance)
        return _conf_float("api_failure_tolerance_seconds", 300.0)

    async def _resolved_cluster_config(self) -> kube_client.ClusterConfig:
        """What this trigger connects with: the connection's extras (read through the provider's public
        hook API), overridden by the explicit ``config_file`` / ``cluster_context`` / ``in_cluster``.
        Reads no kubeconfig (see :mod:`airflow_jobwatch.connections`)."""
        from airflow_jobwatch.connections import cluster_config_from_connection

        return await cluster_config_from_connection(
            self.kubernetes_conn_id,
            in_cluster=self.in_cluster or None,
            config_file=self.config_file,
            cluster_context=self.cluster_context,
        )

    async def _watch_key_and_factory(self) -> tuple[WatchKey, Callable[[], Any]]:
        """Which shared watch this trigger belongs to, and how to build its client if it starts it.

        The key names the cluster (server, context, user; or "in-cluster") and carries a keyed digest of
        the credential source (token, certificate, exec command, file path and context, inline text:
        ``ClusterConfig.credential_digest()``), so triggers share a watch only when they act with the
        same credential. It reads only what the configuration names: an in-cluster trigger in a
        Helm-chart triggerer, which has no ~/.kube/config, never looks for one.
        """
        cfg = await self._resolved_cluster_config()

        async def factory() -> Any:
            return await kube_client.async_api_client(cfg)

        identity, credential = cfg.identity_and_credential_digest()
        key = WatchKey(cluster=identity, namespace=self.namespace, credential=credential)
        return key, factory

    def _informer_config(self) -> InformerConfig:
        """The shared informers' settings, without a periodic relist whatever ``[jobwatch]
        resync_interval_seconds`` says: a relist closes the watch before it lists, and a Job that ends
        and is removed in between (``ttlSecondsAfterFinished: 0``) would only be seen gone, its end
        unknown. The watch itself resumes from its last resourceVersion and relists only after a 410,
        when it must."""
        return dataclasses.replace(informer_config_from_airflow(), resync_interval_seconds=None)

    @contextlib.asynccontextmanager
    async def watching(self, *, sync_timeout: float = 10.0) -> AsyncIterator[NamespaceWatch]:
        """Keep this trigger's namespace watch open (and synced, waiting up to ``sync_timeout`` s).

        The operator's in-worker wait enters this *before* it creates the Job, so that a Job that ends
        and is deleted at once (``ttlSecondsAfterFinished: 0``) is still seen: its DELETED event, which
        carries the final conditions, arrives on a watch that is already open.
        """
        key, factory = await self._watch_key_and_factory()
        subscription = await get_registry().subscribe(
            key, factory, job_name=self.job_name, on_change=lambda: None, config=self._informer_config
        )
        try:
            await subscription.watch.wait_synced(sync_timeout)
            yield subscription.watch
        finally:
            await asyncio.shield(subscription.close())

    # -- deciding --------------------------------------------------------------------------------------
    def _payload(
        self,
        outcome: str,
        reason: str | None,
        message: str,
        *,
        job: dict[str, Any] | None = None,
        pods: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        result = JobResult.read(
            outcome=outcome,
            reason=reason,
            message=message,
            uid=_uid(job) or self.job_uid,
            pods=pods or [],
            base_container=self.base_container_name,
            do_xcom_push=self.do_xcom_push,
            disruptions=self.notes.disruption_list(),
            job=job,
        )
        read = result.to_payload()
        return {
            # upstream's keys, with upstream's meaning
            "status": read["status"],
            "message": read["message"],
            "name": self.job_name,
            "namespace": self.namespace,
            "job": client_job_dict(without_result_annotation(job)),
            "pod_names": read["pod_names"],
            "pod_namespace": self.namespace,
            "xcom_result": read["xcom_result"],
            # ours
            "outcome": read["outcome"],
            "reason": read["reason"],
            "uid": read["uid"],
            "pods": read["pods"],
            "disruptions": read["disruptions"],
        }

    def _ours(self, job: dict[str, Any] | None) -> dict[str, Any] | None:
        """``job`` if it is the Job this trigger waits for (same uid when the uid is known)."""
        if job is None:
            return None
        if self.job_uid and _uid(job) != self.job_uid:
            return None
        return job

    def _decide(self, watch: NamespaceWatch) -> dict[str, Any] | None | bool:
        """The terminal payload the cache implies, None if still waiting, False if the Job is not cached."""
        if not watch.synced:
            return None
        job = self._ours(watch.job(self.job_name))
        if job is not None:
            pods = watch.pods_of(_uid(job))
            self.notes.observe(job, pods, watch.refusals)  # disruptions, Kueue, refused pods: logged once
            return self._payload_from_state(job, pods, deleted=False)
        tomb = watch.tombstone(self.job_name)
        if tomb is not None and self._ours(tomb.job) is not None:
            if tomb.observed:  # its DELETED event was seen: it says how the Job ended
                return self._payload_from_state(tomb.job, tomb.pods, deleted=True)
            return self._payload_from_vanished(tomb.job, tomb.pods)
        return False

    def _payload_from_vanished(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
        """The payload for a Job that vanished while the watch was away: what its last state or its
        pods' final states prove, else ``unknown`` (never "deleted", which was not seen either)."""
        state = vanished_job_state(job, pods, fatal_waiting_reasons=self._fatal_reasons)
        if state.terminal:
            outcome = OUTCOME_SUCCESS if state.phase == "succeeded" else OUTCOME_FAILED
            return self._payload(outcome, state.reason, state.message, job=job, pods=pods)
        return self._payload(OUTCOME_UNKNOWN, FINAL_STATE_UNKNOWN, state.message, job=job, pods=pods)

    def _payload_never_seen(self, watch: NamespaceWatch) -> dict[str, Any]:
        """The payload for a Job the watch never saw end and the API server no longer has (a GET
        answered 404, or found another Job of its name): ``unknown``. Neither its end nor its deletion
        was seen, so it is not "deleted" either: a Job that completed and was removed by
        ``ttlSecondsAfterFinished`` before the trigger started looks exactly like this."""
        other = watch.job(self.job_name)
        replaced = other is not None and self.job_uid is not None and _uid(other) != self.job_uid
        what = f"Job {self.namespace}/{self.job_name}" + (f" (uid {self.job_uid})" if self.job_uid else "")
        gone = "was replaced by another Job of the same name" if replaced else "no longer exists"
        return self._payload(
            OUTCOME_UNKNOWN,
            FINAL_STATE_UNKNOWN,
            f"{what} {gone}, and the trigger's watch never saw it end: its final state is unknown. "
            "Whether it succeeded, failed or was deleted while running was not seen (a Job removed "
            "by ttlSecondsAfterFinished before the trigger started ends this way): check its results "
            "and its pods' logs before running it again.",
        )

    def _payload_from_state(
        self, job: dict[str, Any], pods: list[dict[str, Any]], *, deleted: bool
    ) -> dict[str, Any] | None:
        state = classify_job(job, pods, deleted=deleted, fatal_waiting_reasons=self._fatal_reasons)
        if not state.terminal:
            if not deleted and self.notes.exceeded():
                metrics.job_detected(job, status=OUTCOME_FAILED)
                return self._payload(
                    OUTCOME_FAILED,
                    REASON_DISRUPTION_RETRIES,
                    self.notes.exceeded_message(),
                    job=job,
                    pods=pods,
                )
            return None
        if state.phase == "succeeded":
            outcome = OUTCOME_SUCCESS
        elif state.reason == "Deleted":
            outcome = OUTCOME_DELETED
        else:
            outcome = OUTCOME_FAILED
        return self._payload(outcome, state.reason, state.message, job=job, pods=pods)

    def _current_state_note(
        self, watch: NamespaceWatch | None
    ) -> tuple[str, dict[str, Any] | None, list[dict[str, Any]]]:
        if watch is None or not watch.synced:
            return "the Job's state was never read", None, []
        job = self._ours(watch.job(self.job_name))
        if job is None:
            return "the Job is not in the cache", None, []
        pods = watch.pods_of(_uid(job))
        state = classify_job(job, pods, fatal_waiting_reasons=self._fatal_reasons)
        return f"it was {state.phase}: {state.message}", job, pods

    async def _read_job(self, watch: NamespaceWatch, reason: str) -> tuple[bool, dict[str, Any] | None]:
        """GET the Job: (True, job) / (True, None) on 404 / (False, None) when the API failed.

        The trigger's only request while it waits, sent in two cases only, each counted by the watch
        (``NamespaceWatch.count_job_get``, the ``jobwatch.triggerer.job_gets.<reason>`` counter):

        * ``GET_MISSING``: the synced cache has held no Job of this name (nor a tombstone of ours) for
          ``_MISSING_GRACE_SECONDS`` since the trigger first looked; again at most every
          ``poll_interval`` while that lasts;
        * ``GET_PROJECTED``: the result was decided from a projected copy (see :meth:`_with_whole_job`).
        """
        from kubernetes_asyncio.client import BatchV1Api
        from kubernetes_asyncio.client.exceptions import ApiException

        watch.count_job_get(reason)
        try:
            job = await BatchV1Api(watch.api_client).read_namespaced_job(self.job_name, self.namespace)
            return True, self._ours(to_dict(job))
        except ApiException as e:
            if e.status == 404:
                return True, None
            from airflow_jobwatch.kube.errors import access_denied_from_exception

            denied = access_denied_from_exception(
                e, verb="get", resource="jobs", group="batch", namespace=self.namespace
            )
            if denied is not None:
                self._get_denied = denied.message()
            self.log.warning("GET of Job %s/%s failed: %s", self.namespace, self.job_name, e.status)
            return False, None
        except Exception as e:
            self.log.warning("GET of Job %s/%s failed: %s", self.namespace, self.job_name, e)
            return False, None

    async def _with_whole_job(self, watch: NamespaceWatch, payload: dict[str, Any]) -> None:
        """Make sure the payload's ``job`` is the whole Job, as upstream's event's is.

        The shared watch stores the Jobs triggers wait for whole, and the namespace's other Jobs projected
        (kube/projection.py): every version of a Job that the watch delivers after its trigger subscribed
        is whole, so a Job that ends after that is decided from a whole copy, and nothing is read here.
        A Job whose last version came before its trigger subscribed (it had already ended: a triggerer
        restart, a trigger moved here; or a fail-fast or timeout ending of a Job unchanged since) is
        still projected: then one GET (``GET_PROJECTED``) reads it whole. A Job already gone
        (``deleted``) keeps what the cache had of it, and a payload without a Job (never read: an
        ``error`` before the cache answered) stays without one.
        """
        if payload.get("outcome") in (OUTCOME_DELETED, OUTCOME_UNKNOWN) or not payload.get("uid"):
            return
        cached = payload.get("job")
        if cached is None:
            return
        if (cached.get("spec") or {}).get("template") is not None:
            return  # the cache held it whole: the registry keeps the Jobs with a trigger unprojected
        answered, job = await self._read_job(watch, GET_PROJECTED)
        if answered and job is not None and _uid(job) == payload["uid"]:
            payload["job"] = client_job_dict(without_result_annotation(job))

    # -- running ---------------------------------------------------------------------------------------
    async def run(self) -> AsyncIterator[TriggerEvent]:
        """One event: the task ended from here (see ``end_task``), or the payload to resume with.

        Only in a triggerer (``task_instance`` set): a caller that runs the trigger itself (``dag.test()``)
        resumes the task with the payload, as without ``end_task``.
        """
        payload = await self.wait()
        if self.task_instance is not None:
            if self.end_task is not None:
                ended = await end_from_triggerer(self, payload)
                if ended is not None:
                    yield ended
                    return
            await hold_resume(self)
        yield TriggerEvent(payload)  # type: ignore[no-untyped-call]

    async def wait(self) -> dict[str, Any]:
        """Wait for the Job and return the event payload (the operator's worker mode calls this)."""
        return await _Wait(self).run()

    async def _kill_decision(self) -> tuple[bool, str]:
        """Whether ``on_kill`` may delete the Job, and why (for the log): only a user's kill may.

        Airflow 3.3's triggerer calls ``on_kill`` for every trigger id that ``update_triggers()`` finds
        it no longer owns, with the same "user action" cancel message in two different cases:

        * a user acted on the deferred task (mark failed / success, clear): the task instance has left
          DEFERRED, its ``trigger_id`` was cleared and the trigger row removed;
        * the trigger was *handed over*: this triggerer's heartbeat went stale for a moment (a database
          hiccup, a blocked loop, a long GC), another triggerer took the trigger, and this one gives it
          up when it recovers. The task instance is still DEFERRED, and the other triggerer's instance
          of this same trigger still waits for the Job: deleting it would fail the task.

        The trigger row's owner is not readable from inside a trigger; the task instance's state is,
        through the Task SDK's public ``RuntimeTaskInstance.get_task_states`` (the supervisor's
        ``GetTaskStates`` call, which upstream's ``KubernetesPodTrigger`` uses for the same purpose).
        Still DEFERRED means a hand-over: the Job is left. Any other state means the task left
        DEFERRED for a user's reason: the Job is deleted. When the state cannot be read (the call
        fails, or the task instance is not found) the Job is left, and the log says why: a Job left
        running by mistake costs resources, one deleted by mistake fails a healthy task.

        A trigger that runs outside a triggerer (``task_instance`` unset: called directly, as the
        operator's worker mode or a user's code does) is killed by its caller's explicit request.
        """
        ti = self.task_instance
        if ti is None:
            return True, "called directly (no task instance: not run by a triggerer)"
        try:
            from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

            map_index = getattr(ti, "map_index", -1)
            map_index = -1 if map_index is None else int(map_index)
            states = await asyncio.to_thread(
                RuntimeTaskInstance.get_task_states,
                dag_id=ti.dag_id,
                task_ids=[ti.task_id],
                run_ids=[ti.run_id],
                map_index=map_index,
            )
        except Exception as e:
            return False, (
                f"the task instance's state could not be read ({type(e).__name__}: {e}); the Job is left "
                "running rather than risk deleting one that another triggerer still waits for"
            )
        # The /states answer is {run_id: {task_id: state}}, the key suffixed with _<map_index> when mapped.
        ti_key = f"{ti.task_id}_{map_index}" if map_index >= 0 else ti.task_id
        run_states = (states or {}).get(ti.run_id) or {}
        if ti_key not in run_states:
            return False, (
                f"the task instance {ti.dag_id}/{ti.run_id}/{ti_key} was not found; the Job is left running"
            )
        state = run_states[ti_key]
        state = getattr(state, "value", state)
        if state == "deferred":
            return False, (
                "the task is still deferred: the trigger was handed over to another triggerer (or this "
                "triggerer is giving it up), which keeps waiting for the Job; the Job is left running"
            )
        return True, f"the task left DEFERRED (state {state!r}): a user's kill"

    async def on_kill(self) -> None:
        """Delete the Job (with ``on_kill_propagation_policy`` and ``termination_grace_period``), when
        the operator asked for it and the task was really killed by a user, and its pods too with
        ``delete_pods_on_kill``.

        Airflow 3.3 calls this when a user acts on the deferred task (mark failed / clear / mark
        success), never on triggerer shutdown or timeout; it also calls it when the trigger was handed
        over to another triggerer, and then the Job is left alone (see :meth:`_kill_decision`), so an
        in-flight Job survives a triggerer restart and an HA hand-over.
        """
        if not self.delete_on_kill:
            return
        # Airflow's trigger runner re-sends its cancel request every loop until the trigger has finished
        # (the supervisor keeps the id in ``cancelling_triggers`` until then), and each one cancels the
        # coroutine running this method again. Reading the task's state through the supervisor can take
        # seconds on a busy triggerer, and a cancel in the middle would leave a Job the user asked to
        # delete (seen end to end). So the work runs shielded, and repeated cancels are absorbed within
        # ``[triggerer] on_kill_timeout``, Airflow's own bound on this method; after it, the cancel goes
        # through and the work finishes on its own (each of its requests has a timeout).
        loop = asyncio.get_running_loop()
        work = asyncio.ensure_future(self._kill())
        deadline = loop.time() + _on_kill_timeout()
        while True:
            try:
                await asyncio.shield(work)
                return
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if work.done() or loop.time() >= deadline or current is None:
                    if not work.done():  # it goes on alone: its outcome still reaches the log
                        work.add_done_callback(self._log_detached_kill)
                    raise
                current.uncancel()  # absorbed: a repeat of the cancel that started this kill

    async def _terminal_condition(self, client: Any) -> str | None:
        """The Job's terminal condition (Complete, Failed, SuccessCriteriaMet, FailureTarget) as the
        API server has it now, or None when it has none, is another Job, is gone or cannot be read (a
        cancellation never deletes a Job that has ended; one it cannot see is deleted as before)."""
        from kubernetes_asyncio.client import BatchV1Api

        try:
            response: Any = await BatchV1Api(client).read_namespaced_job(
                self.job_name, self.namespace, _preload_content=False
            )  # the raw response: the API's JSON, which classify_job reads
            job = await response.json()
        except Exception as e:
            self.log.debug(
                "Could not read Job %s/%s before deleting it: %s", self.namespace, self.job_name, e
            )
            return None
        if self.job_uid and _uid(job) != self.job_uid:
            return None
        state = classify_job(job)
        if not state.terminal:
            return None
        return str(state.reason or state.phase)

    def _log_detached_kill(self, work: asyncio.Future[None]) -> None:
        if not work.cancelled() and (error := work.exception()) is not None:
            self.log.warning(
                "Deleting Job %s/%s on kill failed after on_kill_timeout: %s",
                self.namespace,
                self.job_name,
                error,
            )

    async def _kill(self) -> None:
        """on_kill's work: decide, then delete the Job (and its pods with ``delete_pods_on_kill``)."""
        delete, why = await self._kill_decision()
        if not delete:
            self.log.warning("Not deleting Job %s/%s on kill: %s", self.namespace, self.job_name, why)
            return
        self.log.info("Deleting Job %s/%s on kill: %s", self.namespace, self.job_name, why)
        from kubernetes_asyncio.client import BatchV1Api, CoreV1Api, V1DeleteOptions, V1Preconditions
        from kubernetes_asyncio.client.exceptions import ApiException

        client = await kube_client.async_api_client(await self._resolved_cluster_config())
        ended = await self._terminal_condition(client)
        if ended is not None:
            await client.close()
            self.log.warning(
                "Not deleting Job %s/%s on kill: it has already ended (%s), so it and its pods are kept "
                "for the task's logs and result",
                self.namespace,
                self.job_name,
                ended,
            )
            return
        try:
            await BatchV1Api(client).delete_namespaced_job(
                self.job_name,
                self.namespace,
                body=V1DeleteOptions(
                    propagation_policy=self.on_kill_propagation_policy,
                    grace_period_seconds=self.termination_grace_period,
                    preconditions=V1Preconditions(uid=self.job_uid) if self.job_uid else None,
                ),
            )
        except ApiException as e:
            if e.status not in (404, 409):  # already gone / a different Job now has this name
                await client.close()
                from airflow_jobwatch.kube.errors import access_denied_from_exception

                denied = access_denied_from_exception(
                    e, verb="delete", resource="jobs", group="batch", namespace=self.namespace
                )
                if denied is not None:  # explained, without the response headers the exception prints
                    raise PermissionError(denied.message()) from None
                raise
        try:
            if self.delete_pods_on_kill and self.job_uid:
                core = CoreV1Api(client)
                pods = await core.list_namespaced_pod(
                    self.namespace, label_selector=f"controller-uid={self.job_uid}"
                )
                for pod in pods.items:  # pod by pod: the verbs upstream's RBAC grants (list, delete)
                    try:
                        await core.delete_namespaced_pod(pod.metadata.name, self.namespace)
                    except ApiException as e:
                        if e.status != 404:
                            self.log.warning("Could not delete pod %s: HTTP %s", pod.metadata.name, e.status)
        finally:
            await client.close()


class _Wait:
    """One wait of one :class:`JobTrigger`: a small state machine, read top to bottom.

    ::

        SUBSCRIBING --cannot watch--------------------------------------------> DONE (error)
             |
             v
        WATCHING --cache says terminal, pods final----------------------------> DONE
             |   --cache says terminal, pods not yet final--> HOLDING --final, or 1 s--> DONE
             |   --Job missing from the synced cache--> AWAITING (no request)
             |         --the watch delivers it within 2 s--> back to WATCHING
             |         --still missing after 2 s--> CONFIRMING (one GET)
             |               --found terminal--------------------------------> DONE
             |               --404, no DELETED event within 2 s---------------> DONE (unknown)
             |   --API failing longer than the tolerance---------------------> DONE (error)
             |   --deadline (the cache is looked at once more first)----------> DONE (timeout, or held)
             v
        DONE: the result is a future set once; the first terminal result wins.

    Transitions come from three sources: the informers' callbacks (:meth:`on_change`), the deadline
    timer (:meth:`on_deadline`) and the safety-net loop (:meth:`_watching`), which also runs the
    CONFIRMING and API-tolerance checks.
    """

    def __init__(self, trigger: JobTrigger) -> None:
        self.trigger = trigger
        self.loop = asyncio.get_running_loop()
        self.result: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self.watch: NamespaceWatch | None = None
        #: HOLDING: a terminal result waiting (at most _POD_SETTLE_SECONDS) for its pods to be final.
        self.held: dict[str, Any] | None = None
        self.hold_timer: asyncio.TimerHandle | None = None
        self.deadline_timer: asyncio.TimerHandle | None = None
        #: While the safety net (_watching) sleeps: resolved by on_change when the cache stops holding
        #: our Job, to wake it.
        self.poke: asyncio.Future[None] | None = None

    # -- DONE ------------------------------------------------------------------------------------------
    def done(self, payload: dict[str, Any]) -> None:
        """Set-once: whichever terminal result comes first is the one reported."""
        if not self.result.done():
            self.result.set_result(payload)
            metrics.job_detected(payload.get("job"), status=payload["outcome"])  # once per wait

    # -- WATCHING -> HOLDING / DONE --------------------------------------------------------------------
    def offer(self, payload: dict[str, Any]) -> None:
        """A terminal decision from the cache: DONE at once, unless it is a success/failure whose pods the
        pod watch has not yet shown final: then HOLDING (re-decided on every change) until they are, or
        for _POD_SETTLE_SECONDS at most. An ``unknown`` (a Job gone unseen) whose pods still show running
        is held the same way: the pod watch, which relists on its own, may yet deliver the final state
        that proves how the Job ended."""
        if self.result.done():
            return
        held = (OUTCOME_SUCCESS, OUTCOME_FAILED, OUTCOME_UNKNOWN)
        if payload["outcome"] not in held or _pods_final(payload):
            self.done(payload)
            return
        self.held = payload
        if self.hold_timer is None:
            self.hold_timer = self.loop.call_later(_POD_SETTLE_SECONDS, self.release_held)

    def release_held(self) -> None:
        if self.held is not None:
            self.done(self.held)

    def on_change(self) -> None:
        """An informer callback: decide from the cache."""
        if self.watch is None or self.result.done():
            return
        decision = self.trigger._decide(self.watch)
        if isinstance(decision, dict):
            self.offer(decision)
        elif decision is False and self.poke is not None and not self.poke.done():
            # The cache holds no Job of ours under this name (e.g. another Job was created under it):
            # the safety net confirms at once what became of ours, instead of at its next poll.
            self.poke.set_result(None)

    def on_deadline(self) -> None:
        if self.result.done():
            return
        self.on_change()  # a terminal state already in the cache wins over the deadline
        if self.held is not None:
            self.done(self.held)  # ... even one still waiting for its pods to settle
            return
        t = self.trigger
        note, job, pods = t._current_state_note(self.watch)
        self.done(
            t._payload(
                OUTCOME_TIMEOUT,
                "Timeout",
                f"Job {t.namespace}/{t.job_name} did not finish before its deadline "
                f"{t.deadline.isoformat() if t.deadline else '?'}; {note}",
                job=job,
                pods=pods,
            )
        )

    # -- the whole run ---------------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        t = self.trigger
        t.notes.bind_context(contextvars.copy_context())  # its lines go to this task's log
        if t.deadline is not None:
            delay = (t.deadline - datetime.datetime.now(datetime.UTC)).total_seconds()
            self.deadline_timer = self.loop.call_later(max(0.0, delay), self.on_deadline)
        subscription: Subscription | None = None
        try:
            # SUBSCRIBING
            try:
                key, factory = await t._watch_key_and_factory()
                subscription = await get_registry().subscribe(
                    key,
                    factory,
                    job_name=t.job_name,
                    on_change=self.on_change,
                    config=t._informer_config,
                    job_uid=t.job_uid,
                )
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.done(
                    t._payload(
                        OUTCOME_ERROR,
                        "ConfigError",
                        f"Cannot watch Job {t.namespace}/{t.job_name}: {type(e).__name__}: {e}",
                    )
                )
            else:
                self.watch = subscription.watch
                await self._watching(self.watch)
            payload = await self.result
            if payload.get("reason") == REASON_DISRUPTION_RETRIES and self.watch is not None:
                await delete_job(
                    self.watch.api_client,
                    namespace=t.namespace,
                    name=t.job_name,
                    uid=payload.get("uid"),
                    propagation_policy=t.on_kill_propagation_policy,
                    grace_period_seconds=t.termination_grace_period,
                    log=t.log,
                )
            if self.watch is not None:
                await t._with_whole_job(self.watch, payload)
            return payload
        finally:
            t.notes.close()
            for timer in (self.deadline_timer, self.hold_timer):
                if timer is not None:
                    timer.cancel()
            if subscription is not None:
                # Only leave the shared watch; the Job itself is never touched here.
                await asyncio.shield(subscription.close())

    async def _watching(self, watch: NamespaceWatch) -> None:
        """WATCHING's safety net, every ``poll_interval`` (sooner while the API fails or the Job is
        being confirmed missing): decide from the cache, CONFIRMING, and the API-failure tolerance."""
        t = self.trigger
        poll = t.poll_interval or DEFAULT_POLL_INTERVAL_SECONDS
        tolerance: float | None = None  # read when the API first fails (most waits never need it)
        # AWAITING: when the next confirming GET of a Job missing from the synced cache may be sent (set
        # _MISSING_GRACE_SECONDS after the first look that missed it, then poll_interval after each GET).
        confirm_at: float | None = None
        # CONFIRMING: when a GET answered 404 (the DELETED event may still be on its way).
        missing_since: float | None = None
        # Triggers that start together (a triggerer picking up thousands at once) would otherwise wake
        # together every poll_interval, and each such burst delays every watch event behind it: the
        # first safety-net look comes after a random part of the interval, later ones +-10 % of it.
        next_poll = poll * random.random()
        while not self.result.done():
            decision = t._decide(watch)
            if isinstance(decision, dict):
                self.offer(decision)
                break
            if decision is not False:
                confirm_at = missing_since = None
            elif confirm_at is None:
                # AWAITING. Synced, yet the Job is neither cached nor tombstoned. Most often the watch
                # has not delivered it yet: the operator defers right after its create is answered. Give
                # the watch a moment, for free; the Job's events are stored whole from now on.
                confirm_at = time.monotonic() + _MISSING_GRACE_SECONDS
            elif missing_since is not None:
                if time.monotonic() - missing_since >= _MISSING_GRACE_SECONDS:
                    self.done(t._payload_never_seen(watch))
                    break
            elif time.monotonic() >= confirm_at:
                # CONFIRMING. Still missing: either it was deleted before the watch saw it (triggerer
                # restart, TTL), or the watch lags. One GET tells which (and may carry its final state).
                answered, job = await t._read_job(watch, GET_MISSING)
                if self.result.done():
                    break
                confirm_at = time.monotonic() + poll
                if answered and job is None:
                    # Gone from the server. Its DELETED event (which says how it ended) may still be
                    # on its way down the watch: give the watch a moment before calling it unknown.
                    missing_since = time.monotonic()
                elif job is not None:
                    result = t._payload_from_state(job, [], deleted=False)
                    if result is not None:
                        self.done(result)
                        break
            denied = watch.access_denied or t._get_denied
            if denied:  # A permission error is permanent: end now, with the advice
                reason = "Unauthorized" if "401 Unauthorized" in denied else "Forbidden"
                self.done(
                    t._payload(
                        OUTCOME_ERROR,
                        reason,
                        f"Cannot wait for Job {t.namespace}/{t.job_name}: {denied}",
                    )
                )
                break
            failing_for = watch.api_failing_for()
            if failing_for is not None and tolerance is None:
                tolerance = t._tolerance()
            if failing_for is not None and tolerance is not None and failing_for >= tolerance:
                self.done(
                    t._payload(
                        OUTCOME_ERROR,
                        "ApiUnreachable",
                        f"The Kubernetes API failed for {failing_for:.0f} s (tolerance {tolerance:g} s) "
                        f"while waiting for Job {t.namespace}/{t.job_name}; last error: "
                        f"{watch.last_error or 'unknown'}",
                    )
                )
                break
            wait_for, next_poll = next_poll, poll * random.uniform(0.9, 1.1)
            if failing_for is not None and tolerance is not None:
                wait_for = min(wait_for, max(0.05, tolerance - failing_for))
            if missing_since is not None:
                wait_for = min(
                    wait_for, max(0.01, _MISSING_GRACE_SECONDS - (time.monotonic() - missing_since))
                )
            elif confirm_at is not None:
                wait_for = min(wait_for, max(0.01, confirm_at - time.monotonic()))
            # Until the result, the timeout, or the watch's health changes (it also wakes us every
            # second while the API fails): no timer of our own ticks while the watch is merely syncing.
            changed = watch.changed()
            self.poke = poke = self.loop.create_future()
            try:
                await asyncio.wait(
                    (self.result, changed, poke), timeout=wait_for, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                watch.forget(changed)
                self.poke = None
                poke.cancel()


class _Response:
    """What ``ApiClient.deserialize`` reads from an HTTP response: its body."""

    def __init__(self, data: str) -> None:
        self.data = data


_model_client: Any = None


def client_job_dict(job: dict[str, Any] | None) -> dict[str, Any] | None:
    """The Job (API JSON) as ``kubernetes.client.V1Job.to_dict()`` returns it: the shape upstream puts
    in its event's ``job`` and in the ``job`` XCom (snake_case keys, datetimes)."""
    global _model_client
    if job is None:
        return None
    import json

    import kubernetes.client.models
    from kubernetes.client import ApiClient

    try:  # the same result without building models: see model_dict_from_json
        result: dict[str, Any] = model_dict_from_json(job, "V1Job", kubernetes.client.models)
        return result
    except ModelShapeUnsupported:
        pass

    if _model_client is None:
        from kubernetes.client import Configuration

        configuration = Configuration()
        # the cache's projected Job lacks required fields (spec.template): build the model anyway
        configuration.client_side_validation = False
        _model_client = ApiClient(configuration)
    model = _model_client.deserialize(_Response(json.dumps(job)), "V1Job")
    return model.to_dict()  # type: ignore[no-any-return]


def _uncounted_pods(status: dict[str, Any]) -> int:
    """How many ended pods the Job controller lists in ``status.uncountedTerminatedPods`` (pod uids it has
    seen end but not yet added to ``succeeded`` / ``failed``). Either key spelling: the payload's ``job``
    is the client's ``to_dict()`` shape, the cache's is API JSON. Garbage counts as none."""
    uncounted = status.get("uncounted_terminated_pods", status.get("uncountedTerminatedPods"))
    if not isinstance(uncounted, dict):
        return 0
    return sum(len(uids) for key in ("succeeded", "failed") if isinstance(uids := uncounted.get(key), list))


def _pods_final(payload: dict[str, Any]) -> bool:
    """Whether a terminal payload's pods (and the Job's counters) are final enough to report.

    * Every pod in the payload's summary is in a terminal phase (as classified by kube/states).
    * The Job controller has folded every ended pod into its counters: ``uncountedTerminatedPods`` is
      empty. It lists a pod first, with ``SuccessCriteriaMet`` / ``FailureTarget`` when that pod decides
      the Job, and moves it to ``succeeded`` / ``failed`` in its next status update; until then the
      Job's counters are not the final ones.
    * The pod watch has shown at least as many ended pods as the Job counts, and one for a success (the
      pods' events can lag behind the Job's: a payload without them would lack their exit codes and
      XCom results).

    A decision that is not final yet is held (re-decided on every change) for at most
    ``_POD_SETTLE_SECONDS``.
    """
    status = (payload.get("job") or {}).get("status") or {}
    if _uncounted_pods(status):
        return False
    counted = (status.get("succeeded") or 0) + (status.get("failed") or 0)
    if payload["outcome"] == OUTCOME_SUCCESS:
        counted = max(counted, 1)  # a Job succeeds through at least one succeeded pod
    ended = sum(1 for pod in payload["pods"] if pod["phase"] in TERMINAL_PHASES)
    return ended == len(payload["pods"]) and ended >= counted
