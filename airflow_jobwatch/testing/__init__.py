"""Deprecated path of the DAG-testing API and pytest plugin, which are :mod:`airflow_jobwatch_testing` (the
testing distribution: ``pip install "airflow-jobwatch[testing]"``). Importing it warns and forwards every
name there; the provider's wheel carries only these forwarding modules.

Imports nothing of the provider but the forwarding helper of its ``__init__``.
"""

from __future__ import annotations

from typing import Any

from airflow_jobwatch import _testing_module

_testing = _testing_module(__name__, "airflow_jobwatch_testing")

# Loaded as a pytest plugin by its old name (`-p airflow_jobwatch.testing`, `pytest_plugins = [...]`), this
# module defines no hook or fixture of its own and has pytest load the real plugin, under the name of its
# entry point: pytest skips it when the entry point has already registered it, so it is loaded once.
pytest_plugins = ["airflow_jobwatch_testing.plugin"]


def __getattr__(name: str) -> Any:
    # A package, not replaced in sys.modules: its deprecated submodules (below) are found in this folder,
    # where each forwards to its own new module instead of loading the new file a second time.
    return getattr(_testing, name)
