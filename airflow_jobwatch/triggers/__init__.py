"""Triggers: :class:`JobTrigger` and the per-process registry of shared informers it subscribes to.

``from airflow_jobwatch.triggers import JobTrigger`` works; the import is lazy so that importing the
package does not load Airflow's trigger machinery until it is needed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["JobTrigger"]


def __getattr__(name: str) -> Any:
    if name == "JobTrigger":
        from airflow_jobwatch.triggers.job import JobTrigger

        return JobTrigger
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
