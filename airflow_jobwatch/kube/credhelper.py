"""Deprecated path of :mod:`airflow_jobwatch.kube.cluster.credhelper` (old-module-paths: on purpose).

Kept because it is run as a process: a scheduler started before an in-place upgrade still launches
``python -m airflow_jobwatch.kube.credhelper``, and the new files must answer it. Importing it warns once
(``DeprecationWarning``) and gives the new module's objects; run as ``-m`` it runs the new helper without
the warning, since the helper's stderr is its error message to the parent.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from airflow_jobwatch.kube.cluster import credhelper as _new


def __getattr__(name: str) -> Any:
    return getattr(_new, name)


if __name__ == "__main__":  # no warning: the parent reads the helper's stderr as its error message
    sys.exit(_new.main())
warnings.warn(f"{__name__} is deprecated: import {_new.__name__} instead", DeprecationWarning, stacklevel=2)
