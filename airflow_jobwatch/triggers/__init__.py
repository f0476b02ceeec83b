"""Triggers: :class:`JobTrigger` and the per-process registry of shared informers it subscribes to.

``from airflow_jobwatch.triggers import JobTrigger`` works; the import is lazy so that importing the
package does not load Airflow's trigger machinery until it is needed.

Layer 2 (docs/internals.md, "The map"): imports ``kube/``, ``ending/`` (the end of the task, shared with
the operator's resume) and the shared layer (``config``, ``metrics``, ``compat``, ``connections``), never
``executors/``, ``operators/`` or ``cli/``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["JobTrigger"]


def __getattr__(name: str) -> Any:
    if name == "JobTrigger":
        from airflow_jobwatch.triggers.job import JobTrigger

        return JobTrigger
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
