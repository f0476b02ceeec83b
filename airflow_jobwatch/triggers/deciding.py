"""What a JobTrigger's wait comes to: the decision from the shared watch's cache, and the payload.

:class:`JobDecisions` is what a :class:`~airflow_jobwatch.triggers.job.JobTrigger` hands its wait to decide
with: the cache (or a tombstone) in, a terminal payload, "still waiting" or "not cached" out. Only
``kube/meaning/states.py`` decides what the Job's state means; the payload is read by ``kube/meaning/result.py``'s
``JobResult`` (the one result reader), and :func:`client_job_dict` gives its ``job`` the shape of
upstream's event. The trigger's only GET of its Job while it waits is here too (:meth:`read_job`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

from airflow_jobwatch import metrics
from airflow_jobwatch.ending.outcomes import (
    OUTCOME_DELETED,
    OUTCOME_FAILED,
    OUTCOME_SUCCESS,
    OUTCOME_UNKNOWN,
)
from airflow_jobwatch.ending.result_keys import result_keys
from airflow_jobwatch.kube.meaning.objects import ModelShapeUnsupported, model_dict_from_json, to_dict
from airflow_jobwatch.kube.meaning.result import JobResult, without_result_annotation
from airflow_jobwatch.kube.meaning.states import FINAL_STATE_UNKNOWN, classify_job, vanished_job_state
from airflow_jobwatch.triggers.notes import REASON_DISRUPTION_RETRIES, WaitNotes
from airflow_jobwatch.triggers.registry import GET_PROJECTED, NamespaceWatch


def uid_of(obj: dict[str, Any] | None) -> str | None:
    return ((obj or {}).get("metadata") or {}).get("uid")


@dataclasses.dataclass(eq=False, kw_only=True)
class JobDecisions:
    """What the cache means for one JobTrigger's Job: the decision, the payload and the GETs of the Job.

    The trigger builds one per wait and hands it to the wait (:class:`~airflow_jobwatch.triggers.waiting.Wait`),
    which calls it through the public methods of :class:`~airflow_jobwatch.triggers.waiting.Decisions`
    and never sees the trigger. What it reads of the trigger is given to it here, as values; ``notes``
    is the trigger's own (what the wait noticed lives as long as the trigger does).

    :param job_name: the Job's name.
    :param namespace: the Job's namespace.
    :param job_uid: the Job's uid, when known: another Job of the same name is then not ours.
    :param base_container_name: the container whose termination message is the XCom result.
    :param do_xcom_push: whether the payload carries the XCom results.
    :param fatal_reasons: container waiting reasons that fail the Job at once.
    :param notes: what the wait noticed (disruptions, suspensions, refused pods).
    :param log: the trigger's logger (masked with the task's secrets).
    """

    job_name: str
    namespace: str
    job_uid: str | None
    base_container_name: str
    do_xcom_push: bool
    fatal_reasons: Collection[str]
    notes: WaitNotes
    log: Any
    #: A 401/403 on this wait's own GET of its Job (see :meth:`read_job`).
    _get_denied: str | None = dataclasses.field(default=None, init=False)

    @property
    def access_denied(self) -> str | None:
        """Why the API refused this wait's own GET of its Job (401/403), if it did: permanent."""
        return self._get_denied

    def payload(
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
            uid=uid_of(job) or self.job_uid,
            pods=pods or [],
            base_container=self.base_container_name,
            do_xcom_push=self.do_xcom_push,
            disruptions=self.notes.disruption_list(),
            job=job,
            keys=result_keys,
            rejected=self.notes.result_rejected,
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
        if self.job_uid and uid_of(job) != self.job_uid:
            return None
        return job

    def decide(self, watch: NamespaceWatch) -> dict[str, Any] | None | bool:
        """The terminal payload the cache implies, None if still waiting, False if the Job is not cached."""
        if not watch.synced:
            return None
        job = self._ours(watch.job(self.job_name))
        if job is not None:
            pods = watch.pods_of(uid_of(job))
            self.notes.observe(job, pods, watch.refusals)  # disruptions, Kueue, refused pods: logged once
            return self.payload_from_state(job, pods, deleted=False)
        tomb = watch.tombstone(self.job_name)
        if tomb is not None and self._ours(tomb.job) is not None:
            if tomb.observed:  # its DELETED event was seen: it says how the Job ended
                return self.payload_from_state(tomb.job, tomb.pods, deleted=True)
            return self._payload_from_vanished(tomb.job, tomb.pods)
        return False

    def _payload_from_vanished(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
        """The payload for a Job that vanished while the watch was away: what its last state or its
        pods' final states prove, else ``unknown`` (never "deleted", which was not seen either)."""
        state = vanished_job_state(job, pods, fatal_waiting_reasons=self.fatal_reasons)
        if state.terminal:
            outcome = OUTCOME_SUCCESS if state.phase == "succeeded" else OUTCOME_FAILED
            return self.payload(outcome, state.reason, state.message, job=job, pods=pods)
        return self.payload(OUTCOME_UNKNOWN, FINAL_STATE_UNKNOWN, state.message, job=job, pods=pods)

    def payload_never_seen(self, watch: NamespaceWatch) -> dict[str, Any]:
        """The payload for a Job the watch never saw end and the API server no longer has (a GET
        answered 404, or found another Job of its name): ``unknown``. Neither its end nor its deletion
        was seen, so it is not "deleted" either: a Job that completed and was removed by
        ``ttlSecondsAfterFinished`` before the trigger started looks exactly like this."""
        other = watch.job(self.job_name)
        replaced = other is not None and self.job_uid is not None and uid_of(other) != self.job_uid
        what = f"Job {self.namespace}/{self.job_name}" + (f" (uid {self.job_uid})" if self.job_uid else "")
        gone = "was replaced by another Job of the same name" if replaced else "no longer exists"
        return self.payload(
            OUTCOME_UNKNOWN,
            FINAL_STATE_UNKNOWN,
            f"{what} {gone}, and the trigger's watch never saw it end: its final state is unknown. "
            "Whether it succeeded, failed or was deleted while running was not seen (a Job removed "
            "by ttlSecondsAfterFinished before the trigger started ends this way): check its results "
            "and its pods' logs before running it again.",
        )

    def payload_from_state(
        self, job: dict[str, Any], pods: list[dict[str, Any]], *, deleted: bool
    ) -> dict[str, Any] | None:
        state = classify_job(job, pods, deleted=deleted, fatal_waiting_reasons=self.fatal_reasons)
        if not state.terminal:
            if not deleted and self.notes.exceeded():
                metrics.job_detected(job, status=OUTCOME_FAILED)
                return self.payload(
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
        return self.payload(outcome, state.reason, state.message, job=job, pods=pods)

    def current_state_note(
        self, watch: NamespaceWatch | None
    ) -> tuple[str, dict[str, Any] | None, list[dict[str, Any]]]:
        if watch is None or not watch.synced:
            return "the Job's state was never read", None, []
        job = self._ours(watch.job(self.job_name))
        if job is None:
            return "the Job is not in the cache", None, []
        pods = watch.pods_of(uid_of(job))
        state = classify_job(job, pods, fatal_waiting_reasons=self.fatal_reasons)
        return f"it was {state.phase}: {state.message}", job, pods

    async def read_job(self, watch: NamespaceWatch, reason: str) -> tuple[bool, dict[str, Any] | None]:
        """GET the Job: (True, job) / (True, None) on 404 / (False, None) when the API failed.

        The trigger's only request while it waits, sent in two cases only, each counted by the watch
        (``NamespaceWatch.count_job_get``, the ``jobwatch.triggerer.job_gets.<reason>`` counter):

        * ``GET_MISSING``: the synced cache has held no Job of this name (nor a tombstone of ours) for
          ``_MISSING_GRACE_SECONDS`` since the trigger first looked; again at most every
          ``poll_interval`` while that lasts;
        * ``GET_PROJECTED``: the result was decided from a projected copy (see :meth:`with_whole_job`).
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
            from airflow_jobwatch.kube.cluster.errors import access_denied_from_exception

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

    async def with_whole_job(self, watch: NamespaceWatch, payload: dict[str, Any]) -> None:
        """Make sure the payload's ``job`` is the whole Job, as upstream's event's is.

        The shared watch stores the Jobs triggers wait for whole, and the namespace's other Jobs projected
        (kube/engine/projection.py): every version of a Job that the watch delivers after its trigger subscribed
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
        answered, job = await self.read_job(watch, GET_PROJECTED)
        if answered and job is not None and uid_of(job) == payload["uid"]:
            # The cache's projected copy has no stored result (kube/engine/projection.py drops it): the whole Job
            # may complete what the pods no longer show, as a Job cached whole does in _payload.
            result = JobResult.from_payload(payload)
            payload.update(
                result.with_stored(job, result_keys, rejected=self.notes.result_rejected).to_payload()
            )
            payload["job"] = client_job_dict(without_result_annotation(job))


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
