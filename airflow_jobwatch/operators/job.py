"""KubernetesJobOperator: runs a batch/v1 Job and waits for it with JobTrigger's shared watch.

Built on upstream's ``KubernetesJobOperator`` for what it does well (the parameters users know, the pod
template built by ``KubernetesPodOperator``'s machinery, ``job_template_file`` / ``full_job_spec``
merging, templated fields) and replacing what it gets wrong (failure-modes.md items 12-17):

* Waiting. Deferred, it hands the wait to :class:`~airflow_jobwatch.triggers.job.JobTrigger`; not
  deferred, it runs the same trigger code in the worker. No pod discovery before waiting (upstream
  lists pods right after creating the Job and fails when the Job controller has not made them yet,
  #70585; it then waits pod by pod and hangs when parallelism exceeds completions, #64867).
* Deadline. Deferred, what is left of ``execution_timeout`` goes to the trigger as an absolute
  deadline, so it holds while deferred and across triggerer restarts. In the worker the only
  deadline is Airflow's own (SIGALRM, ``AirflowTaskTimeout``, then ``on_kill()``), and the event loop
  runs off the main thread so that the alarm always reaches it (``operators/inworker.py``); an alarm whose
  exception Python dropped (it landed in a finalizer) is read back from the timer (``operators/alarm.py``).
* XCom without exec. Upstream runs an ``alpine`` sidecar and execs into it to read
  ``/airflow/xcom/return.json``. Here the sidecar is a native one (``restartPolicy: Always``), which
  the kubelet stops once the base container has exited and which then prints the file to its own log;
  the result is read from that log (``operators/sidecar.py``, ``kube/meaning/xcom_sidecar.py``). A cluster
  without native sidecars gets the Job without it, and the result is the base container's termination
  message (4 KiB).
* Killing. ``on_kill`` (worker) and the trigger's ``on_kill`` (deferred: only on a user's kill or
  mark-failed, never on a triggerer restart) delete the Job with ``on_kill_propagation_policy`` and
  ``termination_grace_period``, as upstream's ``on_kill`` does (#14, #15). A wait that ends while the
  Job still runs (deferred timeout, unreachable API, fail-fast) deletes it the same way.
* Retried workers. A Job that already exists under the same name is adopted when its pod template
  carries this task try's labels (the labels upstream's pods carry), instead of failing with 409 or
  starting the work twice. The Job's own labels stay exactly the user's.

What a DAG author sees is upstream's: the XCom keys (``job_name``, ``job_namespace``, ``job``, the
return value), the Job object (kept after the wait; only its pods are cleaned up by
``on_finish_action``), its labels, the validation errors, the trigger event's keys and ``status`` words.
Deliberate differences are listed in ``docs/migration.md``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from airflow.exceptions import AirflowConfigException, AirflowProviderDeprecationWarning
from airflow.providers.cncf.kubernetes.operators.job import (
    KubernetesJobOperator as _UpstreamKubernetesJobOperator,
)
from airflow.providers.common.compat.sdk import AirflowException, conf
from kubernetes.client import models as k8s
from kubernetes.client.rest import ApiException

from airflow_jobwatch import config as jobwatch_config
from airflow_jobwatch.compat import OnKillAction, on_kill_action, pod_operator_arguments, upstream_arguments
from airflow_jobwatch.ending import masking
from airflow_jobwatch.kube.meaning.result import TERMINATION_MESSAGE_LIMIT_BYTES, JobResult
from airflow_jobwatch.operators import inworker, request, resume
from airflow_jobwatch.operators.alarm import ExecutionTimeoutAlarm
from airflow_jobwatch.operators.arguments import check_argument_types, unhonoured_arguments
from airflow_jobwatch.operators.taskjob import TaskJob
from airflow_jobwatch.pod_template import pod_template_problem

if TYPE_CHECKING:
    from collections.abc import Container
    from typing import Literal

    from airflow.providers.cncf.kubernetes.callbacks import KubernetesPodOperatorCallback
    from airflow.providers.cncf.kubernetes.secret import Secret
    from airflow.sdk import Context

__all__ = ["TERMINATION_MESSAGE_LIMIT_BYTES", "XCOM_RETURN_PATH", "KubernetesJobOperator"]

#: Where KubernetesPodOperator users write their result. Used as the base container's
#: terminationMessagePath when ``do_xcom_push`` is on.
XCOM_RETURN_PATH = "/airflow/xcom/return.json"


#: This provider's own arguments (after upstream's in the signature); upstream's operator gets the rest.
_OWN_ARGUMENTS = ("fatal_waiting_reasons", "api_failure_tolerance", "xcom_path", "disruption_retries")


class KubernetesJobOperator(_UpstreamKubernetesJobOperator):
    """
    Create a Kubernetes Job and (optionally) wait for it through a shared watch.

    The arguments are upstream's (``airflow.providers.cncf.kubernetes.operators.job.KubernetesJobOperator``,
    with the ``KubernetesPodOperator`` arguments it builds the pod template from), with upstream's
    defaults and meaning, then this provider's own. An upstream argument that is set but has no effect
    here is named in one warning when the task starts (see docs/migration.md).

    The Job:

    :param job_template_file: a YAML or JSON file with a whole Job to start from (templated).
    :param full_job_spec: a ``V1Job`` to start from; the arguments below fill in what it leaves unset.
    :param backoff_limit: pod failures the Job controller retries before the Job fails.
    :param completion_mode: ``NonIndexed`` (default) or ``Indexed`` (each pod gets a completion index).
    :param completions: pods that must succeed for the Job to succeed.
    :param manual_selector: whether ``selector`` is yours rather than generated by Kubernetes.
    :param parallelism: pods running at once (at least 1 when waiting).
    :param selector: the label selector of the Job's pods (with ``manual_selector``).
    :param suspend: create the Job suspended (its controller starts no pod until it is resumed).
    :param ttl_seconds_after_finished: seconds after its end before Kubernetes deletes the Job.
    :param active_deadline_seconds: seconds the Job may run before Kubernetes fails it
        (``DeadlineExceeded``).
    :param wait_until_job_complete: wait for the Job: deferred, or in the worker (the same trigger code
        run with ``asyncio.run``, logs streamed while the Job runs). Otherwise the task ends once the
        Job is created.
    :param job_poll_interval: the trigger's safety-net period (see ``JobTrigger``'s ``poll_interval``);
        no request is sent at this period while the Job is in the shared watch's cache.
    :param deferrable: defer to :class:`~airflow_jobwatch.triggers.job.JobTrigger` while the Job runs
        (default ``[operators] default_deferrable``). Like upstream, only with
        ``wait_until_job_complete=True``; without it the operator warns and returns once the Job exists.
    :param on_kill_propagation_policy: how the Job's pods are deleted with it when the task is killed:
        ``Foreground`` (default), ``Background`` or ``Orphan``.
    :param discover_pods_retry_number: upstream lists the Job's pods this many times before its wait;
        not used here: the shared watch sees the pods as the Job controller makes them.
    :param unwrap_single: with ``do_xcom_push``, return one pod's result itself, not a list of one.

    The connection:

    :param kubernetes_conn_id: the Airflow ``kubernetes`` connection (default ``kubernetes_default``).
    :param in_cluster: use the pod's service account (overrides the connection).
    :param cluster_context: the kubeconfig context to use.
    :param config_file: a kubeconfig file (overrides the connection's).

    The pod template (each maps to the field of the same meaning in the Job's ``spec.template``):

    :param namespace: where the Job is created (default: the connection's, else ``default``).
    :param image: the base container's image.
    :param name: the Job's name (templated); a random suffix is added unless ``random_name_suffix=False``.
    :param random_name_suffix: add a random suffix to ``name``.
    :param cmds: the base container's entrypoint (``command``).
    :param arguments: the base container's ``args`` (templated).
    :param ports: the base container's ports.
    :param volume_mounts: the base container's volume mounts.
    :param volumes: the pod's volumes.
    :param env_vars: the base container's environment (a dict, or ``V1EnvVar`` list; templated).
    :param env_from: ``envFrom`` sources of the base container.
    :param secrets: Airflow ``Secret`` objects exposed as environment variables or volumes.
    :param labels: labels of the Job and its pods (templated).
    :param annotations: annotations of the pods (templated).
    :param reattach_on_restart: a retried worker adopts the Job that its try created earlier, found by the
        try's labels, instead of creating another.
    :param durable: upstream's Airflow 3.3 reattachment through the task state store; here
        ``reattach_on_restart`` (labels) does that job.
    :param startup_timeout_seconds: upstream's wait for pods to start; not used here (a pod that cannot
        start ends the wait through ``fatal_waiting_reasons``, ``backoff_limit``,
        ``active_deadline_seconds`` or ``execution_timeout``).
    :param startup_check_interval_seconds: the period of upstream's pod start check; not used here.
    :param schedule_timeout_seconds: upstream's wait for pods to be scheduled; not used here.
    :param get_logs: copy the pods' container logs into the task log. A deferred task whose ending can
        run in the triggerer gets them from the trigger, which keeps the last
        ``[jobwatch] trigger_log_max_bytes`` of them; a task that resumes on a worker gets them all there.
    :param base_container_name: the container whose result and exit decide (default ``base``).
    :param base_container_status_polling_interval: upstream's container polling period; not used here
        (container ends arrive with the watch).
    :param init_container_logs: init containers whose logs are copied: names, or ``True`` for all.
    :param container_logs: containers whose logs are copied: names, or ``True`` for all (default: the
        base container).
    :param image_pull_policy: the base container's ``imagePullPolicy``.
    :param container_resources: the base container's requests and limits.
    :param affinity: the pod's affinity.
    :param runtime_class_name: the pod's ``runtimeClassName``.
    :param node_selector: the pod's node selector.
    :param image_pull_secrets: the pod's image pull secrets.
    :param service_account_name: the pod's service account.
    :param automount_service_account_token: whether the service account's token is mounted.
    :param hostnetwork: run the pod in the node's network namespace.
    :param host_aliases: extra ``/etc/hosts`` entries.
    :param tolerations: the pod's tolerations.
    :param security_context: the pod's security context.
    :param container_security_context: the base container's security context.
    :param xcom_sidecar_container_security_context: the XCom sidecar's security context (default: the
        connection's ``xcom_sidecar_container_security_context``). The connection's
        ``xcom_sidecar_container_image`` and ``xcom_sidecar_container_resources`` apply too.
    :param dnspolicy: the pod's DNS policy.
    :param dns_config: the pod's DNS configuration.
    :param hostname: the pod's hostname.
    :param subdomain: the pod's subdomain.
    :param schedulername: the scheduler that places the pods.
    :param full_pod_spec: a ``V1Pod`` the pod template starts from.
    :param init_containers: the pod's init containers.
    :param log_events_on_failure: upstream logs the pod's events when it fails; not done here.
    :param log_events_on_startup: upstream logs the pod's events while it starts; not done here.
    :param do_xcom_push: push the JSON the base container wrote to ``xcom_path``, of any size up to
        48 MiB: a native sidecar (Kubernetes 1.29 or later) prints it to its log when the pod ends, and
        it is read from there (``pods/log``, no exec). On an older cluster it travels as the base
        container's termination message (at most 4096 bytes). A list when several pods succeeded,
        unless ``unwrap_single`` and there is one.
    :param pod_template_file: a pod YAML/JSON file the pod template starts from (templated).
    :param pod_template_dict: the same as a dict (templated).
    :param priority_class_name: the pod's priority class.
    :param pod_runtime_info_envs: environment variables filled from the pod's own fields.
    :param termination_grace_period: seconds the pods get to stop when the task is killed.
    :param configmaps: ConfigMaps whose keys become the base container's environment.
    :param skip_on_exit_code: upstream's KubernetesPodOperator skips the task on these exit codes; a Job
        fails or succeeds as a whole here, so it is not used.
    :param poll_interval: KubernetesPodOperator's trigger period; the Job's wait uses
        ``job_poll_interval``.
    :param log_pod_spec_on_failure: upstream logs the pod spec when a pod fails; not done here.
    :param on_finish_action: what happens to the Job's *pods* when the wait ends (upstream's meaning:
        the Job itself is kept, for ``ttl_seconds_after_finished`` to remove): ``delete_pod`` deletes
        them, ``delete_succeeded_pod`` the succeeded ones, ``delete_active_pod`` the ones still
        pending or running, ``keep_pod`` none.
    :param on_kill_action: what happens to the Job's pods when the task is killed: ``delete_pod``
        (default) or ``keep_pod``. The Job itself is always deleted, as upstream does.
    :param is_delete_operator_pod: deprecated by upstream; ``on_finish_action`` replaces it.
    :param termination_message_policy: the base container's ``terminationMessagePolicy``
        (``File`` whenever ``do_xcom_push``, which needs it).
    :param callbacks: KubernetesPodOperator callback classes; not called for a Job's pods.
    :param progress_callback: called with each log line by upstream; not used here.
    :param logging_interval: upstream's log period while deferred; not used here (logs are copied when
        the deferred task resumes).
    :param trigger_kwargs: extra arguments of KubernetesPodOperator's trigger; not used by ``JobTrigger``.
    :param container_name_log_prefix_enabled: upstream's switch for the container name before each log
        line; here each line always starts with ``[pod] [container]``.
    :param log_formatter: upstream's log line formatter; not used here.

    This provider's own:

    :param fatal_waiting_reasons: container waiting reasons that fail the Job at once.
    :param api_failure_tolerance: seconds the API may stay unreachable before the wait ends in error.
    :param xcom_path: where the container writes its XCom result (default ``/airflow/xcom/return.json``,
        as with KubernetesPodOperator).
    :param disruption_retries: ours. Disruptions of the Job's pods (preemption, eviction, node shutdown)
        to tolerate without spending ``backoff_limit``: the Job gets a ``podFailurePolicy`` rule
        ``Ignore`` on ``DisruptionTarget`` (and ``restartPolicy: Never``, which such a policy needs), so
        the Job controller replaces a disrupted pod for free, and the wait fails once the pods were
        disrupted more than this many times (deleting the Job as ``on_kill`` would). Default None:
        upstream's Job spec, unchanged.
    """

    template_fields: Sequence[str] = tuple(_UpstreamKubernetesJobOperator.template_fields)

    def __init__(
        self,
        *,
        job_template_file: str | None = None,
        full_job_spec: k8s.V1Job | None = None,
        backoff_limit: int | None = None,
        completion_mode: str | None = None,
        completions: int | None = None,
        manual_selector: bool | None = None,
        parallelism: int = 1,
        selector: k8s.V1LabelSelector | None = None,
        suspend: bool | None = None,
        ttl_seconds_after_finished: int | None = None,
        wait_until_job_complete: bool = False,
        job_poll_interval: float = 10,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        on_kill_propagation_policy: Literal["Foreground", "Background", "Orphan"] = "Foreground",
        discover_pods_retry_number: int = 3,
        unwrap_single: bool = True,
        kubernetes_conn_id: str | None = "kubernetes_default",
        namespace: str | None = None,
        image: str | None = None,
        name: str | None = None,
        random_name_suffix: bool = True,
        cmds: list[str] | None = None,
        arguments: list[str] | None = None,
        ports: list[k8s.V1ContainerPort] | None = None,
        volume_mounts: list[k8s.V1VolumeMount] | None = None,
        volumes: list[k8s.V1Volume] | None = None,
        env_vars: list[k8s.V1EnvVar] | dict[str, str] | None = None,
        env_from: list[k8s.V1EnvFromSource] | None = None,
        secrets: list[Secret] | None = None,
        in_cluster: bool | None = None,
        cluster_context: str | None = None,
        labels: dict[str, Any] | None = None,
        reattach_on_restart: bool | None = None,
        durable: bool | None = None,
        startup_timeout_seconds: int = 120,
        startup_check_interval_seconds: int = 5,
        schedule_timeout_seconds: int | None = None,
        get_logs: bool = True,
        base_container_name: str | None = None,
        base_container_status_polling_interval: float = 1,
        init_container_logs: Iterable[str] | str | Literal[True] | None = None,
        container_logs: Iterable[str] | str | Literal[True] | None = None,
        image_pull_policy: str | None = None,
        annotations: dict[str, Any] | None = None,
        container_resources: k8s.V1ResourceRequirements | None = None,
        affinity: k8s.V1Affinity | None = None,
        config_file: str | None = None,
        runtime_class_name: str | None = None,
        node_selector: dict[str, Any] | None = None,
        image_pull_secrets: list[k8s.V1LocalObjectReference] | None = None,
        service_account_name: str | None = None,
        automount_service_account_token: bool | None = None,
        hostnetwork: bool = False,
        host_aliases: list[k8s.V1HostAlias] | None = None,
        tolerations: list[k8s.V1Toleration] | None = None,
        security_context: k8s.V1PodSecurityContext | dict[str, Any] | None = None,
        container_security_context: k8s.V1SecurityContext | dict[str, Any] | None = None,
        xcom_sidecar_container_security_context: k8s.V1SecurityContext | dict[str, Any] | None = None,
        dnspolicy: str | None = None,
        dns_config: k8s.V1PodDNSConfig | None = None,
        hostname: str | None = None,
        subdomain: str | None = None,
        schedulername: str | None = None,
        full_pod_spec: k8s.V1Pod | None = None,
        init_containers: list[k8s.V1Container] | None = None,
        log_events_on_failure: bool = False,
        log_events_on_startup: bool = True,
        do_xcom_push: bool = False,
        pod_template_file: str | None = None,
        pod_template_dict: dict[str, Any] | None = None,
        priority_class_name: str | None = None,
        pod_runtime_info_envs: list[k8s.V1EnvVar] | None = None,
        termination_grace_period: int | None = None,
        configmaps: list[str] | None = None,
        skip_on_exit_code: int | Container[int] | None = None,
        poll_interval: float = 2,
        log_pod_spec_on_failure: bool = True,
        on_finish_action: str = "delete_pod",
        on_kill_action: str = "delete_pod",
        is_delete_operator_pod: None | bool = None,
        termination_message_policy: str = "File",
        active_deadline_seconds: int | None = None,
        callbacks: list[type[KubernetesPodOperatorCallback]]
        | type[KubernetesPodOperatorCallback]
        | None = None,
        progress_callback: Callable[[str], None] | None = None,
        logging_interval: int | None = None,
        trigger_kwargs: dict[str, Any] | None = None,
        container_name_log_prefix_enabled: bool = True,
        log_formatter: Callable[[str, str], str] | None = None,
        # ours (after upstream's)
        fatal_waiting_reasons: Collection[str] | None = None,
        api_failure_tolerance: float | None = None,
        xcom_path: str = XCOM_RETURN_PATH,
        disruption_retries: int | None = None,
        **kwargs: Any,
    ) -> None:
        # Every argument as given (the signature's, in its order); taken first, before any other local.
        given = {k: v for k, v in locals().items() if k not in ("self", "kwargs", "__class__")}
        # Wrong types are refused here, when the DAG is parsed, before any Job spec is built or sent.
        check_argument_types(
            f"{type(self).__name__}(task_id={kwargs.get('task_id')!r})", given, tuple(self.template_fields)
        )
        upstream = {k: v for k, v in given.items() if k not in _OWN_ARGUMENTS}
        # The XCom sidecar is ours: its security context is honoured here whatever the installed provider
        # knows (cncf.kubernetes before 10.25 has no such argument, and would refuse it).
        if "xcom_sidecar_container_security_context" not in pod_operator_arguments():
            upstream.pop("xcom_sidecar_container_security_context")
        super().__init__(
            # The installed provider may predate some of 10.25's arguments (compat.upstream_arguments).
            **upstream_arguments(KubernetesJobOperator, upstream),
            **kwargs,
        )
        if not hasattr(self, "xcom_sidecar_container_security_context"):
            self.xcom_sidecar_container_security_context = xcom_sidecar_container_security_context
        self._unhonoured = unhonoured_arguments(given)
        self._warn_unhonoured()  # when the DAG is parsed, where its author looks first
        self.fatal_waiting_reasons = list(fatal_waiting_reasons) if fatal_waiting_reasons else None
        self.api_failure_tolerance = api_failure_tolerance
        if not xcom_path.startswith("/"):
            raise ValueError(f"xcom_path must be an absolute path in the container, got {xcom_path!r}")
        self.xcom_path = xcom_path
        if disruption_retries is not None and (
            not isinstance(disruption_retries, int)
            or isinstance(disruption_retries, bool)
            or disruption_retries < 0
        ):
            raise ValueError(
                f"disruption_retries must be an int >= 0 (disruptions tolerated) or None, got {disruption_retries!r}"
            )
        self.disruption_retries = disruption_retries

    # -- the Job (operators/taskjob.py) ------------------------------------------------------------------
    def _task_job(self, context: Context | None = None) -> TaskJob:
        """This task try's Job, from the operator's fields as they are now (rendered, once the task runs):
        what the Job's calls, the in-worker wait, the resume and the log copy work on."""
        return TaskJob(
            apis=self,
            log=self.log,
            task_id=self.task_id,
            kubernetes_conn_id=self.kubernetes_conn_id,
            config_file=self.config_file,
            cluster_context=self.cluster_context,
            in_cluster=self.in_cluster,
            poll_interval=self.job_poll_interval,
            fatal_waiting_reasons=self.fatal_waiting_reasons,
            api_failure_tolerance=self.api_failure_tolerance,
            disruption_retries=self.disruption_retries,
            reattach_on_restart=bool(self.reattach_on_restart),
            on_kill_propagation_policy=self.on_kill_propagation_policy,
            termination_grace_period=self.termination_grace_period,
            delete_pods_on_kill=on_kill_action(self) == OnKillAction.DELETE_POD,
            do_xcom_push=bool(self.do_xcom_push),
            base_container_name=self.base_container_name,
            xcom_path=self.xcom_path,
            unwrap_single=bool(self.unwrap_single),
            xcom_sidecar_container_security_context=self.xcom_sidecar_container_security_context,
            get_logs=bool(self.get_logs),
            container_logs=self.container_logs,
            init_container_logs=self.init_container_logs,
            try_labels=self._get_ti_pod_labels(context) if context is not None else {},
            created=self._keep_job,
            stop=self._stop_job,
            finish_pods=self._finish_pods,
        )

    def _keep_job(self, job: k8s.V1Job) -> None:
        self.job = job  # what on_kill deletes

    def _stop_job(self, job: k8s.V1Job) -> None:
        """Stop ``job`` as a kill does (the task ends while the Job still runs)."""
        self.job = job
        self.on_kill()

    def _finish_pods(self, pods: list[k8s.V1Pod]) -> None:
        """``on_finish_action`` on each of the Job's pods, as upstream's operator does it: pods that are
        kept (or failed) get the ``already_checked`` label; ``process_pod_deletion`` decides per pod.
        The Job itself is kept (``ttl_seconds_after_finished`` is what removes it)."""
        if getattr(self, "_killed", False):
            return
        keep = self.on_finish_action in ("keep_pod", "delete_active_pod")
        for pod in pods:
            try:
                if (pod.status and pod.status.phase) != "Succeeded" or keep:
                    self.patch_already_checked(pod, reraise=False)
                self.process_pod_deletion(pod, reraise=False)
            except Exception:
                self.log.warning("Error while cleaning up pod %s", pod.metadata.name, exc_info=True)

    # -- building --------------------------------------------------------------------------------------
    def build_job_request_obj(self, context: Context | None = None) -> k8s.V1Job:
        """Upstream's Job, minus the XCom sidecar, plus our XCom path on the base container."""
        xcom, self.do_xcom_push = self.do_xcom_push, False  # keep KubernetesPodOperator's sidecar out
        try:
            job = super().build_job_request_obj(context)
        finally:
            self.do_xcom_push = xcom
        return request.finish_job_request(self._task_job(), job, xcom=xcom)

    def _end_plan(self, context: Context) -> dict[str, Any] | None:
        """What the trigger needs to end the task itself (:func:`~airflow_jobwatch.operators.request.end_plan`),
        or None when the task must resume on a worker: when something else must run there, a subclass's
        own ``execute_complete``, the task's callbacks, a ``post_execute`` hook, outlets,
        ``multiple_outputs`` or a mapped task downstream that maps over the result. A failure ends from
        the triggerer only where the triggerer's Airflow then respects ``retries`` (3.3.1 and later), or
        when this try is the last one (decided in the triggerer:
        :func:`~airflow_jobwatch.ending.end.may_fail_here`).
        """
        if type(self).execute_complete is not KubernetesJobOperator.execute_complete:
            return None
        callbacks = ("on_success_callback", "on_failure_callback", "on_retry_callback", "on_skipped_callback")
        if any(getattr(self, name, None) for name in callbacks):
            return None
        if getattr(self, "_post_execute_hook", None) or self.outlets or self.multiple_outputs:
            return None
        try:
            if next(iter(self.iter_mapped_dependants()), None) is not None:
                return None
        except Exception:  # no DAG to ask (a bare operator): nothing maps over it
            pass
        ti = context["ti"]
        try_number, max_tries = getattr(ti, "try_number", None), getattr(ti, "max_tries", None)
        last_try = not self.retries or (
            isinstance(try_number, int) and isinstance(max_tries, int) and try_number > max_tries
        )
        return request.end_plan(
            self._task_job(),
            on_finish_action=str(getattr(self.on_finish_action, "value", self.on_finish_action)),
            last_try=last_try,
        )

    def _do_render_template_fields(
        self, parent: Any, template_fields: Any, context: Any, jinja_env: Any, seen_oids: set[int]
    ) -> None:
        # Upstream hooks its env_vars conversion here (a mapped task never calls render_template_fields);
        # what a template rendered to is checked here too, with the words the DAG's import would have used.
        # A private method of Airflow's, overridden as upstream's operator does: the one step every
        # rendering (mapped or not) passes through, with no public hook.
        super()._do_render_template_fields(parent, template_fields, context, jinja_env, seen_oids)
        if parent is self:
            fields = tuple(template_fields)
            check_argument_types(
                f"{type(self).__name__}(task_id={self.task_id!r}), once rendered",
                {f: getattr(self, f, None) for f in fields},
                (),
            )

    def _check_arguments(self) -> None:
        """Upstream's warnings and validation, before anything is created."""
        # The [jobwatch] options this task's wait reads (here, in the worker, or in the triggerer):
        # a bad value is refused before the Job exists, naming the option, as Airflow's configuration
        # error (the task log shows the exception's class; the provider's own is no word for a user).
        jobwatch_config.warn_unknown_options(self.log)
        try:
            jobwatch_config.check_options(jobwatch_config.TRIGGER_OPTIONS)
        except jobwatch_config.JobwatchConfigError as err:
            raise AirflowConfigException(str(err)) from None
        # Upstream reads a template path that does not exist as YAML text and builds from no template.
        for argument, kind in (("job_template_file", "Job"), ("pod_template_file", "Pod")):
            if problem := pod_template_problem(getattr(self, argument, None), kind=kind):
                raise AirflowException(f"{argument}: {problem}")
        self._warn_unhonoured()
        if self.deferrable and not self.wait_until_job_complete:
            self.log.warning(
                "Deferrable mode is available only with parameter `wait_until_job_complete=True`. "
                "Please, set it up."
            )
        if (self.get_logs or self.do_xcom_push) and not self.wait_until_job_complete:
            self.log.warning(
                "Getting Logs and pushing to XCom are available only with parameter "
                "`wait_until_job_complete=True`. Please, set it up."
            )
        if self.parallelism is None:
            warnings.warn(
                "parallelism should be set explicitly. Defaulting to 1.",
                AirflowProviderDeprecationWarning,
                stacklevel=3,
            )
            self.parallelism = 1
        elif self.wait_until_job_complete and self.parallelism < 1:
            raise AirflowException("parallelism cannot be less than 1 with `wait_until_job_complete=True`.")

    def _warn_unhonoured(self) -> None:
        """One warning naming every upstream argument that is set but has no effect here, and why;
        written when the DAG is parsed (the operator is built) and again when the task starts."""
        unhonoured = getattr(self, "_unhonoured", None)
        if unhonoured:
            self.log.warning(
                "These KubernetesJobOperator arguments are set but have no effect with airflow-jobwatch "
                "(see the migration guide): %s",
                "; ".join(f"{name} ({why})" for name, why in sorted(unhonoured.items())),
            )

    def execute(self, context: Context) -> Any:
        alarm = ExecutionTimeoutAlarm.at_start(self)
        self._waited: TaskJob | None = None
        self.name = self._set_name(self.name)
        self._check_arguments()
        job_request = self.build_job_request_obj(context)
        self.job_request_obj = job_request
        alarm.check()  # a timeout that Python dropped while the Job was built: create nothing
        task_job = self._task_job(context)
        if not self.wait_until_job_complete:
            job = request.create_job(task_job, job_request, context)
            context["ti"].xcom_push(key="job", value=job.to_dict())
            return None
        if self.deferrable:
            job = request.create_job(task_job, job_request, context)
            self.defer(
                trigger=task_job.trigger(
                    job.metadata.name,
                    job.metadata.namespace,
                    job.metadata.uid,
                    deadline=request.deadline(self.execution_timeout, context),
                    end_task=self._end_plan(context),
                    deferred_at=time.time(),
                    # what the task's masker hides now, for the lines the triggerer writes for it
                    mask_secrets=masking.capture(),
                ),
                method_name="execute_complete",
            )
        # Create the Job and wait for it in the worker, the event loop off the main thread so that
        # execution_timeout's alarm reaches it (inworker.wait_in_worker says why).
        event = inworker.wait_in_worker(task_job, job_request, context, alarm=alarm)
        self._waited = task_job  # what its log followers streamed, for execute_complete's log copy
        return self.execute_complete(context, event)

    def execute_complete(self, context: Context, event: dict[str, Any], **kwargs: Any) -> Any:
        """Report the trigger's result: the ``job`` XCom, logs, the pods' clean-up, then the XCom result
        or an error. Takes our trigger's event and upstream's ``KubernetesJobTrigger`` event alike (a
        task deferred by upstream's operator can resume in ours).

        A failure is reported with the pods as they are now, not only as the event saw them: a Job's
        terminal condition and its pods' final states come down two different watches, so an event can
        lack the failing container's exit code; the pods are read (and, bounded, re-read until the ones
        the Job counts have ended) and the message rebuilt from them.

        When the wait ended but the Job has not (a ``timeout``, an unreachable API, a pod stuck on an
        unpullable image), the Job is deleted as ``on_kill`` deletes it: the task fails, so the work
        stops, and a retry does not run beside it. A ``timeout`` (the deferred deadline of
        ``execution_timeout``) raises ``AirflowTaskTimeout``, as the worker's timeout does.

        An ``unknown`` outcome (the Job vanished while the trigger's watch was reconnecting, and how it
        ended was not seen) fails the task with the event's message as it is: nothing here can learn more
        (the Job is gone), and the message gives no advice to run it again.
        """
        # the Job this worker waited for (and whose logs it streamed), else the Job of a resumed task
        return resume.complete(getattr(self, "_waited", None) or self._task_job(), context, event)

    def _xcom_value(self, result: JobResult) -> Any:
        """The value the task returns (:func:`~airflow_jobwatch.operators.resume.xcom_value`)."""
        return resume.xcom_value(self._task_job(), result)

    def on_kill(self) -> None:
        """The task was killed: delete the Job, as upstream does, with ``on_kill_propagation_policy``
        and ``termination_grace_period``; then, unless ``on_kill_action="keep_pod"``, its pods."""
        self._killed = True
        job = getattr(self, "job", None)
        if job is None:
            return
        if job.metadata.uid and getattr(self, "_kill_sent", None) == job.metadata.uid:
            return  # already deleted (execute_complete stopped it, then Airflow's timeout path called us)
        ns, name, uid = job.metadata.namespace, job.metadata.name, job.metadata.uid
        kwargs: dict[str, Any] = {"propagation_policy": self.on_kill_propagation_policy}
        if self.termination_grace_period is not None:
            kwargs["grace_period_seconds"] = self.termination_grace_period
        try:
            self.job_client.delete_namespaced_job(name=name, namespace=ns, **kwargs)  # upstream's request
            self.log.info("Deleted Job %s/%s (%s)", ns, name, self.on_kill_propagation_policy)
        except ApiException as e:
            if e.status not in (404, 409):
                raise
        self._kill_sent = uid
        if on_kill_action(self) == OnKillAction.KEEP_POD:
            self.log.info(
                "Skipping the Job's pods' deletion since on_kill_action is set to %r.",
                on_kill_action(self).value,
            )
            return
        if not uid:
            return
        # pod by pod, with upstream's own call (the verbs its RBAC already grants: list, delete)
        for pod in self.client.list_namespaced_pod(
            namespace=ns, label_selector=f"controller-uid={uid}"
        ).items:
            try:
                self.pod_manager.delete_pod(pod)
            except ApiException:
                self.log.exception("Unable to delete pod %s of Job %s/%s", pod.metadata.name, ns, name)
