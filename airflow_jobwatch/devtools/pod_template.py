"""The sandbox's worker pod template; it moved to :mod:`airflow_jobwatch.testing.pod_template` (in the wheel,
for tests that run the executor against the sandbox). Kept for the harness and the benchmarks."""

from __future__ import annotations

from airflow_jobwatch.testing.pod_template import SANDBOX_IMAGE, pod_template_yaml

__all__ = ["SANDBOX_IMAGE", "pod_template_yaml"]
