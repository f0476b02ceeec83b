"""JobTrigger: waits for a Kubernetes Job through the triggerer's shared per-namespace watch.

What it answers, compared with upstream's ``KubernetesJobTrigger`` (which GETs each Job every 10 s):

* **Requests.** Every JobTrigger of a namespace shares one Job informer and one pod informer
  (:mod:`airflow_jobwatch.triggers.registry`). A trigger that subscribes before its Job ends sends no
  GET of its Job: not while it waits, and not at the end, since the watch stores the Jobs triggers wait
  for whole. 500 deferred Jobs cost two watches, not 50 GETs a second. A trigger GETs its Job only
  when the watch cannot answer for it (see ``JobDecisions.read_job``): once for a Job the synced
  cache has lacked for ``_MISSING_GRACE_SECONDS`` (deleted before the watch saw it, or a watch that
  lags), and once for a Job whose result was decided from a projected copy (it ended before its trigger
  subscribed: a triggerer restart).
* **Latency.** The trigger is called back from the watch event that makes its Job terminal.
* **Meaning.** Only ``kube/meaning/states.py`` decides what a Job is: a condition whose status is "False" is not
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

This module holds what Airflow calls (``JobTrigger``'s arguments, ``serialize``, ``run``, ``on_kill``);
each path behind it has a module of its own: the decision and the payload (``triggers/deciding.py``),
the wait loop (``triggers/waiting.py``), the kill path (``triggers/killing.py``) and the event's words
(``ending/outcomes.py``). The trigger builds its wait from values and a ``JobDecisions`` (see
:meth:`JobTrigger._wait`): the wait never sees the trigger. Every name imported from here before still is.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_jobwatch.ending.end import end_from_triggerer, hold_resume
from airflow_jobwatch.ending.masking import KWARG as MASK_SECRETS_KWARG
from airflow_jobwatch.ending.masking import TaskSecrets, logged_event
from airflow_jobwatch.ending.outcomes import (
    OUTCOME_DELETED,
    OUTCOME_ERROR,
    OUTCOME_FAILED,
    OUTCOME_SUCCESS,
    OUTCOME_TIMEOUT,
    OUTCOME_UNKNOWN,
    STATUS_ERROR,
    STATUS_SUCCESS,
)
from airflow_jobwatch.kube.cluster import client as kube_client
from airflow_jobwatch.kube.engine.informer import InformerConfig
from airflow_jobwatch.kube.meaning.states import DEFAULT_FATAL_WAITING_REASONS
from airflow_jobwatch.triggers.deciding import JobDecisions, client_job_dict
from airflow_jobwatch.triggers.killing import JobKilling
from airflow_jobwatch.triggers.notes import WaitNotes
from airflow_jobwatch.triggers.registry import NamespaceWatch, Subscription, WatchKey, get_registry
from airflow_jobwatch.triggers.waiting import (
    DEFAULT_POLL_INTERVAL_SECONDS,
    Wait,
    WaitTarget,
    pods_final,  # noqa: F401 - importable from here, as before
)

__all__ = [
    "DEFAULT_POLL_INTERVAL_SECONDS",
    "OUTCOME_DELETED",
    "OUTCOME_ERROR",
    "OUTCOME_FAILED",
    "OUTCOME_SUCCESS",
    "OUTCOME_TIMEOUT",
    "OUTCOME_UNKNOWN",
    "STATUS_ERROR",
    "STATUS_SUCCESS",
    "JobTrigger",
    "client_job_dict",
    "fatal_reasons",
    "informer_config_from_airflow",
]

CLASSPATH = "airflow_jobwatch.triggers.job.JobTrigger"

#: Propagation policies ``on_kill`` may send (the API server's own list).
PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")


def _conf_float(option: str, fallback: float | None = None) -> float:
    from airflow_jobwatch import config as jobwatch_config

    return jobwatch_config.get_float(option)


def fatal_reasons(fatal_waiting_reasons: Collection[str] | None) -> Collection[str]:
    """The container waiting reasons that fail a Job at once, from ``fatal_waiting_reasons`` as given
    (None: the defaults, but ``CreateContainerConfigError``: a missing Secret/ConfigMap may still come,
    so the wait goes on, as upstream's does)."""
    if fatal_waiting_reasons is None:
        return DEFAULT_FATAL_WAITING_REASONS - {"CreateContainerConfigError"}
    return frozenset(fatal_waiting_reasons)


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


class JobTrigger(JobKilling):
    """
    Wait for a Kubernetes Job to end, through the triggerer's shared watch of the Job's namespace.

    Yields exactly one :class:`~airflow.triggers.base.TriggerEvent`. Its payload has every key of
    upstream's ``KubernetesJobTrigger`` event, with the same meaning:

    * ``status``: ``success`` or ``error`` (upstream's two words; any ending but success is ``error``);
    * ``message``: a sentence for the task log;
    * ``name`` / ``namespace``: the Job's;
    * ``job``: the whole Job as ``kubernetes.client.V1Job.to_dict()`` gives it (None if it was never
      read), from the shared watch, or read by one GET when the watch held it projected (see
      :meth:`~airflow_jobwatch.triggers.deciding.JobDecisions.with_whole_job`);
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
        ``kube.meaning.states.DEFAULT_FATAL_WAITING_REASONS`` without CreateContainerConfigError: ErrImagePull,
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
    :param mask_secrets: the values the task's secrets masker hid in the worker when it deferred
        (connection passwords, sensitive Variables, ``mask_secret()`` values), set by the operator. Every
        line this trigger logs is masked with them, as the worker's supervisor would mask it; they travel
        in the trigger's kwargs, which Airflow stores encrypted, and never appear in its ``repr``. None
        (not known): the trigger does not end the task itself (``end_task``) but resumes it on a worker.
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
        mask_secrets: list[str] | None = None,
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
        self.do_xcom_push = do_xcom_push
        self.base_container_name = base_container_name
        self.on_kill_propagation_policy = on_kill_propagation_policy
        self.termination_grace_period = termination_grace_period
        self.delete_pods_on_kill = delete_pods_on_kill
        self.disruption_retries = disruption_retries
        self.end_task = dict(end_task) if end_task is not None else None
        self.deferred_at = float(deferred_at) if deferred_at is not None else None
        self.mask_secrets = list(mask_secrets) if mask_secrets is not None else None
        self.secrets = TaskSecrets.from_kwargs(self.mask_secrets)
        self._notes: WaitNotes | None = None
        #: While the task's end runs in ``run()``: the shared watch's client it uses (see end_client).
        self._end_api_client: Any = None

    @property
    def log(self) -> Any:
        """The trigger's logger; with the task's secrets (``mask_secrets``), every line it writes is
        masked with them, since the triggerer's supervisor does not know them."""
        log = super().log
        secrets = getattr(self, "secrets", None)
        return secrets.log(log) if secrets is not None else log

    def __repr__(self) -> str:
        classpath, kwargs = self.serialize()
        if kwargs.get(MASK_SECRETS_KWARG) is not None:  # the values never reach a log line
            kwargs[MASK_SECRETS_KWARG] = f"<{len(kwargs[MASK_SECRETS_KWARG])} masked values>"
        return str(self.repr(classpath, kwargs))

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
                MASK_SECRETS_KWARG: self.mask_secrets,
            },
        )

    # -- configuration ---------------------------------------------------------------------------------
    @property
    def _fatal_reasons(self) -> Collection[str]:
        return fatal_reasons(self.fatal_waiting_reasons)

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
        """The shared informers' settings, without the periodic resync of ``[jobwatch]
        resync_interval_seconds`` (the executor's option: it re-delivers the watcher's cache). Nothing
        here needs a re-delivery: each trigger decides from the store when it starts and from each event.
        The watch resumes from its last resourceVersion and relists only after a 410, when it must."""
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

    # -- running ---------------------------------------------------------------------------------------
    async def run(self) -> AsyncIterator[TriggerEvent]:
        """One event: the task ended from here (see ``end_task``), or the payload to resume with.

        Only in a triggerer (``task_instance`` set): a caller that runs the trigger itself (``dag.test()``)
        resumes the task with the payload, as without ``end_task``.
        """
        ended: Any = None

        async def end(payload: dict[str, Any], watch: NamespaceWatch | None) -> None:
            nonlocal ended
            if self.task_instance is None or self.end_task is None:
                return
            self._end_api_client = watch.api_client if watch is not None else None
            try:
                # Airflow logs a resume's whole event (masking.logged_event says what it keeps out)
                ended = await end_from_triggerer(self, logged_event(payload, self.secrets))
            finally:
                self._end_api_client = None

        payload = await self._wait().run(then=end)
        if ended is not None:
            yield ended
            return
        if self.task_instance is not None:
            payload = logged_event(payload, self.secrets)
            await hold_resume(self)
        yield TriggerEvent(payload)  # type: ignore[no-untyped-call]

    async def wait(self) -> dict[str, Any]:
        """Wait for the Job and return the event payload (the operator's worker mode calls this)."""
        return await self._wait().run()

    def _wait(self) -> Wait:
        """This trigger's wait (not started): what it waits for as a value, the decisions over the cache,
        and how to join the shared watch. The wait sees nothing else of the trigger."""
        target = WaitTarget(
            job_name=self.job_name,
            namespace=self.namespace,
            job_uid=self.job_uid,
            deadline=self.deadline,
            poll_interval=self.poll_interval,
            propagation_policy=self.on_kill_propagation_policy,
            grace_period_seconds=self.termination_grace_period,
            api_failure_tolerance=self._tolerance,
        )
        return Wait(target, self._decisions(), self._subscribe)

    def _decisions(self) -> JobDecisions:
        """What the cache means for this trigger's Job, with this trigger's notes and masked log."""
        return JobDecisions(
            job_name=self.job_name,
            namespace=self.namespace,
            job_uid=self.job_uid,
            base_container_name=self.base_container_name,
            do_xcom_push=self.do_xcom_push,
            fatal_reasons=self._fatal_reasons,
            notes=self.notes,
            log=self.log,
        )

    async def _subscribe(self, on_change: Callable[[], None]) -> Subscription:
        """Join this trigger's shared namespace watch, called back on each change of its Job or pods."""
        key, factory = await self._watch_key_and_factory()
        return await get_registry().subscribe(
            key,
            factory,
            job_name=self.job_name,
            on_change=on_change,
            config=self._informer_config,
            job_uid=self.job_uid,
        )

    async def end_client(self) -> tuple[Any, Callable[[], Awaitable[None]]]:
        """The ``kubernetes_asyncio`` client the task's end uses, and how to give it back: the shared
        watch's own client while this trigger's run holds the watch (its credential is this trigger's,
        since the watch is keyed by the credential's digest), so an exec-plugin credential (EKS, GKE)
        runs no plugin for the end; else a client of its own, closed when given back."""
        if self._end_api_client is not None:

            async def keep() -> None:
                return None

            return self._end_api_client, keep
        api = await kube_client.async_api_client(await self._resolved_cluster_config())
        return api, api.close

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
