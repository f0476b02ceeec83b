"""Deprecated: :mod:`airflow_jobwatch_testing.sandbox` run with ``python -m``, which this module runs (with a warning)."""

from airflow_jobwatch import _moved_to_testing

_moved_to_testing(globals(), "airflow_jobwatch_testing.sandbox")
