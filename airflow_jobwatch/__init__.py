"""airflow-jobwatch: an Apache Airflow provider that runs work on Kubernetes and never loses track of it."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

__version__ = "0.1.0"

#: The subpackages of the testing distribution (``pip install "airflow-jobwatch[testing]"``), which
#: installs them into this package; the provider's own wheel carries neither.
TESTING_SUBPACKAGES = ("airflow_jobwatch.sandbox", "airflow_jobwatch.testing")
TESTING_INSTALL_HINT = 'pip install "airflow-jobwatch[testing]"'


class _TestingDistributionHint:
    """Last on ``sys.meta_path``: asked only after every real finder found nothing, so where the testing
    distribution is installed (or in a source checkout) it is never consulted. Where it is not, importing
    ``airflow_jobwatch.sandbox`` or ``airflow_jobwatch.testing`` (or ``python -m`` either) fails with a
    ``ModuleNotFoundError`` that says what to install, instead of a bare "No module named"."""

    @staticmethod
    def find_spec(fullname: str, path: Sequence[str] | None = None, target: Any = None) -> None:
        if fullname in TESTING_SUBPACKAGES:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: the sandbox and the pytest plugin are the testing "
                f"distribution of airflow-jobwatch, not installed here; install it with: "
                f"{TESTING_INSTALL_HINT}",
                name=fullname,
            )
        return None


if not any(isinstance(finder, _TestingDistributionHint) for finder in sys.meta_path):
    sys.meta_path.append(_TestingDistributionHint())
