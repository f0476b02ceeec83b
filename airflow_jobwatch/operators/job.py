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
  mark-failed, never on a triggerer restart) delete the Job with Foreground propagation, so its pods go
  first (#14, #15).
* Retried workers. A Job that already exists under the same name is adopted when it carries this task
  try's labels, instead of failing with 409 or starting the work twice.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Collection, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.cncf.kubernetes.operators.job import (
    KubernetesJobOperator as _UpstreamKubernetesJobOperator,
)
from airflow.providers.cncf.kubernetes.utils.pod_manager import OnFinishAction, OnKillAction
from airflow.providers.common.compat.sdk import AirflowException, conf
from kubernetes.client import models as k8s
from kubernetes.client.rest import ApiException

from airflow_jobwatch.triggers.job import (
    STATUS_SUCCESS,
    JobTrigger,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["XCOM_RETURN_PATH", "KubernetesJobOperator"]

#: Where KubernetesPodOperator users write their result. Used as the base container's
#: terminationMessagePath when ``do_xcom_push`` is on.
XCOM_RETURN_PATH = "/airflow/xcom/return.json"

#: Lines of each pod's log written to the task log when ``get_logs`` is on. The whole log of a long Job
#: can be large and is still in Kubernetes; the tail is what explains a failure.
DEFAULT_LOG_TAIL_LINES = 200

#: Labels (from KubernetesPodOperator's task-instance labels) that identify one try of one task
#: instance; a Job carrying all of them with our values was created by this very try.
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
    ``job_template_file``, ``full_job_spec``, ``get_logs``, ``do_xcom_push``, ``on_finish_action``,
    ``on_kill_action``, ...), with these differences:

    :param deferrable: defer to :class:`~airflow_jobwatch.triggers.job.JobTrigger` while the Job runs
        (default ``[operators] default_deferrable``). Implies waiting.
    :param wait_until_job_complete: when not deferrable, wait for the Job in the worker (same trigger
        code, run with ``asyncio.run``). Otherwise the task ends once the Job is created.
    :param job_poll_interval: the trigger's safety-net period (see ``JobTrigger``'s ``poll_interval``);
        no request is sent at this period while the Job is in the shared watch's cache.
    :param fatal_waiting_reasons: container waiting reasons that fail the Job at once.
    :param api_failure_tolerance: seconds the API may stay unreachable before the wait ends in error.
    :param log_tail_lines: with ``get_logs``, how many lines of each pod's log go to the task log.
    :param on_finish_action: ``delete_pod`` deletes the Job and its pods when the wait ends,
        ``delete_succeeded_pod`` only when it succeeded, ``delete_active_pod`` only when it had not
        ended (timeout, API error, fail-fast), ``keep_pod`` keeps it.
    :param on_kill_action: ``delete_pod`` (default) deletes the Job (Foreground) when a user kills
        the task; ``keep_pod`` leaves it running.
    :param do_xcom_push: push the JSON the base container wrote to ``/airflow/xcom/return.json`` (at
        most 4 KiB: it travels as the container's termination message); a list when several pods
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
        log_tail_lines: int = DEFAULT_LOG_TAIL_LINES,
        xcom_path: str = XCOM_RETURN_PATH,
        **kwargs: Any,
    ) -> None:
        super().__init__(deferrable=deferrable, wait_until_job_complete=wait_until_job_complete, **kwargs)
        if log_tail_lines < 0:
            raise ValueError(f"log_tail_lines must be >= 0, got {log_tail_lines!r}")
        self.fatal_waiting_reasons = list(fatal_waiting_reasons) if fatal_waiting_reasons else None
        self.api_failure_tolerance = api_failure_tolerance
        self.log_tail_lines = log_tail_lines
        if not xcom_path.startswith("/"):
            raise ValueError(f"xcom_path must be an absolute path in the container, got {xcom_path!r}")
        self.xcom_path = xcom_path

    # -- building --------------------------------------------------------------------------------------
    def build_job_request_obj(self, context: Context | None = None) -> k8s.V1Job:
        """Upstream's Job, minus the XCom sidecar, plus our XCom path and this try's labels on the Job."""
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
            base.termination_message_path = self.xcom_path
            base.termination_message_policy = "File"
        labels = dict(job.metadata.labels or {})
        labels.update(self._get_ti_pod_labels(context))
        job.metadata.labels = labels
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
            f"(its labels: {existing.metadata.labels}); choose another name or delete that Job."
        )

    def _same_try(self, job: k8s.V1Job, context: Context) -> bool:
        want = self._get_ti_pod_labels(context)
        have = job.metadata.labels or {}
        return (
            not job.metadata.deletion_timestamp
            and bool(want)
            and all(have.get(k) == want.get(k) for k in _TRY_LABELS if k in want)
        )

    def _find_job_of_this_try(self, namespace: str, context: Context) -> k8s.V1Job | None:
        """A live Job that an earlier run of this same task try created (a retried worker)."""
        want = self._get_ti_pod_labels(context)
        selector = ",".join(f"{k}={want[k]}" for k in _TRY_LABELS if k in want)
        jobs = self.job_client.list_namespaced_job(namespace=namespace, label_selector=selector).items
        live = [j for j in jobs if not j.metadata.deletion_timestamp]
        if len(live) > 1:
            raise AirflowException(
                f"Found {len(live)} Jobs for this task try in {namespace} ({selector}): "
                f"{[j.metadata.name for j in live]}; delete the extra ones."
            )
        return live[0] if live else None

    def _delete_job(self, job_name: str, namespace: str, uid: str | None) -> None:
        try:
            self.job_client.delete_namespaced_job(
                name=job_name,
                namespace=namespace,
                body=k8s.V1DeleteOptions(
                    propagation_policy="Foreground",
                    preconditions=k8s.V1Preconditions(uid=uid) if uid else None,
                ),
            )
            self.log.info("Deleted Job %s/%s (Foreground: its pods go first)", namespace, job_name)
        except ApiException as e:
            if e.status not in (404, 409):
                raise

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
            delete_on_kill=self.on_kill_action == OnKillAction.DELETE_POD,
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
        async with trigger.watching():
            # A blocking create in this loop is fine: the loop is ours alone, serving our informers.
            job = self._create_job(job_request, context)
            trigger = self._trigger(context, job.metadata.name, job.metadata.namespace, job.metadata.uid)
            return await trigger.wait()

    def execute(self, context: Context) -> Any:
        self.name = self._set_name(self.name)
        job_request = self.build_job_request_obj(context)
        self.job_request_obj = job_request
        if self.wait_until_job_complete and not self.deferrable:
            event = asyncio.run(self._create_and_wait(job_request, context))
            return self.execute_complete(context, event)
        job = self._create_job(job_request, context)
        if self.deferrable:
            self.defer(
                trigger=self._trigger(context, job.metadata.name, job.metadata.namespace, job.metadata.uid),
                method_name="execute_complete",
            )
        return None

    def execute_complete(self, context: Context, event: dict[str, Any], **kwargs: Any) -> Any:
        """Report the trigger's result: logs, XCom, the Job's clean-up, then success or an error."""
        name, ns, uid = event.get("name"), event.get("namespace"), event.get("uid")
        status = event.get("status")
        self.log.info(
            "Job %s/%s ended: %s (%s) %s", ns, name, status, event.get("reason"), event.get("message")
        )
        for pod in event.get("pods") or []:
            self.log.info(
                "  pod %s: %s, exit code %s, reason %s",
                pod.get("name"),
                pod.get("phase"),
                pod.get("exit_code"),
                pod.get("reason"),
            )
        pods = self._read_pods(ns, uid) if (self.get_logs or self.do_xcom_push) else []
        if self.get_logs:
            for pod in pods:
                self._log_tail(pod)
        result = None
        try:
            if status == STATUS_SUCCESS and self.do_xcom_push:
                result = self._xcom_result(pods)
        finally:
            self._finish(name, ns, uid, status)
        if status != STATUS_SUCCESS:
            raise AirflowException(
                f"Kubernetes Job {ns}/{name} {status}: {event.get('reason')}: {event.get('message')}"
            )
        return result

    def _finish(self, name: str | None, ns: str | None, uid: str | None, status: str | None) -> None:
        if not name or not ns:
            return
        action = self.on_finish_action
        ended = status in ("success", "failed")
        delete = (
            action == OnFinishAction.DELETE_POD
            or (action == OnFinishAction.DELETE_SUCCEEDED_POD and status == STATUS_SUCCESS)
            or (action == OnFinishAction.DELETE_ACTIVE_POD and not ended)
        )
        if delete and status != "deleted":
            try:
                self._delete_job(name, ns, uid)
            except ApiException as e:
                self.log.warning("Could not delete Job %s/%s: %s", ns, name, _api_error_message(e))

    def _read_pods(self, ns: str | None, uid: str | None) -> list[k8s.V1Pod]:
        """The Job's pods (oldest first), best effort: a Job deleted with its pods has none left."""
        if not ns or not uid:
            return []
        try:
            pods = self.client.list_namespaced_pod(namespace=ns, label_selector=f"controller-uid={uid}").items
        except ApiException as e:
            self.log.warning("Could not list the Job's pods: %s", _api_error_message(e))
            return []
        return sorted(pods, key=lambda p: (p.metadata.creation_timestamp or 0, p.metadata.name))

    def _log_tail(self, pod: k8s.V1Pod) -> None:
        try:
            text = self.client.read_namespaced_pod_log(
                name=pod.metadata.name,
                namespace=pod.metadata.namespace,
                container=self.base_container_name,
                tail_lines=self.log_tail_lines or None,
            )
        except ApiException as e:
            self.log.warning("Could not read the log of pod %s: %s", pod.metadata.name, _api_error_message(e))
            return
        except Exception as e:  # a log is a nice-to-have; never fail the task for it
            self.log.warning("Could not read the log of pod %s: %s", pod.metadata.name, e)
            return
        for line in (text or "").splitlines():
            self.log.info("[%s] %s", pod.metadata.name, line)

    def _xcom_result(self, pods: list[k8s.V1Pod]) -> Any:
        results: list[Any] = []
        for pod in pods:
            if (pod.status and pod.status.phase) != "Succeeded":
                continue
            for cs in pod.status.container_statuses or []:
                if cs.name != self.base_container_name:
                    continue
                terminated = cs.state.terminated if cs.state else None
                message = (terminated.message if terminated else None) or ""
                if not message.strip():
                    results.append(None)
                    continue
                try:
                    results.append(json.loads(message))
                except ValueError:
                    raise AirflowException(
                        f"Pod {pod.metadata.name} wrote {self.xcom_path} but it is not JSON: {message[:200]!r}"
                    ) from None
        if self.unwrap_single and len(results) == 1:
            return results[0]
        return results

    @cached_property
    def _kill_policy_deletes(self) -> bool:
        return self.on_kill_action == OnKillAction.DELETE_POD

    def on_kill(self) -> None:
        """The worker was told to stop the task: delete the Job (Foreground) if ``on_kill_action`` says so."""
        job = getattr(self, "job", None)
        if job is None or not self._kill_policy_deletes:
            return
        self._delete_job(job.metadata.name, job.metadata.namespace, job.metadata.uid)
