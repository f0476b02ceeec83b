"""JobWatchExecutor (``[core] executor = airflow_jobwatch.executors.JobWatchExecutor``).

The class is imported lazily, so that the KubernetesJobWatcher child process (which imports
``airflow_jobwatch.executors.watcher``) does not import Airflow.

Layer 2 (docs/internals.md, "The map"): imports ``kube/`` and the shared layer (``config``, ``metrics``,
``compat``, ``connections``), never ``triggers/``, ``operators/`` or ``cli/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_jobwatch.executors.jobwatch_executor import JobWatchExecutor

__all__ = ["JobWatchExecutor"]


def __getattr__(name: str) -> Any:
    if name == "JobWatchExecutor":
        from airflow_jobwatch.executors.jobwatch_executor import JobWatchExecutor

        return JobWatchExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
