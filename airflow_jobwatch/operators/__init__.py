"""Operators: :class:`KubernetesJobOperator`.

``from airflow_jobwatch.operators import KubernetesJobOperator`` works; the import is lazy so that
importing the package does not load the cncf.kubernetes provider until it is needed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KubernetesJobOperator"]


def __getattr__(name: str) -> Any:
    if name == "KubernetesJobOperator":
        from airflow_jobwatch.operators.job import KubernetesJobOperator

        return KubernetesJobOperator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
