"""The KubernetesJobWatcher: a child process that watches worker pods, and its parent-side supervisor.

Why a subprocess at all? The scheduler's loop is synchronous and may block for seconds (database,
DAG parsing callbacks); a watch that is not read promptly makes the API server close it as a "too
slow" watcher, and an event loop that shares the scheduler's thread cannot run while it blocks. So,
like the upstream KubernetesExecutor, we watch in a child process (``python -m
airflow_jobwatch.executors.watcher``: a new interpreter that imports ``kube/`` and this package, never
Airflow; its metrics come back over the pipe and the parent sends them through ``Stats``).

Each side has its own module:

* :mod:`.child` - the informer loop that runs in the child (imports ``kube/`` and this package, never Airflow);
* :mod:`.supervisor` - the parent's :class:`WatcherSupervisor`: starts, health-checks and replaces
  children, tracks the pods the executor launched, reconciles after a restart, and reports results;
  a facade over :mod:`.slots` (the child of each namespace scope, its restarts and their backoff),
  :mod:`.inbox` (the children's messages into results) and :mod:`.status` (counters and health);
* :mod:`.messages` - the picklable messages between them.

A 410 Gone is not a crash: the informer relists and reconciles inside the child, and reports every
pod that disappeared meanwhile as a tombstone (``DELETED_UNKNOWN``).
"""

from __future__ import annotations

from airflow_jobwatch.executors.watcher.messages import (
    PodRef,
    PodResult,
    PodUpdate,
    Synced,
    WatcherSpec,
    WatcherStats,
)
from airflow_jobwatch.executors.watcher.supervisor import SupervisorCounters, WatcherSupervisor

__all__ = [
    "PodRef",
    "PodResult",
    "PodUpdate",
    "SupervisorCounters",
    "Synced",
    "WatcherSpec",
    "WatcherStats",
    "WatcherSupervisor",
]
