"""Adoption's unresolved retry: task instances adopted while their scheduler's pods could not all be listed.

Neither handed back for reset nor launched (a partial list is no evidence that no pod exists), they are
kept here and looked for again with backoff, their rows read again first.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from airflow_jobwatch.executors.adoption_listing import Unresolved
from airflow_jobwatch.executors.adoption_matching import AdoptionMatching
from airflow_jobwatch.kube.engine.backoff import Backoff

if TYPE_CHECKING:
    from airflow.models.taskinstancekey import TaskInstanceKey

# A task instance adopted unresolved (its gone scheduler's pods could not all be listed) is looked for again
# after this backoff (doubling, with jitter, up to the maximum): an API server or RBAC problem is rarely fixed
# within seconds, and each attempt costs a list per namespace.
ADOPTION_RETRY_INITIAL_SECONDS = 5.0
ADOPTION_RETRY_MAX_SECONDS = 120.0


class UnresolvedRetry(AdoptionMatching):
    """Keeping the task instances adopted unresolved, and looking for their pods again with backoff."""

    def _keep_unresolved(self, ti: Any) -> None:
        """Keep a task instance adopted but unresolved: its row is read again before it is acted on."""
        if isinstance(ti, Unresolved):
            entry = ti
        else:
            state = getattr(ti, "state", None)
            entry = Unresolved(
                key=ti.key,
                queued_by_job_id=ti.queued_by_job_id,
                external_executor_id=getattr(ti, "external_executor_id", None),
                state=getattr(state, "value", state),
                executor_config=getattr(ti, "executor_config", None),
                workload=self._workload_of(ti) if getattr(state, "value", state) == "queued" else None,
                backoff=Backoff(
                    initial_seconds=ADOPTION_RETRY_INITIAL_SECONDS,
                    max_seconds=ADOPTION_RETRY_MAX_SECONDS,
                    reset_after_seconds=float("inf"),
                ),
            )
        now = time.monotonic()
        entry.not_before = now + entry.backoff.failure(now)
        self._unresolved[entry.key] = entry

    def _retry_unresolved(self) -> None:
        """Look again for the pods of task instances adopted unresolved, once their backoff has passed.

        Each is first read again from Airflow's database (one query for all): one that this scheduler no
        longer holds (queued by another, queued again under another launch, reset, finished) is dropped
        without acting. The others are adopted as at adoption time; the rows that still cannot be resolved
        back off again.
        """
        now = time.monotonic()
        due = {key: entry for key, entry in self._unresolved.items() if entry.not_before <= now}
        if not due:
            return
        from airflow_jobwatch.executors import results

        try:
            rows = results.task_instance_rows(list(due))
        except Exception as err:
            self.log.warning("Could not read the unresolved adopted task instances (%s); retrying later", err)
            for entry in due.values():
                self._keep_unresolved(entry)
            return
        for key, entry in list(due.items()):
            row = rows.get(key)
            held = (
                row is not None
                and row.try_number == key.try_number
                and str(row.queued_by_job_id) == self.scheduler_job_id
                and row.external_executor_id == entry.external_executor_id
                and row.state in ("queued", "running")
            )
            if not held:
                del self._unresolved[key]
                due.pop(key)
                self.log.info(
                    "%s, adopted unresolved, is no longer this scheduler's launch %s (now %s); dropped",
                    key,
                    entry.external_executor_id,
                    "gone"
                    if row is None
                    else f"{row.state}, queued by {row.queued_by_job_id}, launch {row.external_executor_id}",
                )
                continue
            assert row is not None
            entry.state = row.state
        if not due:
            return
        by_key: dict[TaskInstanceKey, Any] = dict(due)
        unknown = self._adopt(by_key)
        for key, entry in due.items():
            if key in unknown:
                self._keep_unresolved(entry)
                continue
            del self._unresolved[key]
            if key in by_key and key not in self.running:
                # Listed everywhere: no pod of its current launch exists. It can no longer be handed back
                # for reset; a RUNNING one has lost its worker and is failed by Airflow's task heartbeat
                # timeout, a QUEUED one whose workload could not be rebuilt by [scheduler] task_queued_timeout.
                self.log.warning(
                    "%s (%s) has no pod of its launch %s in any namespace; left to Airflow's timeouts",
                    key,
                    entry.state,
                    entry.external_executor_id,
                )
