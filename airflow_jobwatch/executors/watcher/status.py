"""The supervisor's status: its counters, health verdict and per-namespace view, and the log of changes."""

from __future__ import annotations

import logging

from airflow_jobwatch.executors.watcher.children import SupervisorCounters as SupervisorCounters
from airflow_jobwatch.executors.watcher.slots import ChildSlots

# Every part of the supervisor logs under the name it always had.
log = logging.getLogger("airflow_jobwatch.executors.watcher.supervisor")


class StatusReporting(ChildSlots):
    """What the supervisor tells of itself: counters, health, the children's pids and sync state."""

    def child_pids(self) -> dict[str | None, int | None]:
        return {ns: (s.child.process.pid if s.child else None) for ns, s in self._slots.items()}

    def all_synced(self) -> bool:
        return all(s.child is not None and s.child.synced for s in self._slots.values())

    def _update_counters(self) -> None:
        c = self.counters
        was_healthy = c.healthy
        c.restarts = sum(s.restarts for s in self._slots.values())
        c.relists = sum(s.relists_done + (s.stats.relists if s.stats else 0) for s in self._slots.values())
        c.watches = sum(s.watches_done + (s.stats.watches if s.stats else 0) for s in self._slots.values())
        # The informer's own verdict (failing for unhealthy_after_seconds); a child being restarted is
        # counted in ``restarts``, not here.
        c.healthy = all(s.stats is None or s.stats.healthy for s in self._slots.values())
        errors = [s.stats.last_error for s in self._slots.values() if s.stats and s.stats.last_error]
        c.last_error = errors[0] if errors else None
        denied = [s.stats.access_denied for s in self._slots.values() if s.stats and s.stats.access_denied]
        c.access_denied = denied[0] if denied else None
        if was_healthy and not c.healthy and c.access_denied:
            log.error(
                "KubernetesJobWatcher is refused by the Kubernetes API: %s Running tasks are kept and will "
                "be reported once the permission is granted.",
                c.access_denied,
            )
        elif was_healthy and not c.healthy:
            # Tasks keep running and are reported once the API answers again; nothing is failed for this.
            log.error(
                "KubernetesJobWatcher cannot reach the Kubernetes API (last error: %s); running tasks are "
                "kept and will be reported when it answers again",
                c.last_error,
            )
        elif c.healthy and not was_healthy:
            log.info("KubernetesJobWatcher is healthy again")
        c.per_namespace = {
            (ns or "*"): {
                "generation": s.generation,
                "restarts": s.restarts,
                "synced": bool(s.child and s.child.synced),
                "pid": s.child.process.pid if s.child else None,
                "last_restart_reason": s.last_restart_reason,
            }
            for ns, s in self._slots.items()
        }
