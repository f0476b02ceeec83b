"""Operators: :class:`KubernetesJobOperator`, :class:`KubernetesStartKueueJobOperator`.

``from airflow_jobwatch.operators import KubernetesJobOperator`` works; the import is lazy so that
importing the package does not load the cncf.kubernetes provider until it is needed.

Layer 3 (docs/internals.md, "The map"): imports ``triggers/`` (the operator defers to ``JobTrigger``),
``ending/`` (it ends its task with the same code as the trigger), ``kube/`` and the shared layer; never
``executors/`` or ``cli/``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KubernetesJobOperator", "KubernetesStartKueueJobOperator"]


def __getattr__(name: str) -> Any:
    if name == "KubernetesJobOperator":
        from airflow_jobwatch.operators.job import KubernetesJobOperator

        return KubernetesJobOperator
    if name == "KubernetesStartKueueJobOperator":
        from airflow_jobwatch.operators.kueue import KubernetesStartKueueJobOperator

        return KubernetesStartKueueJobOperator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
