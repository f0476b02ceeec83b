"""Where only the provider is installed (scheduler and worker images), the deprecated paths of the testing
distribution's package (``airflow_jobwatch.sandbox``, ``airflow_jobwatch.testing``, imported or run with
``python -m``) say what to install. The provider is laid out as its wheel installs it, with no
``airflow_jobwatch_testing`` importable."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HINT = 'install it with: pip install "airflow-jobwatch[testing]"'


@pytest.fixture(scope="module")
def provider_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("provider-only")
    shutil.copytree(
        ROOT / "airflow_jobwatch",
        site / "airflow_jobwatch",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return site


def _python(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -S: no site-packages, where a development install provides the testing distribution
    return subprocess.run(
        [sys.executable, "-S", *args],
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        cwd=site,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "args",
    [
        ("-c", "import airflow_jobwatch.sandbox"),
        ("-c", "from airflow_jobwatch.testing import run_dag"),
        ("-c", "import airflow_jobwatch.testing.dagrun"),
        ("-c", "from airflow_jobwatch.sandbox.rbac import check_manifests"),
        ("-m", "airflow_jobwatch.sandbox", "--kubeconfig", "kc"),
        ("-m", "airflow_jobwatch.sandbox.credential", "--key-file", "k", "--user", "u"),
    ],
    ids=[
        "import-sandbox",
        "from-testing",
        "testing-submodule",
        "sandbox-submodule",
        "python-m-sandbox",
        "python-m-credential",
    ],
)
def test_the_missing_testing_distribution_is_named(provider_only: Path, args: tuple[str, ...]) -> None:
    proc = _python(provider_only, *args)
    assert proc.returncode != 0
    assert HINT in proc.stderr, proc.stderr[-2000:]
    assert "ModuleNotFoundError" in proc.stderr


def test_other_missing_modules_keep_the_plain_error(provider_only: Path) -> None:
    proc = _python(provider_only, "-c", "import airflow_jobwatch.no_such_module")
    assert "No module named 'airflow_jobwatch.no_such_module'" in proc.stderr
    assert "pip install" not in proc.stderr
