"""Deprecated path of :mod:`airflow_jobwatch.kube.cluster.client` (old-module-paths: on purpose).

Kept because a scheduler started before an in-place upgrade hands the credential helper its
:class:`~airflow_jobwatch.kube.cluster.client.ClusterConfig` pickled under this module's name, and the
helper of the new files must unpickle it. Importing it warns once (``DeprecationWarning``) and gives the
new module's objects.
"""

from __future__ import annotations

import warnings
from typing import Any

from airflow_jobwatch.kube.cluster import client as _new

warnings.warn(f"{__name__} is deprecated: import {_new.__name__} instead", DeprecationWarning, stacklevel=2)


def __getattr__(name: str) -> Any:
    return getattr(_new, name)
