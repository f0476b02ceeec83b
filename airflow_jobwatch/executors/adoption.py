"""Adoption by JobWatchExecutor of gone schedulers' pods, and the cleanup of their finished pods.

The facade of adoption (what the scheduler calls, ``try_adopt_task_instances``) over one module per part:
:mod:`.completed_pods` (the cleanup of the finished pods gone schedulers left), :mod:`.adoption_listing`
(listing their pods with complete evidence), :mod:`.adoption_matching` (matching the pods to the task
instances: adopt, launch, or unknown) and :mod:`.adoption_retry` (the unresolved ones, looked for again
with backoff).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from airflow_jobwatch.executors.adoption_listing import Unresolved, Where
from airflow_jobwatch.executors.adoption_retry import (
    ADOPTION_RETRY_INITIAL_SECONDS,
    ADOPTION_RETRY_MAX_SECONDS,
    UnresolvedRetry,
)
from airflow_jobwatch.executors.completed_pods import COMPLETED_POD_GRACE_MARGIN_SECONDS

if TYPE_CHECKING:
    from airflow.models.taskinstance import TaskInstance

__all__ = [
    "ADOPTION_RETRY_INITIAL_SECONDS",
    "ADOPTION_RETRY_MAX_SECONDS",
    "COMPLETED_POD_GRACE_MARGIN_SECONDS",
    "Adoption",
    "Unresolved",
    "Where",
]


class Adoption(UnresolvedRetry):
    """Adopting the pods of schedulers that are gone, and cleaning up the finished pods they left."""

    def try_adopt_task_instances(self, tis: Sequence[TaskInstance]) -> Sequence[TaskInstance]:
        """Adopt the worker pods of dead schedulers: relabel them and watch them as our own.

        Pods that finished while no scheduler watched them are reported at once (the task instance
        is still queued/running in the database, so its end was never reported). A task instance whose
        scheduler's pods could not all be listed is adopted unresolved: neither handed back for reset
        nor launched, and looked for again with backoff (:meth:`_retry_unresolved`).
        """
        by_key = {ti.key: ti for ti in tis if ti.queued_by_job_id}
        not_adopted = [ti for ti in tis if not ti.queued_by_job_id]
        for key in self._adopt(by_key):
            self._keep_unresolved(by_key.pop(key))
        # Upstream cleans up the finished pods of gone schedulers here too (_adopt_completed_pods).
        self._cleanup_completed_pods()
        self._retry_cleanup()
        # Already adopted by a previous (retried) call: do not hand them back for reset.
        not_adopted.extend(ti for key, ti in by_key.items() if key not in self.running)
        return not_adopted
