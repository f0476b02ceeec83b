"""A JobTrigger's kill path: whether ``on_kill`` may delete the Job, and the deletion.

:class:`JobKilling` is the kill half of :class:`~airflow_jobwatch.triggers.job.JobTrigger`, whose
``on_kill`` (what Airflow calls) runs :meth:`JobKilling._kill` shielded. Only a user's kill deletes the
Job: Airflow 3.3 also calls ``on_kill`` on a triggerer that lost its trigger to another one, which
still waits for the Job; and a Job that has already ended is kept for the task's logs and result.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger

from airflow_jobwatch.kube.cluster import client as kube_client
from airflow_jobwatch.kube.meaning.states import classify_job
from airflow_jobwatch.triggers.deciding import uid_of


class JobKilling(BaseTrigger):
    """The kill half of :class:`~airflow_jobwatch.triggers.job.JobTrigger` (its only subclass)."""

    if TYPE_CHECKING:  # set by JobTrigger.__init__
        job_name: str
        namespace: str
        job_uid: str | None
        on_kill_propagation_policy: str
        termination_grace_period: int | None
        delete_pods_on_kill: bool

        async def _resolved_cluster_config(self) -> kube_client.ClusterConfig: ...

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
        if self.job_uid and uid_of(job) != self.job_uid:
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
                from airflow_jobwatch.kube.cluster.errors import access_denied_from_exception

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
