"""KubernetesJobOperator: runs a batch/v1 Job and waits for it with JobTrigger's shared watch.

Built on upstream's ``KubernetesJobOperator`` for what it does well (the parameters users know, the pod
template built by ``KubernetesPodOperator``'s machinery, ``job_template_file`` / ``full_job_spec``
merging, templated fields) and replacing what it gets wrong (failure-modes.md items 12-17):

* Waiting. Deferred, it hands the wait to :class:`~airflow_jobwatch.triggers.job.JobTrigger`; not
  deferred, it runs the same trigger code in the worker. No pod discovery before waiting (upstream
  lists pods right after creating the Job and fails when the Job controller has not made them yet,
  #70585; it then waits pod by pod and hangs when parallelism exceeds completions, #64867).
* Deadline. What is left of ``execution_timeout`` goes to the trigger as an absolute deadline, so it
  holds while deferred and across triggerer restarts (#16).
* XCom without a sidecar. Upstream runs an ``alpine`` sidecar and execs into it to read
  ``/airflow/xcom/return.json``. Here the base container's ``terminationMessagePath`` *is*
  ``/airflow/xcom/return.json``: the kubelet copies the file into the pod's status when the container
  ends, so the result arrives with the watch event that ends the wait (no exec, no sidecar that keeps a
  Job from completing). The price is the kubelet's 4 KiB limit per container.
* Killing. ``on_kill`` (worker) and the trigger's ``on_kill`` (deferred: only on a user's kill or
  mark-failed, never on a triggerer restart) delete the Job with ``on_kill_propagation_policy`` and
  ``termination_grace_period``, as upstream's ``on_kill`` does (#14, #15).
* Retried workers. A Job that already exists under the same name is adopted when its pod template
  carries this task try's labels (the labels upstream's pods carry), instead of failing with 409 or
  starting the work twice. The Job's own labels stay exactly the user's.

What a DAG author sees is upstream's: the XCom keys (``job_name``, ``job_namespace``, ``job``, the
return value), the Job object (kept after the wait; only its pods are cleaned up by
``on_finish_action``), its labels, the validation errors, the trigger event's keys and ``status`` words.
Deliberate differences are listed in ``docs/migration.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import threading
import time
import warnings
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.providers.cncf.kubernetes.operators.job import (
    KubernetesJobOperator as _UpstreamKubernetesJobOperator,
)
from airflow.providers.common.compat.sdk import AirflowException, conf
from kubernetes.client import models as k8s
from kubernetes.client.rest import ApiException

from airflow_jobwatch.compat import OnKillAction, on_kill_action
from airflow_jobwatch.triggers.job import (
    EMPTY_XCOM_RESULT,
    STATUS_SUCCESS,
    JobTrigger,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["TERMINATION_MESSAGE_LIMIT_BYTES", "XCOM_RETURN_PATH", "KubernetesJobOperator"]

#: Where KubernetesPodOperator users write their result. Used as the base container's
#: terminationMessagePath when ``do_xcom_push`` is on.
XCOM_RETURN_PATH = "/airflow/xcom/return.json"

#: The kubelet keeps at most this many bytes of a container's termination message (Kubernetes'
#: ``MaxContainerTerminationMessageLength``, pkg/kubelet/container), which carries the XCom result.
TERMINATION_MESSAGE_LIMIT_BYTES = 4096

#: A container's terminationMessagePath when nobody sets it (the API server's default).
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"

#: Labels (from KubernetesPodOperator's task-instance labels, which upstream puts on the Job's pod
#: template) that identify one try of one task instance; a Job whose pod template carries all of them
#: with our values was created by this very try.
_TRY_LABELS = ("dag_id", "task_id", "run_id", "map_index", "try_number")


def _api_error_message(e: ApiException) -> str:
    """The API server's own message from a Status body, or the HTTP reason."""
    try:
        body = json.loads(e.body or "{}")
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    except (TypeError, ValueError):
        pass
    return f"{e.status} {e.reason}"


class KubernetesJobOperator(_UpstreamKubernetesJobOperator):
    """
    Create a Kubernetes Job and (optionally) wait for it through a shared watch.

    Takes every parameter of the provider's ``KubernetesJobOperator`` / ``KubernetesPodOperator``
    (``image``, ``cmds``, ``arguments``, ``env_vars``, ``container_resources``, ``namespace``,
    ``labels``, ``annotations``, ``backoff_limit``, ``active_deadline_seconds``,
    ``ttl_seconds_after_finished``, ``parallelism``, ``completions``, ``suspend``,
    ``job_template_file``, ``full_job_spec``, ``get_logs``, ``container_logs``,
    ``init_container_logs``, ``do_xcom_push``, ``on_finish_action``, ``on_kill_action``,
    ``on_kill_propagation_policy``, ``termination_grace_period``, ...) with upstream's meaning, and:

    :param deferrable: defer to :class:`~airflow_jobwatch.triggers.job.JobTrigger` while the Job runs
        (default ``[operators] default_deferrable``). Like upstream, only with
        ``wait_until_job_complete=True``; without it the operator warns and returns once the Job exists.
    :param wait_until_job_complete: wait for the Job: deferred, or in the worker (the same trigger code
        run with ``asyncio.run``, logs streamed while the Job runs). Otherwise the task ends once the
        Job is created.
    :param job_poll_interval: the trigger's safety-net period (see ``JobTrigger``'s ``poll_interval``);
        no request is sent at this period while the Job is in the shared watch's cache.
    :param fatal_waiting_reasons: container waiting reasons that fail the Job at once.
    :param api_failure_tolerance: seconds the API may stay unreachable before the wait ends in error.
    :param on_finish_action: what happens to the Job's *pods* when the wait ends (upstream's meaning:
        the Job itself is kept, for ``ttl_seconds_after_finished`` to remove): ``delete_pod`` deletes
        them, ``delete_succeeded_pod`` the succeeded ones, ``delete_active_pod`` the ones still
        pending or running, ``keep_pod`` none.
    :param do_xcom_push: push the JSON the base container wrote to ``/airflow/xcom/return.json`` (at
        most 4096 bytes: it travels as the container's termination message); a list when several pods
        succeeded, unless ``unwrap_single`` and there is one.
    :param xcom_path: where the container writes its XCom result (default ``/airflow/xcom/return.json``,
        as with KubernetesPodOperator).
    """

    template_fields: Sequence[str] = tuple(_UpstreamKubernetesJobOperator.template_fields)

    def __init__(
        self,
        *,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        wait_until_job_complete: bool = False,
        fatal_waiting_reasons: Collection[str] | None = None,
        api_failure_tolerance: float | None = None,
        xcom_path: str = XCOM_RETURN_PATH,
        **kwargs: Any,
    ) -> None:
        super().__init__(deferrable=deferrable, wait_until_job_complete=wait_until_job_complete, **kwargs)
        self.fatal_waiting_reasons = list(fatal_waiting_reasons) if fatal_waiting_reasons else None
        self.api_failure_tolerance = api_failure_tolerance
        if not xcom_path.startswith("/"):
            raise ValueError(f"xcom_path must be an absolute path in the container, got {xcom_path!r}")
        self.xcom_path = xcom_path
        #: What the in-worker wait's log followers did: the requested containers of each pod they saw,
        #: and the (pod, container) logs they streamed. Empty when the task deferred or logs are off.
        self._logs_wanted: dict[str, list[str]] = {}
        self._logs_streamed: set[tuple[str, str]] = set()

    # -- building --------------------------------------------------------------------------------------
    def build_job_request_obj(self, context: Context | None = None) -> k8s.V1Job:
        """Upstream's Job, minus the XCom sidecar, plus our XCom path on the base container."""
        xcom, self.do_xcom_push = self.do_xcom_push, False  # keep KubernetesPodOperator's sidecar out
        try:
            job = super().build_job_request_obj(context)
        finally:
            self.do_xcom_push = xcom
        containers = job.spec.template.spec.containers or []
        base = next((c for c in containers if c.name == self.base_container_name), None)
        if xcom:
            if base is None:
                raise AirflowException(
                    f"do_xcom_push needs a container named {self.base_container_name!r} in the Job's pod "
                    f"template; found {[c.name for c in containers]}"
                )
            own = base.termination_message_path
            if own not in (None, DEFAULT_TERMINATION_MESSAGE_PATH, self.xcom_path):
                raise AirflowException(
                    f"do_xcom_push returns the result through the base container's terminationMessagePath "
                    f"(xcom_path={self.xcom_path!r}; the kubelet keeps at most "
                    f"{TERMINATION_MESSAGE_LIMIT_BYTES} bytes of it), but the pod template sets "
                    f"terminationMessagePath={own!r} on container {base.name!r}. Remove it, or pass "
                    f"xcom_path={own!r} if that file is where the result is written, or turn do_xcom_push off."
                )
            base.termination_message_path = self.xcom_path
            base.termination_message_policy = "File"
        return job

    # -- Kubernetes calls --------------------------------------------------------------------------------
    def _create_or_adopt(self, job_request: k8s.V1Job, context: Context) -> k8s.V1Job:
        ns, name = job_request.metadata.namespace, job_request.metadata.name
        try:
            return self.job_client.create_namespaced_job(namespace=ns, body=job_request)
        except ApiException as e:
            if e.status != 409:
                raise AirflowException(
                    f"Kubernetes rejected Job {ns}/{name} (HTTP {e.status}): {_api_error_message(e)}"
                ) from None
        existing = self.job_client.read_namespaced_job(name=name, namespace=ns)
        if self._same_try(existing, context):
            self.log.info("Job %s/%s already exists for this task try; adopting it", ns, name)
            return existing
        raise AirflowException(
            f"A Job named {name!r} already exists in namespace {ns!r} and was not created by this task try "
            f"(its pod template labels: {_template_labels(existing)}); choose another name or delete that Job."
        )

    def _same_try(self, job: k8s.V1Job, context: Context) -> bool:
        """Whether ``job``'s pod template carries this try's labels (as upstream puts them there)."""
        want = self._get_ti_pod_labels(context)
        have = _template_labels(job)
        return (
            not job.metadata.deletion_timestamp
            and bool(want)
            and all(have.get(k) == want.get(k) for k in _TRY_LABELS if k in want)
        )

    def _find_job_of_this_try(self, namespace: str, context: Context) -> k8s.V1Job | None:
        """A live Job that an earlier run of this same task try created (a retried worker).

        The try's labels are on the Job's pod template, not on the Job (whose labels are the user's),
        so the search goes through the pods, which carry them and are selectable; a Job whose pods the
        controller has not created yet is not found this way, and then a fixed name still meets it on
        409 (see ``_create_or_adopt``).
        """
        want = self._get_ti_pod_labels(context)
        selector = ",".join(f"{k}={want[k]}" for k in _TRY_LABELS if k in want)
        pods = self.client.list_namespaced_pod(namespace=namespace, label_selector=selector).items
        owners = sorted(
            {
                ref.name
                for pod in pods
                for ref in (pod.metadata.owner_references or [])
                if ref.kind == "Job" and ref.controller
            }
        )
        live = []
        for name in owners:
            try:
                job = self.job_client.read_namespaced_job(name=name, namespace=namespace)
            except ApiException as e:
                if e.status == 404:
                    continue
                raise
            if self._same_try(job, context):
                live.append(job)
        if len(live) > 1:
            raise AirflowException(
                f"Found {len(live)} Jobs for this task try in {namespace} ({selector}): "
                f"{[j.metadata.name for j in live]}; delete the extra ones."
            )
        return live[0] if live else None

    # -- execution ---------------------------------------------------------------------------------------
    def _deadline(self, context: Context) -> datetime.datetime | None:
        """What is left of ``execution_timeout``, as an absolute deadline."""
        if self.execution_timeout is None:
            return None
        start = getattr(context.get("ti"), "start_date", None) or datetime.datetime.now(datetime.UTC)
        return start + self.execution_timeout

    def _trigger(self, context: Context, name: str, namespace: str, uid: str | None) -> JobTrigger:
        return JobTrigger(
            name,
            namespace,
            kubernetes_conn_id=self.kubernetes_conn_id,
            config_file=self.config_file,
            cluster_context=self.cluster_context,
            in_cluster=self.in_cluster,
            timeout=self._deadline(context),
            poll_interval=self.job_poll_interval,
            fatal_waiting_reasons=self.fatal_waiting_reasons,
            api_failure_tolerance=self.api_failure_tolerance,
            job_uid=uid,
            # upstream's on_kill always deletes the Job; on_kill_action only governs the pods
            delete_on_kill=True,
            do_xcom_push=self.do_xcom_push,
            base_container_name=self.base_container_name,
            on_kill_propagation_policy=self.on_kill_propagation_policy,
            termination_grace_period=self.termination_grace_period,
            delete_pods_on_kill=on_kill_action(self) == OnKillAction.DELETE_POD,
        )

    def _create_job(self, job_request: k8s.V1Job, context: Context) -> k8s.V1Job:
        """Adopt this try's Job if a previous run of the try created one, else create it."""
        ns = job_request.metadata.namespace
        adopted = self._find_job_of_this_try(ns, context) if self.reattach_on_restart else None
        if adopted is not None:
            self.log.info("Adopting Job %s/%s created earlier by this task try", ns, adopted.metadata.name)
            self.job = adopted
        else:
            self.job = self._create_or_adopt(job_request, context)
            self.log.info("Created Job %s/%s", ns, self.job.metadata.name)
        ti = context["ti"]
        ti.xcom_push(key="job_name", value=self.job.metadata.name)
        ti.xcom_push(key="job_namespace", value=self.job.metadata.namespace)
        return self.job

    async def _create_and_wait(self, job_request: k8s.V1Job, context: Context) -> dict[str, Any]:
        """The in-worker wait: open the namespace's watch, create the Job, wait for it."""
        meta = job_request.metadata
        trigger = self._trigger(context, meta.name, meta.namespace, None)
        async with trigger.watching() as watch:
            # A blocking create in this loop is fine: the loop is ours alone, serving our informers.
            job = self._create_job(job_request, context)
            trigger = self._trigger(context, job.metadata.name, job.metadata.namespace, job.metadata.uid)
            if not self.get_logs:
                return await trigger.wait()
            follower = _LogFollower(self, job.metadata.namespace)
            discovering = asyncio.create_task(follower.discover(lambda: watch.pods_of(job.metadata.uid)))
            try:
                event = await trigger.wait()
            finally:
                discovering.cancel()
                follower.start_ready(watch.pods_of(job.metadata.uid))  # pods first seen at the very end
            await follower.drain(_LOG_DRAIN_SECONDS)
            self._logs_wanted, self._logs_streamed = follower.wanted, follower.started
            return event

    def _check_arguments(self) -> None:
        """Upstream's warnings and validation, before anything is created."""
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

    def execute(self, context: Context) -> Any:
        self.name = self._set_name(self.name)
        self._check_arguments()
        job_request = self.build_job_request_obj(context)
        self.job_request_obj = job_request
        if not self.wait_until_job_complete:
            job = self._create_job(job_request, context)
            context["ti"].xcom_push(key="job", value=job.to_dict())
            return None
        if self.deferrable:
            job = self._create_job(job_request, context)
            self.defer(
                trigger=self._trigger(context, job.metadata.name, job.metadata.namespace, job.metadata.uid),
                method_name="execute_complete",
            )
        event = asyncio.run(self._create_and_wait(job_request, context))
        return self.execute_complete(context, event)

    def execute_complete(self, context: Context, event: dict[str, Any], **kwargs: Any) -> Any:
        """Report the trigger's result: the ``job`` XCom, logs, the pods' clean-up, then the XCom result
        or an error. Takes our trigger's event and upstream's ``KubernetesJobTrigger`` event alike (a
        task deferred by upstream's operator can resume in ours)."""
        name, ns, uid = _event_identity(event)
        status = event.get("status")
        outcome = event.get("outcome") or status
        context["ti"].xcom_push(key="job", value=event.get("job"))
        self.log.info(
            "Job %s/%s ended: %s (%s) %s", ns, name, outcome, event.get("reason"), event.get("message")
        )
        for pod in event.get("pods") or []:
            self.log.info(
                "  pod %s: %s, exit code %s, reason %s",
                pod.get("name"),
                pod.get("phase"),
                pod.get("exit_code"),
                pod.get("reason"),
            )
        pods = self._read_pods(ns, uid, event)
        try:
            if self.get_logs:
                for pod in pods:
                    self._write_pod_logs(pod)
            if status != STATUS_SUCCESS:
                raise AirflowException(
                    f"Kubernetes Job {ns}/{name} {outcome}: {event.get('reason')}: {event.get('message')}"
                )
            if self.do_xcom_push:
                return self._xcom_value(event, pods)
            return None
        finally:
            self._cleanup_pods(pods, context)

    # -- after the wait ----------------------------------------------------------------------------------
    def _read_pods(self, ns: str | None, uid: str | None, event: dict[str, Any]) -> list[k8s.V1Pod]:
        """The Job's pods (oldest first), best effort: a Job deleted with its pods has none left."""
        if not ns:
            return []
        try:
            if uid:
                selector = f"controller-uid={uid}"
                pods = self.client.list_namespaced_pod(namespace=ns, label_selector=selector).items
            else:  # an event without the Job (upstream's, when it never read it): its pod names
                pods = []
                for pod_name in event.get("pod_names") or []:
                    try:
                        pods.append(
                            self.client.read_namespaced_pod(pod_name, event.get("pod_namespace") or ns)
                        )
                    except ApiException as e:
                        if e.status != 404:
                            raise
        except ApiException as e:
            self.log.warning("Could not read the Job's pods: %s", _api_error_message(e))
            return []
        return sorted(pods, key=lambda p: (p.metadata.creation_timestamp or 0, p.metadata.name))

    def _cleanup_pods(self, pods: list[k8s.V1Pod], context: Context) -> None:
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

    def _log_containers(self, pod: k8s.V1Pod) -> list[str]:
        spec = pod.spec
        return self._requested_containers(
            pod.metadata.name,
            [c.name for c in (spec.init_containers or [])] if spec else [],
            [c.name for c in (spec.containers or [])] if spec else [],
        )

    def _requested_containers(self, pod_name: str, init_names: list[str], names: list[str]) -> list[str]:
        """Init containers named by ``init_container_logs``, then containers named by
        ``container_logs`` (``True``: all), in the pod's order."""
        chosen: list[str] = []
        for requested, present in ((self.init_container_logs, init_names), (self.container_logs, names)):
            if not requested:
                continue
            if requested is True:
                chosen.extend(present)
                continue
            wanted = [requested] if isinstance(requested, str) else list(requested)
            for name in wanted:
                if name in present:
                    chosen.append(name)
                else:
                    self.log.warning(
                        "Container %s whose logs were requested is not in pod %s", name, pod_name
                    )
        return chosen

    def _write_pod_logs(self, pod: k8s.V1Pod) -> None:
        """Write the logs of the pod's requested containers, but those the in-worker wait streamed
        already. A pod the followers never saw (its events reached the watch after the Job's end was
        decided) is read here whole, so no pod's log is missing from the task log."""
        name = pod.metadata.name
        if name in self._logs_wanted:  # the followers saw it, and warned about containers not there
            containers = [c for c in self._logs_wanted[name] if (name, c) not in self._logs_streamed]
        else:
            containers = self._log_containers(pod)
        for container in containers:
            self._write_container_log(name, pod.metadata.namespace, container, follow=False)

    def _write_container_log(
        self,
        pod_name: str,
        namespace: str,
        container: str,
        *,
        follow: bool,
        opened: Callable[[Any], None] | None = None,
    ) -> None:
        """Stream one container's log into the task log, line by line, decoded; never held whole.

        :param follow: keep reading until the container ends (the in-worker wait streams this way).
        :param opened: called with the open response, so that a follower can be closed from outside.
        """
        try:
            response = self.client.read_namespaced_pod_log(
                name=pod_name,
                namespace=namespace,
                container=container,
                follow=follow,
                _preload_content=False,
            )
        except ApiException as e:
            self.log.warning(
                "Could not read the log of container %s of pod %s: %s",
                container,
                pod_name,
                _api_error_message(e),
            )
            return
        if opened is not None:
            opened(response)
        try:
            for line in _decoded_lines(response.stream(_LOG_CHUNK_BYTES)):
                self.log.info("[%s] [%s] %s", pod_name, container, line)
        except Exception as e:  # a log is a nice-to-have; never fail the task for it
            self.log.warning("Reading the log of container %s of pod %s stopped: %s", container, pod_name, e)
        finally:
            response.release_conn()

    def _xcom_value(self, event: dict[str, Any], pods: list[k8s.V1Pod]) -> Any:
        # The pods as read after the end are the freshest; the event's copy serves when they are gone
        # (TTL, deleted) and for upstream's events.
        raw = event.get("xcom_result") or []
        fresh = [m for m in (self._termination_message(p) for p in pods) if m is not None]
        if len(fresh) >= len(raw):
            raw = fresh
        results: list[Any] = []
        for index, text in enumerate(raw):
            if isinstance(text, str) and text.rstrip() == EMPTY_XCOM_RESULT:
                self.log.info("xcom result file is empty.")
                results.append(None)
                continue
            if not isinstance(text, str) or not text.strip():
                results.append(None)
                continue
            self.log.info("xcom result: \n%s", text)
            try:
                results.append(json.loads(text))
            except ValueError:
                pod_names = event.get("pod_names") or [p.metadata.name for p in pods]
                pod = pod_names[index] if index < len(pod_names) else "?"
                size = len(text.encode())
                if size >= TERMINATION_MESSAGE_LIMIT_BYTES:
                    raise AirflowException(
                        f"The XCom result of pod {pod} does not fit: it travels as the base container's "
                        f"termination message ({self.xcom_path}), which the kubelet cuts to "
                        f"{TERMINATION_MESSAGE_LIMIT_BYTES} bytes, and what arrived ({size} bytes) is not "
                        f"JSON any more. Return less than {TERMINATION_MESSAGE_LIMIT_BYTES} bytes of JSON, or "
                        f"write the data elsewhere (object storage, a volume) and return its location."
                    ) from None
                raise AirflowException(
                    f"Pod {pod} wrote {self.xcom_path} but it is not JSON: {text[:200]!r}"
                ) from None
        if self.unwrap_single and len(results) == 1:
            return results[0]
        return results

    def _termination_message(self, pod: k8s.V1Pod) -> str | None:
        if (pod.status and pod.status.phase) != "Succeeded":
            return None
        for cs in pod.status.container_statuses or []:
            if cs.name == self.base_container_name:
                terminated = cs.state.terminated if cs.state else None
                return (terminated.message if terminated else None) or EMPTY_XCOM_RESULT
        return None

    def on_kill(self) -> None:
        """The task was killed: delete the Job, as upstream does, with ``on_kill_propagation_policy``
        and ``termination_grace_period``; then, unless ``on_kill_action="keep_pod"``, its pods."""
        self._killed = True
        job = getattr(self, "job", None)
        if job is None:
            return
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


#: After the in-worker wait has ended, how long the log followers may still take to reach the end of
#: their streams (containers that ended are read to the end at once; this bounds a pod that still runs
#: after its Job met its success criteria, whose log upstream would follow for ever).
_LOG_DRAIN_SECONDS = 60.0

#: How often the in-worker wait looks in the shared watch's cache for pods whose containers have started.
_LOG_DISCOVERY_SECONDS = 0.5


class _LogFollower:
    """Follows the logs of a Job's pods while the in-worker wait runs: one thread per (pod, container)
    whose container has started (``pods/log?follow=true``), started as the pods appear in the shared
    watch's cache (retried pods and parallel pods included), so lines reach the task log as they are
    written."""

    def __init__(self, operator: KubernetesJobOperator, namespace: str) -> None:
        self.operator = operator
        self.namespace = namespace
        self.started: set[tuple[str, str]] = set()
        self.wanted: dict[str, list[str]] = {}
        self.threads: list[threading.Thread] = []
        self.responses: list[Any] = []

    async def discover(self, pods: Callable[[], list[dict[str, Any]]]) -> None:
        while True:
            self.start_ready(pods())
            await asyncio.sleep(_LOG_DISCOVERY_SECONDS)

    def start_ready(self, pods: list[dict[str, Any]]) -> None:
        for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or "")):
            meta, status = pod.get("metadata") or {}, pod.get("status") or {}
            name = str(meta.get("name"))
            begun = {
                cs.get("name")
                for cs in (status.get("initContainerStatuses") or [])
                + (status.get("containerStatuses") or [])
                if set((cs.get("state") or {}).keys()) & {"running", "terminated"} or cs.get("lastState")
            }
            # The cache keeps a projection of each pod (kube/projection.py) without the spec's container
            # list; the container statuses name every container once the kubelet reports the pod.
            if name not in self.wanted:  # once per pod: it warns about requested containers not there
                if not status.get("containerStatuses"):
                    continue
                self.wanted[name] = self.operator._requested_containers(
                    name,
                    [cs.get("name") for cs in status.get("initContainerStatuses") or []],
                    [cs.get("name") for cs in status.get("containerStatuses") or []],
                )
            wanted = self.wanted[name]
            for container in wanted:
                if container not in begun or (name, container) in self.started:
                    continue
                self.started.add((name, container))
                thread = threading.Thread(
                    target=self.operator._write_container_log,
                    args=(name, self.namespace, container),
                    kwargs={"follow": True, "opened": self.responses.append},
                    name=f"log-{name}-{container}",
                    daemon=True,
                )
                thread.start()
                self.threads.append(thread)

    async def drain(self, limit: float) -> None:
        """Wait (up to ``limit`` seconds) for the followers to reach the end of their logs."""
        deadline = time.monotonic() + limit
        for thread in self.threads:
            await asyncio.to_thread(thread.join, max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self.threads):
            self.operator.log.warning(
                "Stopped following logs still open %.0f s after the Job ended (a pod still running?)", limit
            )
            for response in self.responses:
                with contextlib.suppress(Exception):
                    response.close()


#: Bytes read from the log stream at a time; a line longer than _MAX_LINE_BYTES is cut into pieces, so
#: memory stays bounded whatever the container writes.
_LOG_CHUNK_BYTES = 64 * 1024
_MAX_LINE_BYTES = 1024 * 1024


def _decoded_lines(chunks: Iterable[bytes]) -> Iterable[str]:
    """Split a byte stream into decoded lines (UTF-8, undecodable bytes escaped, as upstream does)."""
    partial = b""
    for chunk in chunks:
        partial += chunk
        *complete, partial = partial.split(b"\n")
        for line in complete:
            yield line.rstrip(b"\r").decode("utf-8", errors="backslashreplace")
        while len(partial) > _MAX_LINE_BYTES:
            yield partial[:_MAX_LINE_BYTES].decode("utf-8", errors="backslashreplace")
            partial = partial[_MAX_LINE_BYTES:]
    if partial:
        yield partial.rstrip(b"\r").decode("utf-8", errors="backslashreplace")


def _template_labels(job: k8s.V1Job) -> dict[str, str]:
    template = job.spec.template if job.spec else None
    return dict((template.metadata.labels if template and template.metadata else None) or {})


def _event_identity(event: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """The Job's name, namespace and uid from our event or upstream's (whose ``job`` is a V1Job dict)."""
    job = event.get("job") if isinstance(event.get("job"), dict) else {}
    meta = (job or {}).get("metadata") or {}
    name = event.get("name") or meta.get("name")
    ns = event.get("namespace") or meta.get("namespace") or event.get("pod_namespace")
    uid = event.get("uid") or meta.get("uid")
    return name, ns, uid
