"""The cleanup by JobWatchExecutor of the finished pods that gone schedulers left behind.

Upstream's ``_adopt_completed_pods``: the Succeeded worker pods of schedulers that are neither this one nor
a live one, searched in a thread by ``sync()`` and at once by adoption, deleted (or labelled done) once no
live scheduler's adoption may still need them.
"""

from __future__ import annotations

from typing import Any

from airflow.configuration import conf

from airflow_jobwatch.executors.base import getfloat
from airflow_jobwatch.executors.pods import DONE_LABEL
from airflow_jobwatch.executors.results import Results

# A gone scheduler's finished pod is cleaned up only once it finished longer ago than the time a live
# scheduler may take to adopt that scheduler's task instances: [scheduler] scheduler_health_check_threshold
# (until it counts as dead) + orphaned_tasks_check_interval (until the next adoption round) + this margin,
# for clock skew between the nodes (the pod's finishedAt) and the scheduler, and loop lag. Before that,
# its task instance may still be queued/running in the database, waiting for an adopter that must find
# the pod to report its end; deleting it would get the task reset and run again.
COMPLETED_POD_GRACE_MARGIN_SECONDS = 60.0


class CompletedPodCleanup(Results):
    """Cleaning up the finished pods of schedulers that are gone, once no adopter may still need them."""

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

        from airflow_jobwatch.kube.meaning.pod_states import completion_time

        finished = completion_time(pod)
        if finished is None:
            return False
        if finished.tzinfo is None:
            finished = finished.replace(tzinfo=UTC)
        grace = (
            getfloat("scheduler", "scheduler_health_check_threshold", 30.0)
            + getfloat("scheduler", "orphaned_tasks_check_interval", 300.0)
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
