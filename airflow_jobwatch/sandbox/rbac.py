"""Deprecated: :mod:`airflow_jobwatch_testing.sandbox.rbac`, which this module stands for (with a warning)."""

from airflow_jobwatch import _moved_to_testing

_moved_to_testing(globals(), "airflow_jobwatch_testing.sandbox.rbac")
