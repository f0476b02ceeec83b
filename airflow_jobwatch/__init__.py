"""airflow-jobwatch: an Apache Airflow provider that runs work on Kubernetes and never loses track of it."""

from __future__ import annotations

import importlib
import sys
import warnings
from types import ModuleType
from typing import Any

__version__ = "0.1.0"

#: The testing distribution's import package (the sandbox and the pytest plugin), installed by
#: ``pip install "airflow-jobwatch[testing]"``; the provider's own wheel carries none of it.
TESTING_PACKAGE = "airflow_jobwatch_testing"
TESTING_INSTALL_HINT = 'pip install "airflow-jobwatch[testing]"'


def _testing_module(old: str, new: str, *, stacklevel: int = 3) -> ModuleType:
    """The testing distribution's module ``new``, which the deprecated path ``old`` stands for.

    Warns with a ``DeprecationWarning`` naming ``new``, once it is imported. Where the testing
    distribution is not installed, raises ``ModuleNotFoundError`` naming the command that installs it; a
    module missing *inside* an installed testing distribution keeps its own error.

    The default ``stacklevel`` points the warning at the code that imported ``old``: this function, the
    deprecated module, its importer (the import system's own frames are skipped by ``warnings``).
    """
    try:
        module = importlib.import_module(new)
    except ModuleNotFoundError as exc:
        if exc.name != TESTING_PACKAGE:
            raise
        raise ModuleNotFoundError(
            f"No module named {old!r}: the sandbox and the pytest plugin are the testing distribution of "
            f"airflow-jobwatch ({new}), not installed here; install it with: {TESTING_INSTALL_HINT}",
            name=old,
        ) from None
    warnings.warn(
        f"{old} is deprecated: use {new} (from the testing distribution, airflow-jobwatch-testing)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return module


def _moved_to_testing(module_globals: dict[str, Any], new: str) -> None:
    """Make the deprecated module whose globals are ``module_globals`` stand for ``new``.

    Imported, it is replaced in ``sys.modules`` by ``new`` itself, so that every name (and every class's
    identity) is the testing distribution's. Run with ``python -m``, it runs ``new`` as ``__main__``
    (imported first, ``new`` would run twice and ``runpy`` would warn).
    """
    old = module_globals["__spec__"].name
    if module_globals["__name__"] != "__main__":
        sys.modules[old] = _testing_module(old, new, stacklevel=4)
        return
    import runpy

    # `python -m` imported the deprecated package first, which has found the testing distribution.
    command = old.removesuffix(".__main__")
    warnings.warn(f"python -m {command} is deprecated: use python -m {new}", DeprecationWarning, stacklevel=2)
    runpy.run_module(new, run_name="__main__", alter_sys=True)
