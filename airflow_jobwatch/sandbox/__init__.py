"""Deprecated path of the embedded Kubernetes sandbox, which is :mod:`airflow_jobwatch_testing.sandbox` (the
testing distribution: ``pip install "airflow-jobwatch[testing]"``). Importing it warns and forwards every
name there; the provider's wheel carries only these forwarding modules.

Imports nothing of the provider but the forwarding helper of its ``__init__``.
"""

from __future__ import annotations

from typing import Any

from airflow_jobwatch import _testing_module

_sandbox = _testing_module(__name__, "airflow_jobwatch_testing.sandbox")


def __getattr__(name: str) -> Any:
    # A package, not replaced in sys.modules: its deprecated submodules (below) are found in this folder,
    # where each forwards to its own new module instead of loading the new file a second time.
    return getattr(_sandbox, name)
